/**
 * Chaos with partial rollouts (issue #31): the pool worker is SIGKILLed during steps
 * whose rollout continues carried episodes; the run ends identical to an uninterrupted
 * twin: versions' bytes, trained episodes and the carried episodes with their
 * generations (testing/chaos/compare.ts), so a kill lost and repeated none of them.
 * The schedule: SHORT_PARTIAL (node --import tsx testing/chaos/chaos.ts --partial).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatReport, runChaos, SHORT_PARTIAL } from '../../../testing/chaos/chaos';
import { POSTGRES_JS_CRASH } from '../../../testing/chaos/stack';

test('chaos with partial rollouts: pool worker kills while carried episodes continue change nothing about the result', { timeout: 900_000 }, async (t) => {
  const report = await runChaos({ ...SHORT_PARTIAL, log: (line) => process.stderr.write(`${line}\n`) });
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
    assert.ok(
      m.kills.some((k) => k.kind === 'pool-worker'),
      `${m.mode}: the pool worker was never killed mid-run (the run ended first)`,
    );
    // a kill landed in a step whose rollout continued carried episodes (the step under way when killed)
    t.diagnostic(`steps continuing carried episodes: ${m.carriedInto?.join(', ')}; kills during steps ${m.kills.map((k) => k.stepsDone).join(', ')}`);
    assert.ok(
      m.kills.some((k) => k.stepsDone !== undefined && m.carriedInto?.includes(k.stepsDone)),
      `${m.mode}: no kill landed in a step with carried episodes`,
    );
  }
});
