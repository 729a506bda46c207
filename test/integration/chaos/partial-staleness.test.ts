/**
 * Chaos with partial rollouts in an asynchronous run (k = 1): the pool worker is SIGKILLed
 * while a step's rollout, continuing the episodes the previous one carried, runs beside
 * the previous step's update; the run ends identical to its uninterrupted twin with the
 * same k, carried episodes and their generations included, and no carried generation is
 * sampled again (the checks of partial-checks.ts).
 * The schedule: SHORT_PARTIAL_STALE (node --import tsx testing/chaos/chaos.ts --partial --staleness 1).
 */
import { test } from 'node:test';
import { runChaos, SHORT_PARTIAL_STALE } from '../../../testing/chaos/chaos';
import { checkPartialChaos } from './partial-checks';

test(
  'chaos with partial rollouts and staleness 1: pool worker kills while carried episodes continue beside updates change nothing',
  { timeout: 900_000 },
  async (t) => {
    checkPartialChaos(t, await runChaos({ ...SHORT_PARTIAL_STALE, log: (line) => process.stderr.write(`${line}\n`) }));
  },
);
