/**
 * Chaos with partial rollouts in an asynchronous run (k = 1): the pool worker is SIGKILLed
 * while a step's rollout, continuing the episodes the previous one carried, runs beside
 * the previous step's update; the run ends identical to its uninterrupted twin with the
 * same k, carried episodes and their generations included, and no carried generation is
 * sampled again (the checks of partial-checks.ts).
 * The schedule: SHORT_PARTIAL_STALE (node --import tsx testing/chaos/chaos.ts --partial --staleness 1); with
 * TROUPE_CHAOS_LONG=1, LONG_PARTIAL_STALE (--partial --long --staleness 1): maxCarrySteps 1 and more kills,
 * which must land in steps that hold groups at the bound too.
 */
import { test } from 'node:test';
import { LONG_PARTIAL_STALE, runChaos, SHORT_PARTIAL_STALE } from '../../../testing/chaos/chaos';
import { checkPartialChaos } from './partial-checks';

const long = process.env.TROUPE_CHAOS_LONG === '1';

test(
  `chaos with partial rollouts and staleness 1 (${long ? 'long, maxCarrySteps 1' : 'short'}): pool worker kills while carried episodes continue beside updates change nothing`,
  { timeout: long ? 3600_000 : 900_000 },
  async (t) => {
    const options = long ? LONG_PARTIAL_STALE : SHORT_PARTIAL_STALE;
    checkPartialChaos(
      t,
      await runChaos({ ...options, seed: Number(process.env.TROUPE_CHAOS_SEED ?? options.seed), log: (line) => process.stderr.write(`${line}\n`) }),
    );
  },
);
