/** Token-level MIS: w_t = ρ_t · 1[ρ_t ≤ C], hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { misToken } from '../../../../rl/corrections/mis-token';
import { assertClose } from '../helpers';

test('mis-token: tokens above C are dropped, the rest keep their full ratio', () => {
  // ρ = 0.1, 2, 4 with C = 3 → 0.1 (no lower bound), 2, 0 (masked)
  const r = misToken.weigh(Float64Array.from([Math.log(0.1), Math.log(2), Math.log(4)]), { cap: 3, band: [0.5, 5] });
  assertClose(r.weights, [0.1, 2, 0]);
  assert.deepEqual([r.truncated, r.masked], [0, 1]);
});
