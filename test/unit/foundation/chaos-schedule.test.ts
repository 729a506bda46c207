// The chaos harness's kill schedules (testing/chaos/chaos.ts): pure functions of their seed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRunConfig, partialShape } from '../../../schema/run-config';
import {
  LONG_NO_PAUSE,
  LONG_PARTIAL,
  LONG_PARTIAL_STALE,
  LONG_TRANSFORMER,
  PAIRS,
  runConfig,
  schedule,
  SHORT,
  SHORT_NO_PAUSE,
  SHORT_PARTIAL,
  SHORT_TRANSFORMER,
} from '../../../testing/chaos/chaos';
import { FAULT_KINDS } from '../../../testing/chaos/stack';

test('paired kills are drawn only when asked for: the short no-pause schedule is what it was', () => {
  // Recorded from the harness before paired kills existed (commit bab70d2).
  const plan = schedule(SHORT_NO_PAUSE, 'batched');
  assert.deepEqual(
    plan.map((p) => [p.kind, p.restartDelayMs, p.againAfterMs, p.with]),
    [
      ['temporal', 543, 1151, undefined],
      ['engine', 305, 1605, undefined],
      ['pool-worker', 552, 1621, undefined],
    ],
  );
});

test('a paired kill takes the partner of its kind; the engine is never paired', () => {
  const all = schedule({ ...LONG_NO_PAUSE, kills: 20, pairShare: 1 }, 'batched');
  for (const p of all) assert.equal(p.with, PAIRS[p.kind], `${p.kind} paired with ${p.with}`);
  assert.deepEqual(
    new Set(all.filter((p) => p.with).map((p) => `${p.kind}+${p.with}`)),
    new Set(['temporal+postgres', 'postgres+temporal', 'control-worker+pool-worker', 'pool-worker+control-worker']),
  );
  assert.ok(schedule({ ...LONG_NO_PAUSE, pairShare: 0 }, 'batched').every((p) => p.with === undefined));
});

test('the long no-pause schedule kills every kind, each twice, some paired', () => {
  for (const mode of ['batched', 'durable'] as const) {
    const plan = schedule(LONG_NO_PAUSE, mode);
    assert.deepEqual(new Set(plan.map((p) => p.kind)), new Set(FAULT_KINDS), mode);
    assert.ok(
      plan.every((p) => p.againAfterMs !== undefined && p.againAfterMs >= 500 && p.againAfterMs <= 1700),
      mode,
    );
    assert.ok(
      plan.some((p) => p.with !== undefined),
      mode,
    );
    assert.deepEqual(schedule(LONG_NO_PAUSE, mode), plan, `${mode}: the same seed gives the same schedule`);
  }
});

test('the transformer schedules train recall; the short one kills its engine and pool worker once per mode, the long one every kind twice', () => {
  for (const mode of ['batched', 'durable'] as const) {
    assert.equal(runConfig(SHORT_TRANSFORMER, mode).team, 'recall');
    assert.equal(runConfig(SHORT, mode).team, 'math');
    assert.deepEqual(
      schedule(SHORT_TRANSFORMER, mode)
        .map((p) => p.kind)
        .sort(),
      ['engine', 'pool-worker'],
    );
    const counts = new Map<string, number>();
    for (const p of schedule(LONG_TRANSFORMER, mode)) counts.set(p.kind, (counts.get(p.kind) ?? 0) + 1);
    assert.deepEqual(Object.fromEntries(counts), Object.fromEntries(FAULT_KINDS.map((k) => [k, 2])), mode);
  }
});

test('the long partial schedules (k = 0 and k = 1) run with maxCarrySteps 1 (held groups); the short one, in npm test, without a bound', () => {
  // shape: ceil(4 groups x 1.5) in flight, 4 whole groups end a rollout
  assert.deepEqual(partialShape(parseRunConfig(runConfig(LONG_PARTIAL, 'batched'))), { inFlight: 6, minFinished: 4, maxCarrySteps: 1 });
  assert.deepEqual(partialShape(parseRunConfig(runConfig(SHORT_PARTIAL, 'batched'))), { inFlight: 6, minFinished: 4 });
  // the long asynchronous one keeps the bound and adds k = 1
  const stale = parseRunConfig(runConfig(LONG_PARTIAL_STALE, 'batched'));
  assert.deepEqual(partialShape(stale), { inFlight: 6, minFinished: 4, maxCarrySteps: 1 });
  assert.equal(stale.staleness, 1);
});
