/**
 * What a chaos run with partial rollouts must show (testing/chaos/chaos.ts SHORT_PARTIAL,
 * SHORT_PARTIAL_STALE, LONG_PARTIAL): the run ends identical to its uninterrupted twin, carried episodes
 * and their generations included; a pool worker kill landed in a step with carried
 * episodes (with maxCarrySteps: in a step holding groups at the bound); the engines' counters
 * show that only the killed attempts' tokens were sampled twice, and the engine after the last
 * kill sampled exactly the twin's tokens from the retried step on, so no carried generation was
 * sampled again.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { formatReport, type ChaosReport } from '../../../testing/chaos/chaos';
import { assertFullyCovered, assertSurvived } from './survived';

export function checkPartialChaos(t: TestContext, report: ChaosReport) {
  for (const line of formatReport(report).split('\n')) t.diagnostic(line);
  for (const m of report.modes) {
    assertSurvived(m);
    assertFullyCovered(m, ['pool-worker']);
    // a kill landed in a step whose rollout continued carried episodes (the step under way when killed)
    t.diagnostic(`steps continuing carried episodes: ${m.carriedInto?.join(', ')}; kills during steps ${m.kills.map((k) => k.stepsDone).join(', ')}`);
    assert.ok(
      m.kills.some((k) => k.stepsDone !== undefined && m.carriedInto?.includes(k.stepsDone)),
      `${m.mode}: no kill landed in a step with carried episodes`,
    );
    if (report.options.partialRollouts?.maxCarrySteps !== undefined) {
      t.diagnostic(`steps holding groups at maxCarrySteps: ${m.heldIn?.join(', ')}`);
      assert.ok(
        m.kills.some((k) => k.stepsDone !== undefined && m.heldIn?.includes(k.stepsDone)),
        `${m.mode}: no kill landed in a step holding groups (held in steps ${m.heldIn?.join(', ')})`,
      );
    }
    // Tokens generated twice, from the engines' own counters (the twin's meter agrees with its stored per-step counts).
    const w = m.partialWork!;
    assert.ok(w.stepTokens.every((n) => n > 0) && w.evalTokens.initial > 0 && w.evalTokens.final > 0, `token counts: ${JSON.stringify(w)}`);
    assert.ok(w.after.meterMatchesStore, `the twin's engine tokens are its stored steps' and evals' sampled tokens: ${JSON.stringify(w)}`);
    assert.ok(
      w.servedTokens.some((n) => n > 0),
      'carried generations were served from the store',
    );
    assert.equal(m.work!.chaos.tokensByEngine.length, m.kills.length + 1, 'an engine before each kill and one after the last');
    assert.ok(w.killedAttemptTokens >= 0, `killed attempts: ${w.killedAttemptTokens}`);
    assert.notEqual(w.after.resumedAt, undefined, `the engine after the last kill sampled ${w.after.excess} tokens beyond the twin's: ${JSON.stringify(w)}`);
  }
}
