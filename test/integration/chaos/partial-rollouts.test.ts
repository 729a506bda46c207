/**
 * Chaos with partial rollouts (issue #31): the pool worker is SIGKILLed during steps
 * whose rollout continues carried episodes; the run ends identical to an uninterrupted
 * twin: versions' bytes, trained episodes and the carried episodes with their
 * generations (testing/chaos/compare.ts), so a kill lost and repeated none of them. The
 * engines' counters (testing/chaos/work-meter.ts) show what was sampled twice: only the killed
 * attempts' tokens; the engine after the last kill sampled exactly the twin's tokens from the
 * retried step on, so no carried generation was sampled again (partial-checks.ts).
 * The schedule: SHORT_PARTIAL (node --import tsx testing/chaos/chaos.ts --partial); with
 * TROUPE_CHAOS_LONG=1, LONG_PARTIAL (--partial --long): maxCarrySteps 1 and more kills, which
 * must land in steps that hold groups at the bound too.
 */
import { test } from 'node:test';
import { LONG_PARTIAL, runChaos, SHORT_PARTIAL } from '../../../testing/chaos/chaos';
import { checkPartialChaos } from './partial-checks';

const long = process.env.TROUPE_CHAOS_LONG === '1';

test(
  `chaos with partial rollouts (${long ? 'long, maxCarrySteps 1' : 'short'}): pool worker kills while carried episodes continue change nothing about the result`,
  { timeout: long ? 3600_000 : 900_000 },
  async (t) => {
    const options = long ? LONG_PARTIAL : SHORT_PARTIAL;
    checkPartialChaos(
      t,
      await runChaos({ ...options, seed: Number(process.env.TROUPE_CHAOS_SEED ?? options.seed), log: (line) => process.stderr.write(`${line}\n`) }),
    );
  },
);
