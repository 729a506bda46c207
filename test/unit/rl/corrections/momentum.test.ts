/** Adam's first moment for a stale model (rl/corrections/momentum.ts). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_MOMENTUM, staleBetas } from '../../../../rl/corrections/momentum';

test("stale betas: 'off' (the default) drops β1 and keeps β2; 'keep' keeps both", () => {
  assert.equal(DEFAULT_MOMENTUM, 'off');
  assert.deepEqual(staleBetas([0.9, 0.999], 'off'), [0, 0.999]);
  assert.deepEqual(staleBetas([0.8, 0.95], 'keep'), [0.8, 0.95]);
});
