/** IcePop: w_t = ρ_t · 1[α ≤ ρ_t ≤ β], hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { icepop } from '../../../../rl/corrections/icepop';
import { assertClose } from '../helpers';

test('icepop: tokens outside the band are dropped on both sides, the rest keep ρ', () => {
  // band [0.5, 5]: ρ = 0.25 (below: masked), 0.6, 2, 6 (above: masked); the cap is not read
  const r = icepop.weigh(Float64Array.from([Math.log(0.25), Math.log(0.6), Math.log(2), Math.log(6)]), { cap: 1, band: [0.5, 5] });
  assertClose(r.weights, [0, 0.6, 2, 0]);
  assert.deepEqual([r.truncated, r.masked], [0, 2]);
  // a narrower band drops 2 as well
  assertClose(icepop.weigh(Float64Array.from([Math.log(0.6), Math.log(2)]), { cap: 1, band: [0.5, 1.5] }).weights, [0.6, 0]);
});
