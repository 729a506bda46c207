/** REINFORCE++-baseline: group-mean baseline, then token-weighted whitening over the batch. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { assertClose, sample } from './helpers';

test('reinforce++-baseline: equal token counts', () => {
  // g1 [1, 0] → centered [0.5, −0.5]; g2 [1, 1] → [0, 0]; tokens [2, 2, 1, 3], N = 8
  // μ = (2·0.5 − 2·0.5 + 0 + 0)/8 = 0; var = (2·0.25 + 2·0.25)/(8 − 1) = 1/7
  // A = a/√(1/7 + 1e-8) → [0.5·√7, −0.5·√7, 0, 0] ≈ [1.3228756, −1.3228756, 0, 0]
  const samples = [
    sample({ groupId: 'g1', reward: 1, trainableTokens: 2 }),
    sample({ groupId: 'g1', reward: 0, trainableTokens: 2 }),
    sample({ groupId: 'g2', reward: 1, trainableTokens: 1 }),
    sample({ groupId: 'g2', reward: 1, trainableTokens: 3 }),
  ];
  const r = computeAdvantages(samples, { estimator: 'reinforce++-baseline' });
  const s = 1 / Math.sqrt(1 / 7 + 1e-8);
  assertClose(r.advantages, [0.5 * s, -0.5 * s, 0, 0]);
});

test('reinforce++-baseline: whitening weights each sample by its trainable tokens', () => {
  // [1, 0] with tokens [3, 1] → centered [0.5, −0.5]; N = 4
  // μ = (3·0.5 − 1·0.5)/4 = 0.25; var = (3·0.0625 + 1·0.5625)/3 = 0.25
  // A = (a − 0.25)/√(0.25 + 1e-8) ≈ [0.5, −1.5]
  const samples = [sample({ reward: 1, trainableTokens: 3 }), sample({ reward: 0, trainableTokens: 1 })];
  const r = computeAdvantages(samples, { estimator: 'reinforce++-baseline' });
  assertClose(r.advantages, [0.25 / Math.sqrt(0.25 + 1e-8), -0.75 / Math.sqrt(0.25 + 1e-8)]);
  // token-weighted mean of the result is 0: 3·0.5 + 1·(−1.5) = 0
  assert.ok(Math.abs(3 * r.advantages[0]! + r.advantages[1]!) < 1e-9);
});

test('reinforce++-baseline: a singleton group uses mean 0 (as verl)', () => {
  // g1 [2] → centered 2 (mean 0); g2 [0, 0] → [0, 0]; tokens 1 each, N = 3
  // μ = 2/3; var = ((4/3)² + 2·(2/3)²)/2 = (16/9 + 8/9)/2 = 4/3
  // A = (a − 2/3)/√(4/3 + 1e-8) ≈ [1.1547005, −0.5773503, −0.5773503]
  const samples = [sample({ groupId: 'g1', reward: 2 }), sample({ groupId: 'g2', reward: 0 }), sample({ groupId: 'g2', reward: 0 })];
  const r = computeAdvantages(samples, { estimator: 'reinforce++-baseline' });
  const d = Math.sqrt(4 / 3 + 1e-8);
  assertClose(r.advantages, [4 / 3 / d, -2 / 3 / d, -2 / 3 / d]);
});

test('reinforce++-baseline: identical rewards → zeros; no trainable tokens → zeros', () => {
  const same = [0.1, 0.1, 0.1].map((reward) => sample({ reward, trainableTokens: 5 }));
  assert.deepEqual([...computeAdvantages(same, { estimator: 'reinforce++-baseline' }).advantages], [0, 0, 0]);
  const empty = [1, 0].map((reward) => sample({ reward, trainableTokens: 0 }));
  assert.deepEqual([...computeAdvantages(empty, { estimator: 'reinforce++-baseline' }).advantages], [0, 0]);
});
