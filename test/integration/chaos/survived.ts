/** What every chaos run must show, whatever its schedule (the chaos tests share these). */
import assert from 'node:assert/strict';
import type { ModeReport } from '../../../testing/chaos/chaos';
import { POSTGRES_JS_CRASH, type FaultKind } from '../../../testing/chaos/stack';

/** The run completed, bit-identical to its uninterrupted twin, and no process died that the schedule did not kill. */
export function assertSurvived(m: ModeReport) {
  assert.equal(m.status, 'completed', `${m.mode}: the chaos run did not complete: ${m.error ?? ''}`);
  assert.deepEqual(m.comparison?.problems, [], `${m.mode}: differs from the uninterrupted run`);
  assert.ok(m.identical, `${m.mode}: identical`);
  // Except by the known postgres.js crash on a closed connection (reported above; an upstream bug without a release fixing it).
  assert.deepEqual(
    m.unplanned.filter((u) => !u.includes(POSTGRES_JS_CRASH)),
    [],
    `${m.mode}: processes died that the schedule did not kill`,
  );
}

/** Every version and some episodes were compared, and every kind of `kinds` was killed while the run was running. */
export function assertFullyCovered(m: ModeReport, kinds: readonly FaultKind[]) {
  assert.ok(
    (m.comparison?.episodesCompared ?? 0) > 0 && (m.comparison?.versionsCompared ?? 0) === m.steps + 1,
    `${m.mode}: compared every version and some episodes`,
  );
  for (const kind of kinds)
    assert.ok(
      m.kills.some((k) => k.kind === kind),
      `${m.mode}: ${kind} was never killed mid-run (the run ended first)`,
    );
}
