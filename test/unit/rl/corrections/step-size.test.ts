/** The step size of a stale batch (rl/corrections/step-size.ts): the effective sample share, hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { effectiveSampleShare } from '../../../../rl/corrections/step-size';
import { assertClose } from '../helpers';

test('effective sample share: (Σw)²/(N·Σw²) over the trained tokens only', () => {
  // trained weights 2, 0.5 (sequence 1) and 0.5 (sequence 2; its mask-0 token's 9 is not counted):
  // Σw = 3, Σw² = 4 + 0.25 + 0.25 = 4.5, N = 3 → 9/13.5 = 2/3
  assertClose(
    [
      effectiveSampleShare(
        [
          [2, 0.5],
          [9, 0.5],
        ],
        [
          [1, 1],
          [0, 1],
        ],
      ),
    ],
    [2 / 3],
  );
  // one token carries all the weight (the others masked, w = 0): 1/N
  assertClose([effectiveSampleShare([[0, 0, 5, 0]], [[1, 1, 1, 1]])], [1 / 4]);
});

test('effective sample share: 1 when the weights are equal (the base version sampled it) or there is nothing to weigh', () => {
  assert.equal(effectiveSampleShare([[1, 1], [1]], [[1, 1], [1]]), 1);
  assert.equal(effectiveSampleShare([[0.5, 0.5]], [[1, 1]]), 1);
  assert.equal(effectiveSampleShare([[0, 0]], [[1, 1]]), 1);
  assert.equal(effectiveSampleShare([], []), 1);
});
