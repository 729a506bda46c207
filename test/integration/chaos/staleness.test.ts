/**
 * Chaos with staleness 1 (asynchronous RL): the pool worker and the control worker
 * are SIGKILLed while a rollout of a later step overlaps an update; the run ends
 * bit-identical to an uninterrupted run with the same k (versions' weights and
 * optimizer state, stored trajectories). Short here; the long one, with every kind
 * and both rollout modes: TROUPE_CHAOS_LONG=1 (or node --import tsx testing/chaos/chaos.ts --long --staleness 1).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatReport, LONG_STALE, runChaos, SHORT_STALE } from '../../../testing/chaos/chaos';
import { POSTGRES_JS_CRASH } from '../../../testing/chaos/stack';

const long = process.env.TROUPE_CHAOS_LONG === '1';
const base = long ? LONG_STALE : SHORT_STALE;

test(
  `chaos with staleness 1 (${long ? 'long' : 'short'}): worker kills during overlapped rollout and update change nothing about the result`,
  { timeout: long ? 3 * 3600_000 : 900_000 },
  async (t) => {
    const report = await runChaos({ ...base, log: (line) => process.stderr.write(`${line}\n`) });
    for (const line of formatReport(report).split('\n')) t.diagnostic(line);
    for (const m of report.modes) {
      assert.equal(m.status, 'completed', `${m.mode}: the chaos run did not complete: ${m.error ?? ''}`);
      assert.deepEqual(m.comparison?.problems, [], `${m.mode}: differs from the uninterrupted run`);
      assert.ok(m.identical, `${m.mode}: identical`);
      assert.ok(
        (m.comparison?.episodesCompared ?? 0) > 0 && (m.comparison?.versionsCompared ?? 0) === m.steps + 1,
        `${m.mode}: compared every version and some episodes`,
      );
      assert.deepEqual(
        m.unplanned.filter((u) => !u.includes(POSTGRES_JS_CRASH)),
        [],
        `${m.mode}: processes died that the schedule did not kill`,
      );
      for (const kind of base.kinds)
        assert.ok(
          m.kills.some((k) => k.kind === kind),
          `${m.mode}: ${kind} was never killed mid-run (the run ended first)`,
        );
    }
  },
);
