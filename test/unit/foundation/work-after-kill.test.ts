// workAfterLastKill: the engine after a run's last kill held against the twin's per-step tokens (hand-computed).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { workAfterLastKill } from '../../../testing/chaos/work-meter';

// The twin sampled 100, 120, 90, 110 tokens in steps 0-3, 15 in its initial eval and 40 in its final one (its engine: 475).
const steps = [100, 120, 90, 110];
const evals = { initial: 15, final: 40 };

it('finds the step the engine after the last kill resumed at when it sampled nothing beyond the twin', () => {
  // killed with 1 step committed; the new engine sampled steps 1-3 and the eval: 120 + 90 + 110 + 40
  assert.deepEqual(workAfterLastKill(steps, evals, 475, [165, 360], 1), { meterMatchesStore: true, lastEngineTokens: 360, resumedAt: 1, excess: 0 });
  // step 1's rollout had committed before the kill (the update was under way): it resumes at step 2
  assert.deepEqual(workAfterLastKill(steps, evals, 475, [235, 240], 1), { meterMatchesStore: true, lastEngineTokens: 240, resumedAt: 2, excess: 0 });
});

it('reports the excess when the engine after the last kill sampled more than the twin did from that step on', () => {
  // 25 tokens more than steps 1-3 and the eval: e.g. a carried episode's stored generations sampled again
  assert.deepEqual(workAfterLastKill(steps, evals, 475, [165, 385], 1), { meterMatchesStore: true, lastEngineTokens: 385, excess: 25 });
});

it('says when the meter and the store disagree on the twin', () => {
  // 30 tokens the store does not account for
  assert.equal(workAfterLastKill(steps, evals, 505, [195, 360], 1).meterMatchesStore, false);
});
