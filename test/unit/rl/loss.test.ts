/** PPO-clip loss: hand-computed tokens, KL and entropy terms, input checks, finite differences. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { policyLoss, type PolicyLossInput } from '../../../rl/loss-reference';
import type { KlType, PolicyLossSettings } from '../../../rl/loss-settings';
import { assertClose } from './helpers';

/** One token with weight 1 and logp_old = 0, so logp = log(ratio). */
const one = (A: number, ratio: number, extra: Partial<PolicyLossInput> = {}, settings: Partial<PolicyLossSettings> = {}) =>
  policyLoss({ logp: [Math.log(ratio)], logpOld: [0], advantages: [A], weights: [1], ...extra }, settings);

test('inside the clip range the loss is −A·ratio and g = −A·ratio', () => {
  // A = 1, ratio 1.1 ∈ [0.8, 1.2]: L = −1.1; ∂L/∂logp = −A·ratio = −1.1
  const r = one(1, 1.1);
  assertClose([r.loss, r.grad[0]!], [-1.1, -1.1]);
  assert.equal(r.diagnostics.clipFraction, 0);
  // approx KL (k3 of old vs new) = ratio − 1 − log ratio = 0.1 − 0.0953102 = 0.0046898
  assertClose([r.diagnostics.approxKl], [0.1 - Math.log(1.1)]);
});

test('A > 0 above 1 + ε_high: clipped at −A·1.2, no gradient', () => {
  // L1 = −1.5, L2 = −1.2 → max = −1.2 (clipped branch binds strictly) → g = 0
  const r = one(1, 1.5);
  assertClose([r.loss], [-1.2]);
  assert.equal(r.grad[0], 0);
  assert.equal(r.diagnostics.clipFraction, 1);
});

test('A < 0 below 1 − ε_low: clipped at −A·0.8, no gradient', () => {
  // L1 = 0.5, L2 = 0.8 → L = 0.8, g = 0
  const r = one(-1, 0.5);
  assertClose([r.loss], [0.8]);
  assert.equal(r.grad[0], 0);
});

test('A < 0 with a large ratio: dual clip bounds the loss at −A·c = 3', () => {
  // ratio 4: L1 = 4, L2 = 1.2 → max 4 > 3 → L = 3, g = 0
  const r = one(-1, 4);
  assertClose([r.loss], [3]);
  assert.equal(r.grad[0], 0);
  assert.equal(r.diagnostics.dualClipFraction, 1);
  // below c the unclipped branch stays: ratio 2 → L = 2, g = −A·ratio = 2
  const s = one(-1, 2);
  assertClose([s.loss, s.grad[0]!], [2, 2]);
  // dual clip off: ratio 4 → L = 4, g = 4
  const t = one(-1, 4, {}, { dualClip: null });
  assertClose([t.loss, t.grad[0]!], [4, 4]);
});

test('at a clip boundary the unclipped branch is chosen (the gradient flows)', () => {
  // ε_low = ε_high = 0: the range is [1, 1] and ratio = exp(0) = 1 sits exactly on it.
  // L1 = L2 = −2 → tie → unclipped branch: g = −A·ratio = −2; not counted as clipped.
  const r = policyLoss({ logp: [0], logpOld: [0], advantages: [2], weights: [1] }, { clipLow: 0, clipHigh: 0 });
  assertClose([r.loss, r.grad[0]!], [-2, -2]);
  assert.equal(r.diagnostics.clipFraction, 0);
});

test('the log-ratio clamp at ±20 stops the gradient beyond it', () => {
  // logp − old = 25 → clamped to 20: ratio = e^20; A = −1, no dual clip: L = e^20, g = 0 (outside the clamp)
  const r = policyLoss({ logp: [25], logpOld: [0], advantages: [-1], weights: [1] }, { dualClip: null });
  assertClose([r.loss], [Math.exp(20)]);
  assert.equal(r.grad[0], 0);
});

test('weights scale loss and gradient; zero-weight tokens do not count in diagnostics', () => {
  // token 0: A = 1, ratio 1.1, w = 0.25 → L = −0.275, g = −0.275; token 1 (w = 0) clipped but ignored
  const r = policyLoss({ logp: [Math.log(1.1), Math.log(1.5)], logpOld: [0, 0], advantages: [1, 1], weights: [0.25, 0] });
  assertClose([r.loss, r.grad[0]!, r.grad[1]!], [-0.275, -0.275, 0]);
  assert.equal(r.diagnostics.tokens, 1);
  assert.equal(r.diagnostics.clipFraction, 0);
});

