/** Sequence-level TIS: w = min(∏ρ, C) on every trained token, hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tisSequence } from '../../../../rl/corrections/tis-sequence';
import { assertClose } from '../helpers';

const logs = (...rho: number[]) => Float64Array.from(rho.map(Math.log));

test('tis-sequence: the product ratio on every token, truncated at C', () => {
  // ρ = 2 · 0.5 · 3 = 3: under C = 5 every token gets 3; with C = 2 every token gets 2, all three truncated
  const under = tisSequence.weigh(logs(2, 0.5, 3), { cap: 5, band: [0.5, 5] });
  assertClose(under.weights, [3, 3, 3]);
  assert.deepEqual([under.truncated, under.masked], [0, 0]);
  const over = tisSequence.weigh(logs(2, 0.5, 3), { cap: 2, band: [0.5, 5] });
  assertClose(over.weights, [2, 2, 2]);
  assert.deepEqual([over.truncated, over.masked], [3, 0]);
  // a sequence the trainer finds less likely: 0.5 · 0.5 = 0.25, no lower bound
  assertClose(tisSequence.weigh(logs(0.5, 0.5), { cap: 2, band: [0.5, 5] }).weights, [0.25, 0.25]);
});

test('tis-sequence: a sequence with no trained token has no weights', () => {
  assert.deepEqual(tisSequence.weigh(new Float64Array(0), { cap: 2, band: [0.5, 5] }), { weights: new Float64Array(0), truncated: 0, masked: 0 });
});
