/** GRPO: hand-computed values; arithmetic in the comments. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { assertClose, group, sample } from './helpers';

test('grpo: rewards [1, 2, 3] → mean 2, unbiased std 1 → A = [−1, 0, 1]/(1 + 1e-6)', () => {
  // var = ((1−2)² + 0 + (3−2)²)/(3−1) = 1, std = 1
  const r = computeAdvantages(group([1, 2, 3]), { estimator: 'grpo' });
  assertClose(r.advantages, [-1 / (1 + 1e-6), 0, 1 / (1 + 1e-6)]); // ≈ [−0.999999, 0, 0.999999]
  assert.deepEqual(r.excluded, [false, false, false]);
});

test('grpo: rewards [1, 0] → A = ±0.5/(√0.5 + 1e-6) ≈ ±0.7071058', () => {
  // mean 0.5; var = (0.25 + 0.25)/1 = 0.5; std = 0.70710678
  const r = computeAdvantages(group([1, 0]), { estimator: 'grpo' });
  assertClose(r.advantages, [0.7071058, -0.7071058], 1e-6);
});

test('grpo: a group of one gets mean 0 and std 1 → A = 5/(1 + 1e-6) = 4.999995', () => {
  const r = computeAdvantages(group([5]), { estimator: 'grpo' });
  assertClose(r.advantages, [5 / (1 + 1e-6)], 1e-12); // ≈ 4.999995000005
  assert.equal(r.diagnostics.singletonSets, 1);
});

test('grpo with normalizeStd: false (Dr. GRPO): [1, 2, 3] → [−1, 0, 1]; singleton 5 → 5', () => {
  const samples = [...group([1, 2, 3]), sample({ groupId: 'h', reward: 5 })];
  const r = computeAdvantages(samples, { estimator: 'grpo', options: { normalizeStd: false } });
  assertClose(r.advantages, [-1, 0, 1, 5]);
});

test('grpo: identical rewards give exact zeros, never NaN', () => {
  // 0.1 + 0.1 + 0.1 is 0.30000000000000004: a naive mean would leave ~1e-17/1e-6 residue.
  const r = computeAdvantages(group([0.1, 0.1, 0.1]), { estimator: 'grpo' });
  assert.deepEqual([...r.advantages], [0, 0, 0]);
  assert.equal(r.diagnostics.zeroAdvantageSets, 1);
});

test('grpo: score is the weighted sum of reward components', () => {
  // scores: 2·1 + 0.5·0 = 2, 2·0 + 0.5·4 = 2, 2·1 + 0.5·4 = 4 → mean 8/3
  // deviations [−2/3, −2/3, 4/3]; var = (4/9 + 4/9 + 16/9)/2 = 4/3; std = 1.1547005
  const samples = [
    sample({ rewards: { correct: 1, format: 0 } }),
    sample({ rewards: { correct: 0, format: 4 } }),
    sample({ rewards: { correct: 1, format: 4 } }),
  ];
  const r = computeAdvantages(samples, { estimator: 'grpo', options: { weights: { correct: 2, format: 0.5 } } });
  const std = Math.sqrt(4 / 3);
  assertClose(r.advantages, [-2 / 3 / (std + 1e-6), -2 / 3 / (std + 1e-6), 4 / 3 / (std + 1e-6)]); // ≈ [−0.57735, −0.57735, 1.1547]
});

test('grpo: groups are normalized separately', () => {
  // group a: [0, 1] → ±0.7071058; group b: [10, 30] → mean 20, std √200 = 14.142136 → ∓0.7071067
  const samples = [...group([0, 1], { groupId: 'a' }), ...group([10, 30], { groupId: 'b' })];
  const r = computeAdvantages(samples, { estimator: 'grpo' });
  assertClose(r.advantages, [-0.5 / (Math.SQRT1_2 + 1e-6), 0.5 / (Math.SQRT1_2 + 1e-6), -10 / (Math.sqrt(200) + 1e-6), 10 / (Math.sqrt(200) + 1e-6)]);
  assert.equal(r.diagnostics.sets, 2);
});