test('k1 KL adds coef·(logp − ref) to the loss and coef to g', () => {
  // A = 0 so only KL remains: logp = −1, ref = −1.5 → KL = 0.5; coef 0.1 → loss 0.05, g = 0.1
  const r = policyLoss({ logp: [-1], logpOld: [-1], advantages: [0], weights: [1], refLogp: [-1.5] }, { kl: { type: 'k1', coef: 0.1 } });
  assertClose([r.loss, r.kl, r.grad[0]!], [0.05, 0.5, 0.1]);
});

test('low_var_kl (k3): exp(u) − u − 1 with u = ref − logp, clamped to [−10, 10]', () => {
  // u = −0.5: KL = e^−0.5 + 0.5 − 1 = 0.1065307; ∂KL/∂logp = 1 − e^u = 0.3934693
  const r = policyLoss({ logp: [-1], logpOld: [-1], advantages: [0], weights: [1], refLogp: [-1.5] }, { kl: { type: 'low_var_kl', coef: 1 } });
  assertClose([r.kl, r.grad[0]!], [Math.exp(-0.5) - 0.5, 1 - Math.exp(-0.5)]);
  // u = 3: e^3 − 4 = 16.09 → clamped to 10, gradient 0
  const c = policyLoss({ logp: [-4], logpOld: [-4], advantages: [0], weights: [1], refLogp: [-1] }, { kl: { type: 'low_var_kl', coef: 1 } });
  assertClose([c.kl, c.grad[0]!], [10, 0]);
});

test('entropy bonus: loss −β·Σw·H; g excludes it, entropyGrad = −β·w', () => {
  const base = { logp: [Math.log(1.1)], logpOld: [0], advantages: [1], weights: [0.5], entropy: [2] };
  const without = policyLoss(base);
  const withBonus = policyLoss(base, { entropyCoef: 0.01 });
  // loss = 0.5·(−1.1) − 0.01·0.5·2 = −0.55 − 0.01 = −0.56
  assertClose([withBonus.loss], [-0.56]);
  assert.equal(withBonus.grad[0], without.grad[0]);
  assertClose(withBonus.entropyGrad, [-0.005]);
  assert.equal(withBonus.diagnostics.entropy, 2);
});

test('missing or non-finite inputs are rejected with the field name', () => {
  assert.throws(() => policyLoss({ logp: [0, NaN], logpOld: [0, 0], advantages: [1, 1], weights: [1, 1] }), /logp\[1\]: must be a finite number, got NaN/);
  assert.throws(() => policyLoss({ logp: [0], logpOld: [0, 0], advantages: [1], weights: [1] }), /logpOld: expected 1 tokens \(as logp\), got 2/);
  assert.throws(
    () => policyLoss({ logp: [0], logpOld: [0], advantages: [1], weights: [1] }, { kl: { type: 'k1', coef: 0.1 } }),
    /refLogp: is required for kl.type k1/,
  );
  assert.throws(
    () => policyLoss({ logp: [0], logpOld: [0], advantages: [1], weights: [1] }, { entropyCoef: 0.1 }),
    /entropy: is required when entropyCoef ≠ 0/,
  );
  assert.throws(() => policyLoss({ logp: [0], logpOld: [0], advantages: [1], weights: [1] }, { dualClip: 1 }), /dualClip: must be > 1 or null, got 1/);
});

// ---- gradient vs. finite differences -----------------------------------------

interface Case {
  settings: PolicyLossSettings;
  input: { logp: number[]; logpOld: number[]; advantages: number[]; weights: number[]; refLogp: number[]; entropy: number[] };
}

const tokenArb = fc.record({
  logpOld: fc.double({ min: -6, max: -0.01, noNaN: true }),
  delta: fc.double({ min: -1.2, max: 1.2, noNaN: true }),
  refDelta: fc.double({ min: -3, max: 3, noNaN: true }),
  A: fc.double({ min: -3, max: 3, noNaN: true }),
  w: fc.double({ min: 0, max: 1, noNaN: true }),
  H: fc.double({ min: 0, max: 3, noNaN: true }),
});
const caseArb = fc
  .record({
    tokens: fc.array(tokenArb, { minLength: 1, maxLength: 6 }),
    clipLow: fc.double({ min: 0.05, max: 0.3, noNaN: true }),
    clipHigh: fc.double({ min: 0.05, max: 0.4, noNaN: true }),
    dualClip: fc.constantFrom(3, 2, null),
    klType: fc.constantFrom<KlType>('none', 'k1', 'low_var_kl'),
    klCoef: fc.double({ min: 0, max: 0.5, noNaN: true }),
    entropyCoef: fc.double({ min: -0.1, max: 0.1, noNaN: true }),
  })
  .map((c): Case => ({
    settings: { clipLow: c.clipLow, clipHigh: c.clipHigh, dualClip: c.dualClip, kl: { type: c.klType, coef: c.klCoef }, entropyCoef: c.entropyCoef },
    input: {
      logp: c.tokens.map((t) => t.logpOld + t.delta),
      logpOld: c.tokens.map((t) => t.logpOld),
      advantages: c.tokens.map((t) => t.A),
      weights: c.tokens.map((t) => t.w),
      refLogp: c.tokens.map((t) => t.logpOld + t.delta + t.refDelta),
      entropy: c.tokens.map((t) => t.H),
    },
  }));

