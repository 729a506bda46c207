/** RLOO: leave-one-out baseline. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { assertClose, group, sample } from './helpers';

test('rloo: [1, 2, 3] → n/(n−1)·(s − mean) = 1.5·[−1, 0, 1]', () => {
  // check against the definition: 1 − mean(2, 3) = −1.5; 2 − mean(1, 3) = 0; 3 − mean(1, 2) = 1.5
  const r = computeAdvantages(group([1, 2, 3]), { estimator: 'rloo' });
  assertClose(r.advantages, [-1.5, 0, 1.5]);
});

test('rloo: [1, 0, 0, 0] → [1, −1/3, −1/3, −1/3]', () => {
  // 1 − mean(0,0,0) = 1; 0 − mean(1,0,0) = −1/3
  const r = computeAdvantages(group([1, 0, 0, 0]), { estimator: 'rloo' });
  assertClose(r.advantages, [1, -1 / 3, -1 / 3, -1 / 3]);
});

test('rloo: a singleton group gets 0', () => {
  const r = computeAdvantages([sample({ reward: 4 })], { estimator: 'rloo' });
  assert.deepEqual([...r.advantages], [0]);
});

test('rloo: identical rewards → zeros', () => {
  const r = computeAdvantages(group([0.1, 0.1, 0.1, 0.1]), { estimator: 'rloo' });
  assert.deepEqual([...r.advantages], [0, 0, 0, 0]);
});
