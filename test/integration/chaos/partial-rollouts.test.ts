/**
 * Chaos with partial rollouts (issue #31): the pool worker is SIGKILLed during steps
 * whose rollout continues carried episodes; the run ends identical to an uninterrupted
 * twin: versions' bytes, trained episodes and the carried episodes with their
 * generations (testing/chaos/compare.ts), so a kill lost and repeated none of them. The
 * engines' counters (testing/chaos/work-meter.ts) show what was sampled twice: only the killed
 * attempts' tokens; the engine after the last kill sampled exactly the twin's tokens from the
 * retried step on, so no carried generation was sampled again (partial-checks.ts).
 * The schedule: SHORT_PARTIAL (node --import tsx testing/chaos/chaos.ts --partial).
 */
import { test } from 'node:test';
import { runChaos, SHORT_PARTIAL } from '../../../testing/chaos/chaos';
import { checkPartialChaos } from './partial-checks';

test('chaos with partial rollouts: pool worker kills while carried episodes continue change nothing about the result', { timeout: 900_000 }, async (t) => {
  checkPartialChaos(t, await runChaos({ ...SHORT_PARTIAL, log: (line) => process.stderr.write(`${line}\n`) }));
});
