/** Sequence-level MIS: w = ∏ρ · 1[∏ρ ≤ C] on every trained token, hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { misSequence } from '../../../../rl/corrections/mis-sequence';
import { assertClose } from '../helpers';

const logs = (...rho: number[]) => Float64Array.from(rho.map(Math.log));

test('mis-sequence: the whole sequence is dropped when ∏ρ > C, else every token gets ∏ρ', () => {
  // ρ = 2 · 0.5 · 3 = 3: kept under C = 5 (each token 3), dropped under C = 2 (three tokens masked)
  const kept = misSequence.weigh(logs(2, 0.5, 3), { cap: 5, band: [0.5, 5] });
  assertClose(kept.weights, [3, 3, 3]);
  assert.deepEqual([kept.truncated, kept.masked], [0, 0]);
  const dropped = misSequence.weigh(logs(2, 0.5, 3), { cap: 2, band: [0.5, 5] });
  assert.deepEqual([...dropped.weights, dropped.truncated, dropped.masked], [0, 0, 0, 0, 3]);
  // one token far above C does not drop a sequence whose product is below it: 4 · 0.25 · 0.5 = 0.5
  assertClose(misSequence.weigh(logs(4, 0.25, 0.5), { cap: 2, band: [0.5, 5] }).weights, [0.5, 0.5, 0.5]);
});
