/**
 * The checks of protocol v2, as data: id, what it checks, and a run function
 * that returns a short pass detail, throws Fail (observed vs expected) or Skip
 * (why it does not apply). They run in this order, one file per area; each
 * makes the fixtures it needs through the Context, so any subset runs on its own.
 */
import type { Check } from '../context';
import { ABORT_CHECKS } from './abort';
import { ERROR_CHECKS } from './errors';
import { GENERATE_CHECKS } from './generate';
import { HEALTH_CHECKS } from './health';
import { INIT_CHECKS } from './init';
import { LIMIT_CHECKS } from './limits';
import { LORA_CHECKS } from './lora';
import { SCORE_CHECKS } from './score';
import { UPDATE_CHECKS } from './update';
import { VERSION_CHECKS } from './versions';

export type { Check } from '../context';
export { sequenceProblems } from './fixtures';

export const CHECKS: Check[] = [
  ...HEALTH_CHECKS,
  ...INIT_CHECKS,
  ...VERSION_CHECKS,
  ...GENERATE_CHECKS,
  ...SCORE_CHECKS,
  ...UPDATE_CHECKS,
  ...LORA_CHECKS,
  ...ERROR_CHECKS,
  ...ABORT_CHECKS,
  ...LIMIT_CHECKS,
];