/** True when every token is at least `m` away from a kink of the loss (in ratio or k3 units). */
function awayFromKinks({ settings: s, input }: Case, m = 1e-3): boolean {
  return input.logp.every((lp, t) => {
    const ratio = Math.exp(lp - input.logpOld[t]!);
    const A = input.advantages[t]!;
    if (Math.abs(ratio - (1 - s.clipLow)) < m || Math.abs(ratio - (1 + s.clipHigh)) < m) return false;
    if (A < 0 && s.dualClip !== null && Math.abs(ratio - s.dualClip) < m) return false;
    const u = input.refLogp[t]! - lp;
    if (s.kl.type === 'low_var_kl' && Math.abs(Math.exp(u) - u - 1 - 10) < m) return false;
    return true;
  });
}

test('property: g_t matches a central finite difference of the loss (away from kinks)', () => {
  fc.assert(
    fc.property(caseArb, (c) => {
      fc.pre(awayFromKinks(c));
      const out = policyLoss(c.input, c.settings);
      const h = 1e-6;
      c.input.logp.forEach((lp, t) => {
        const at = (x: number) => policyLoss({ ...c.input, logp: c.input.logp.map((v, k) => (k === t ? x : v)) }, c.settings).loss;
        const fd = (at(lp + h) - at(lp - h)) / (2 * h);
        assert.ok(Math.abs(fd - out.grad[t]!) <= 1e-5 * Math.max(1, Math.abs(fd)), `token ${t}: fd ${fd} vs g ${out.grad[t]}`);
      });
    }),
    { numRuns: 300 },
  );
});

test('property: entropyGrad matches a finite difference in H', () => {
  fc.assert(
    fc.property(caseArb, (c) => {
      const out = policyLoss(c.input, c.settings);
      const h = 1e-4;
      c.input.entropy.forEach((H, t) => {
        const at = (x: number) => policyLoss({ ...c.input, entropy: c.input.entropy.map((v, k) => (k === t ? x : v)) }, c.settings).loss;
        const fd = (at(H + h) - at(H - h)) / (2 * h);
        assert.ok(Math.abs(fd - out.entropyGrad[t]!) <= 1e-7, `token ${t}: fd ${fd} vs e ${out.entropyGrad[t]}`);
      });
    }),
    { numRuns: 100 },
  );
});

test('decoupled PPO: w·L_pg with w on the loss equals the plain loss with advantages w·A', () => {
  // ratio 1.1 (inside the clip), A = 2, w = 0.5: L = 0.5·(−2·1.1) = −1.1, g = 0.5·(−2·1.1) = −1.1
  const r = policyLoss({ logp: [Math.log(1.1)], logpOld: [0], advantages: [2], weights: [1], isWeights: [0.5] });
  assertClose([r.loss, r.grad[0]!], [-1.1, -1.1]);
  // A = −1, ratio 4 with dual clip c = 3 and w = 2: L = 2·3 = 6, g = 0
  const d = policyLoss({ logp: [Math.log(4)], logpOld: [0], advantages: [-1], weights: [1], isWeights: [2] });
  assertClose([d.loss, d.grad[0]!], [6, 0]);
  // the equivalence token by token, with a KL term that the weight must not scale
  const input = {
    logp: [Math.log(1.1), Math.log(1.5), Math.log(0.5), Math.log(4)],
    logpOld: [0, 0, 0, 0],
    advantages: [1, 1, -1, -1],
    weights: [0.25, 0.25, 0.25, 0.25],
    refLogp: [0.1, 0.2, -0.1, 0],
  };
  const w = [0.5, 5, 1.3, 2];
  const settings = { kl: { type: 'k1' as const, coef: 0.1 } };
  const scaled = policyLoss({ ...input, isWeights: w }, settings);
  const viaAdvantages = policyLoss({ ...input, advantages: input.advantages.map((a, i) => a * w[i]!) }, settings);
  assertClose([scaled.loss, scaled.pg, scaled.kl, ...scaled.grad], [viaAdvantages.loss, viaAdvantages.pg, viaAdvantages.kl, ...viaAdvantages.grad], 1e-12);
});
