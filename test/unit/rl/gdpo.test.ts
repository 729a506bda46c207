/** GDPO: decoupled per-component normalization, then batch renormalization. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { assertClose, sample } from './helpers';

test('gdpo: two components in one group of three', () => {
  // c1 = [1, 0, 0]: mean 1/3, deviations [2/3, −1/3, −1/3], var = (4/9 + 1/9 + 1/9)/2 = 1/3, std = 1/√3
  // c2 = [0, 0, 1]: the same spread, deviations [−1/3, −1/3, 2/3]
  // with k = 1/(1/√3 + 1e-4) ≈ 1.731751: pre = (A_1 + A_2) = [1/3, −2/3, 1/3]·k
  // batch: mean 0, std = √(((k/3)²·2 + (2k/3)²)/2) = k/√3 ≈ 0.9998268
  // A = pre/(k/√3 + 1e-4) = [0.5772503, −1.1545007, 0.5772503]/0.9999268 ≈ [0.577293, −1.154585, 0.577293]
  const samples = [sample({ rewards: { c1: 1, c2: 0 } }), sample({ rewards: { c1: 0, c2: 0 } }), sample({ rewards: { c1: 0, c2: 1 } })];
  const r = computeAdvantages(samples, { estimator: 'gdpo' });
  const k = 1 / (1 / Math.sqrt(3) + 1e-4);
  const denom = k / Math.sqrt(3) + 1e-4;
  assertClose(r.advantages, [k / 3 / denom, (-2 * k) / 3 / denom, k / 3 / denom]);
  assertClose(r.advantages, [0.577293, -1.154585, 0.577293], 1e-5);
});

test('gdpo: weights scale each normalized component before the sum', () => {
  // weights c1: 2, c2: 1 → pre = (2·[2/3, −1/3, −1/3] + [−1/3, −1/3, 2/3])·k = [1, −1, 0]·k
  // batch: mean 0, std = √((k² + k²)/2) = k → A = [k, −k, 0]/(k + 1e-4) ≈ [0.999942, −0.999942, 0]
  const samples = [sample({ rewards: { c1: 1, c2: 0 } }), sample({ rewards: { c1: 0, c2: 0 } }), sample({ rewards: { c1: 0, c2: 1 } })];
  const r = computeAdvantages(samples, { estimator: 'gdpo', options: { weights: { c1: 2, c2: 1 } } });
  const k = 1 / (1 / Math.sqrt(3) + 1e-4);
  assertClose(r.advantages, [k / (k + 1e-4), -k / (k + 1e-4), 0]);
});

test('gdpo: a singleton group contributes pre = 0 and is renormalized with the batch', () => {
  // group a: c = [1, 0] → mean 0.5, std √0.5 → A_c = ±0.5/(√0.5 + 1e-4) = ±q, q ≈ 0.707007
  // group b: one sample → pre 0
  // batch pre = [q, −q, 0]: mean 0, std = √((q² + q²)/2) = q → A = [q, −q, 0]/(q + 1e-4) ≈ [0.999859, −0.999859, 0]
  const samples = [sample({ groupId: 'a', rewards: { c: 1 } }), sample({ groupId: 'a', rewards: { c: 0 } }), sample({ groupId: 'b', rewards: { c: 5 } })];
  const r = computeAdvantages(samples, { estimator: 'gdpo' });
  const q = 0.5 / (Math.SQRT1_2 + 1e-4);
  assertClose(r.advantages, [q / (q + 1e-4), -q / (q + 1e-4), 0]);
  assert.equal(r.diagnostics.singletonSets, 1);
});

test('gdpo: identical rewards → zeros, no NaN', () => {
  const samples = [0, 1, 2].map(() => sample({ rewards: { c1: 0.7, c2: -3 } }));
  const r = computeAdvantages(samples, { estimator: 'gdpo' });
  assert.deepEqual([...r.advantages], [0, 0, 0]);
});
