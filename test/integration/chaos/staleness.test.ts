/**
 * Chaos with staleness 1 (asynchronous RL): the pool worker and the control worker
 * are SIGKILLed while a rollout of a later step overlaps an update; the run ends
 * bit-identical to an uninterrupted run with the same k (versions' weights and
 * optimizer state, stored trajectories). The short one prunes episodes in the
 * background meanwhile (SHORT_STALE.retention), in the control worker it kills.
 * Short here; the long one, with every kind
 * and both rollout modes: TROUPE_CHAOS_LONG=1 (or node --import tsx testing/chaos/chaos.ts --long --staleness 1).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatReport, LONG_STALE, runChaos, SHORT_STALE } from '../../../testing/chaos/chaos';
import { assertFullyCovered, assertSurvived } from './survived';

const long = process.env.TROUPE_CHAOS_LONG === '1';
const base = long ? LONG_STALE : SHORT_STALE;

test(
  `chaos with staleness 1 (${long ? 'long' : 'short'}): worker kills during overlapped rollout and update change nothing about the result`,
  { timeout: long ? 3 * 3600_000 : 900_000 },
  async (t) => {
    const report = await runChaos({ ...base, log: (line) => process.stderr.write(`${line}\n`) });
    for (const line of formatReport(report).split('\n')) t.diagnostic(line);
    for (const m of report.modes) {
      assertSurvived(m);
      assertFullyCovered(m, base.kinds);
      if (base.retention) assert.ok((m.retention?.background ?? 0) > 0, `${m.mode}: background retention pruned nothing of the chaos run`);
    }
  },
);
