/** Decoupled PPO's weights through importanceWeights (the default correction), hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decoupledPpo } from '../../../../rl/corrections/decoupled-ppo';
import { importanceWeights } from '../../../../rl/corrections/registry';
import { assertClose } from '../helpers';

const settings = (cap: number) => ({ cap, band: [0.5, 5] as const });

test('decoupled-ppo: w = min(ρ, cap) per trained token', () => {
  const r = decoupledPpo.weigh(Float64Array.from([Math.log(0.25), 0, Math.log(10)]), settings(5));
  assertClose(r.weights, [0.25, 1, 5]);
  assert.deepEqual([r.truncated, r.masked], [1, 0]);
});

test('decoupled-ppo through importanceWeights: weights, truncated share and mismatch KL', () => {
  // ρ = π_prox/π_behav: log ρ = 0.5 → 1.6487213; log ρ = 2 → 7.3890561 > cap 5 → 5 (truncated);
  // log ρ = −1 → 0.3678794; the masked token gets 0 and is not counted.
  const r = importanceWeights([-1, 0, -3, -7], [-1.5, -2, -2, 0], [1, 1, 1, 0], 'decoupled-ppo', settings(5));
  assertClose(Array.from(r.weights), [Math.exp(0.5), 5, Math.exp(-1), 0]);
  assert.equal(r.diagnostics.tokens, 3);
  assertClose(
    [r.diagnostics.mean, r.diagnostics.max, r.diagnostics.truncatedFraction, r.diagnostics.maskedFraction],
    [(1.6487213 + 5 + 0.3678794) / 3, 5, 1 / 3, 0],
    1e-6,
  );
  // KL(behaviour ‖ prox) by k3 on the untruncated ρ: (ρ − 1 − log ρ) per token
  // 1.6487213 − 1.5 = 0.1487213; 7.3890561 − 3 = 4.3890561; 0.3678794 − 0 = 0.3678794
  assertClose([r.diagnostics.mismatchKl], [(0.1487213 + 4.3890561 + 0.3678794) / 3], 1e-6);
  // on-policy tokens: every weight 1, nothing truncated, KL 0
  const same = importanceWeights([-0.3, -2], [-0.3, -2], [1, 1], 'decoupled-ppo', settings(5));
  assert.deepEqual([...same.weights, same.diagnostics.truncatedFraction, same.diagnostics.mismatchKl], [1, 1, 0, 0]);
});
