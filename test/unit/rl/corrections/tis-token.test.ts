/** Token-level TIS: w_t = min(ρ_t, C), hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tisToken } from '../../../../rl/corrections/tis-token';
import { assertClose } from '../helpers';

test('tis-token: each token keeps min(ρ, C); only the ones above C count as truncated', () => {
  // ρ = 0.5, 2, 4 with C = 3 → 0.5, 2, 3 (the last truncated)
  const r = tisToken.weigh(Float64Array.from([Math.log(0.5), Math.log(2), Math.log(4)]), { cap: 3, band: [0.5, 5] });
  assertClose(r.weights, [0.5, 2, 3]);
  assert.deepEqual([r.truncated, r.masked], [1, 0]);
});
