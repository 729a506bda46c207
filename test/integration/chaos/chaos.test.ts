/**
 * Chaos: a real training run (bundled `math` team, both rollout modes) on a
 * stack of separate processes started by `troupe up`'s code, while a seeded
 * schedule SIGKILLs the control worker, the pool worker, the engine, the
 * Temporal dev server and PostgreSQL, each restarted after a short delay. The
 * run must complete and end exactly where an uninterrupted run of the same
 * config ends: contiguous versions, one per step, every version's weights and
 * optimizer state bit-identical, the same stored trajectories per step.
 *
 * Short by default (each kind killed once per mode, ~3 min); the long one:
 *   TROUPE_CHAOS_LONG=1 npm test -- chaos/chaos      (or: node --import tsx testing/chaos/chaos.ts --long)
 * TROUPE_CHAOS_SEED=N picks another kill schedule.
 *
 * A second schedule never pauses the run and kills each process twice, the second time
 * 0.5-1.7 s after it is back; an engine dies again before it listens, and a restarted pool
 * worker loses its engine during its own start-up (fatal to the worker before issue 18).
 * Its control worker prunes episodes in the background every second (keep the newest 3
 * steps) while the engine, pool worker and Temporal die around it: no version's bytes
 * change, and what it keeps equals the twin's after both are pruned alike.
 *
 * A third runs the `recall` team's transformer (issue 12) in both modes: short, its engine
 * and pool worker killed once per mode; with TROUPE_CHAOS_LONG=1, every kind twice per mode.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatReport, LONG, LONG_TRANSFORMER, runChaos, SHORT, SHORT_NO_PAUSE, SHORT_TRANSFORMER } from '../../../testing/chaos/chaos';
import { FAULT_KINDS } from '../../../testing/chaos/stack';
import { assertFullyCovered, assertSurvived } from './survived';

const long = process.env.TROUPE_CHAOS_LONG === '1';
const base = long ? LONG : SHORT;

test(
  `chaos (${long ? 'long' : 'short'}): SIGKILL of every process kind mid-run changes nothing about the result`,
  { timeout: long ? 3 * 3600_000 : 900_000 },
  async (t) => {
    const report = await runChaos({ ...base, seed: Number(process.env.TROUPE_CHAOS_SEED ?? base.seed), log: (line) => process.stderr.write(`${line}\n`) });
    for (const line of formatReport(report).split('\n')) t.diagnostic(line);
    for (const m of report.modes) {
      assertSurvived(m);
      assertFullyCovered(m, FAULT_KINDS);
    }
  },
);

test('chaos (no pause, double kills): processes killed again right after their restart change nothing either', { timeout: 900_000 }, async (t) => {
  const report = await runChaos({ ...SHORT_NO_PAUSE, log: (line) => process.stderr.write(`${line}\n`) });
  for (const line of formatReport(report).split('\n')) t.diagnostic(line);
  for (const m of report.modes) {
    assertSurvived(m);
    // Without pauses a fast run may end before later kills; the first double kill lands early.
    assert.ok(
      m.kills.some((k) => k.again),
      `${m.mode}: no process was killed a second time mid-run`,
    );
    assert.ok(
      m.kills.some((k) => k.engineKilledAtStart !== undefined),
      `${m.mode}: no engine was killed during its pool worker's start-up`,
    );
    // the control worker's retention loop pruned while processes died around it (SHORT_NO_PAUSE.retention)
    assert.ok((m.retention?.background ?? 0) > 0, `${m.mode}: background retention pruned nothing of the chaos run`);
  }
});

test(
  `chaos with a transformer team (${long ? 'long' : 'short'}): kills mid-run change nothing about the result`,
  { timeout: long ? 3 * 3600_000 : 900_000 },
  async (t) => {
    const options = long ? LONG_TRANSFORMER : SHORT_TRANSFORMER;
    const report = await runChaos({
      ...options,
      seed: Number(process.env.TROUPE_CHAOS_SEED ?? options.seed),
      log: (line) => process.stderr.write(`${line}\n`),
    });
    for (const line of formatReport(report).split('\n')) t.diagnostic(line);
    for (const m of report.modes) {
      assertSurvived(m);
      assertFullyCovered(m, options.kinds);
    }
  },
);
