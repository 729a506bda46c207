/**
 * The engine's in-graph policy loss (engines/onnx/ops/policy-loss.ts) and
 * the TypeScript reference of the RL core (rl/loss-reference.ts) are the same function:
 * loss, per-token gradient coefficient ∂loss/∂logp_t and diagnostics agree on
 * random tokens covering every regime (clip, dual clip, log-ratio clamp, k3
 * clamp, zero weights). The entropy bonus, which lives outside that function,
 * is compared through the full update graph.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { policyLoss as referenceLoss } from '../../../rl/loss-reference';
import type { PolicyLossSettings } from '../../../rl/loss-settings';
import { encodeModel, Graph, int } from '../../../engines/onnx/graph/builder';
import { policyLoss } from '../../../engines/onnx/ops/policy-loss';
import { TinyLmRuntime } from '../../../engines/onnx/tiny-lm/runtime';
import { initWeights } from '../../../engines/families/tiny-lm/init';
import { normalizeSpec, paramLayout } from '../../../engines/families/tiny-lm/spec';
import { sessionFactory } from '../../../engines/onnx/device';
import { rng, session } from './helpers';

function lossGraph(): Uint8Array {
  const g = new Graph('policy_loss_only');
  const v = (n: string) => g.input(n, 'float64', ['N']);
  const s = (n: string) => g.input(n, 'float64', []);
  const lv = policyLoss(g, 'float64', {
    logp: v('logp'),
    oldLogp: v('old'),
    advantages: v('adv'),
    weights: v('w'),
    refLogp: v('ref'),
    hasRef: g.input('has_ref', 'bool', ['N']),
    clipLow: s('clip_low'),
    clipHigh: s('clip_high'),
    dualClip: s('dual_clip'),
    klCoef: s('kl_coef'),
    klIsK3: g.input('kl_is_k3', 'bool', []),
  });
  const sum = (t: string) => g.op('ReduceSum', [t], { keepdims: int(0) });
  const asF = (b: string) => g.op('Cast', [b], { to: int(11) });
  g.output(sum(lv.weightedLoss), 'loss', 'float64', []);
  g.output(sum(lv.weightedPg), 'pg', 'float64', []);
  g.output(sum(lv.weightedKl), 'kl', 'float64', []);
  g.output(lv.dLogp, 'grad', 'float64', ['N']);
  g.output(asF(lv.ppoClipped), 'clipped', 'float64', ['N']);
  g.output(asF(lv.dualClipped), 'dual', 'float64', ['N']);
  g.output(g.op('Sub', [g.op('Sub', [lv.ratio, g.constant('float64', 1)]), lv.logRatio]), 'akl', 'float64', ['N']);
  return encodeModel(g);
}

function randomTokens(seed: number, n: number) {
  const r = rng(seed);
  const logp: number[] = [];
  const old: number[] = [];
  const adv: number[] = [];
  const w: number[] = [];
  const ref: number[] = [];
  for (let t = 0; t < n; t++) {
    const lp = -r.range(0.01, 6);
    const kind = r.int(6);
    const delta =
      kind === 0 ? r.range(-0.1, 0.1) : kind === 1 ? r.range(-2, 2) : kind === 2 ? r.range(20.5, 30) * (r.uniform() < 0.5 ? -1 : 1) : r.range(-0.6, 0.6);
    logp.push(lp);
    old.push(lp - delta);
    adv.push(r.uniform() < 0.1 ? 0 : r.range(-2, 2));
    w.push(r.uniform() < 0.15 ? 0 : r.range(0, 0.2));
    ref.push(lp + (r.uniform() < 0.2 ? r.range(3, 15) : r.range(-3, 2)));
  }
  return { logp, old, adv, w, ref };
}

const close = (a: number, b: number, tol = 1e-12) => Math.abs(a - b) <= tol * Math.max(1, Math.abs(a), Math.abs(b));

test('in-graph PPO/KL loss and ∂loss/∂logp agree with rl/loss-reference.ts', async () => {
  const s = await session(lossGraph());
  const cases: Partial<PolicyLossSettings>[] = [
    { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, kl: { type: 'none', coef: 0 } },
    { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, kl: { type: 'low_var_kl', coef: 0.1 } },
    { clipLow: 0.1, clipHigh: 0.3, dualClip: null, kl: { type: 'k1', coef: 0.05 } },
  ];
  let seen = { clip: 0, dual: 0, zeroGrad: 0 };
  for (const [i, settings] of cases.entries()) {
    const n = 400;
    const x = randomTokens(100 + i, n);
    const klType = settings.kl!.type;
    const ref = referenceLoss({ logp: x.logp, logpOld: x.old, advantages: x.adv, weights: x.w, refLogp: klType === 'none' ? undefined : x.ref }, settings);
    const f64 = (a: number[]) => new ort.Tensor('float64', Float64Array.from(a), [a.length]);
    const sc = (v: number) => new ort.Tensor('float64', Float64Array.of(v), []);
    const out = await s.run({
      logp: f64(x.logp),
      old: f64(x.old),
      adv: f64(x.adv),
      w: f64(x.w),
      ref: f64(x.ref),
      has_ref: new ort.Tensor('bool', new Uint8Array(n).fill(klType === 'none' ? 0 : 1), [n]),
      clip_low: sc(settings.clipLow!),
      clip_high: sc(settings.clipHigh!),
      dual_clip: sc(settings.dualClip ?? Infinity),
      kl_coef: sc(klType === 'none' ? 0 : settings.kl!.coef),
      kl_is_k3: new ort.Tensor('bool', Uint8Array.of(klType === 'low_var_kl' ? 1 : 0), []),
    });
    const one = (k: string) => (out[k]!.data as Float64Array)[0]!;
    assert.ok(close(one('loss'), ref.loss), `loss ${one('loss')} vs ${ref.loss}`);
    assert.ok(close(one('pg'), ref.pg), 'pg');
    assert.ok(close(one('kl'), ref.kl), 'kl');
    const grad = out.grad!.data as Float64Array;
    for (let t = 0; t < n; t++) {
      assert.ok(close(grad[t]!, ref.grad[t]!), `token ${t}: graph ${grad[t]} vs rl/loss-reference ${ref.grad[t]}`);
      if (grad[t] === 0 && x.w[t] !== 0) seen.zeroGrad++;
    }
    // Diagnostics are means over tokens with w ≠ 0 (as the engine's row mask).
    const counted = x.w.map((w) => (w !== 0 ? 1 : 0));
    const mean = (k: string) => {
      const a = out[k]!.data as Float64Array;
      return a.reduce((acc, v, t) => acc + v * counted[t]!, 0) / ref.diagnostics.tokens;
    };
    assert.ok(close(mean('clipped'), ref.diagnostics.clipFraction), 'clip fraction');
    assert.ok(close(mean('dual'), ref.diagnostics.dualClipFraction), 'dual clip fraction');
    assert.ok(close(mean('akl'), ref.diagnostics.approxKl, 1e-10), 'approx kl');
    seen = { ...seen, clip: seen.clip + ref.diagnostics.clipFraction, dual: seen.dual + ref.diagnostics.dualClipFraction };
  }
  assert.ok(seen.clip > 0 && seen.dual > 0 && seen.zeroGrad > 0, 'every regime was exercised');
});

test("update-graph loss with entropy bonus and KL equals rl/loss-reference.ts on the engine's own log-probs", async () => {
  const spec = normalizeSpec({ vocabSize: 10, contextWindow: 4, embedDim: 6, hiddenDim: 12, layers: 1 });
  const rt = new TinyLmRuntime(spec, sessionFactory('cpu', { intraOpThreads: 1 }), { minRows: 2 });
  const P = paramLayout(spec).total;
  const theta = initWeights(spec, 21).map((x) => x * 5);
  const r = rng(8);
  const samples = Array.from({ length: 5 }, () => ({
    context: [r.int(10), r.int(10)],
    tokens: Array.from({ length: 4 }, () => r.int(10)),
    lossMask: [1, 1, 0, 1],
    advantages: Array.from({ length: 4 }, () => r.range(-1, 1)),
    oldLogprobs: Array.from({ length: 4 }, () => -r.range(1, 3)),
    lossWeights: [0.05, 0.1, 0.1, 0],
    refLogprobs: Array.from({ length: 4 }, () => -r.range(1, 3)),
  }));
  const settings = { clipLow: 0.2, clipHigh: 0.25, dualClip: 3, klCoef: 0.2, entropyCoef: 0.03 };
  const out = await rt.update({ theta, m: new Float32Array(P), v: new Float32Array(P), step: 0 }, samples, {
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weightDecay: 0,
    maxGradNorm: Infinity,
    klType: 'low_var_kl',
    innerSteps: 1,
    ...settings,
  });
  const scored = await rt.score(theta, samples);
  const pick = <T>(f: (s: (typeof samples)[number], t: number, i: number) => T) =>
    samples
      .flatMap((s, i) => s.tokens.map((_, t) => ({ s, t, i })))
      .filter(({ s, t }) => s.lossMask[t] === 1)
      .map(({ s, t, i }) => f(s, t, i));
  const ref = referenceLoss(
    {
      logp: pick((_, t, i) => scored.logprobs[i]![t]!),
      logpOld: pick((s, t) => s.oldLogprobs[t]!),
      advantages: pick((s, t) => s.advantages[t]!),
      weights: pick((s, t) => s.lossWeights[t]!),
      refLogp: pick((s, t) => s.refLogprobs[t]!),
      entropy: pick((_, t, i) => scored.entropy[i]![t]!),
    },
    {
      clipLow: settings.clipLow,
      clipHigh: settings.clipHigh,
      dualClip: settings.dualClip,
      kl: { type: 'low_var_kl', coef: settings.klCoef },
      entropyCoef: settings.entropyCoef,
    },
  );
  const m = out.steps[0]!;
  const near = (a: number, b: number) => Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(b));
  assert.ok(near(m.loss, ref.loss), `loss ${m.loss} vs ${ref.loss}`);
  assert.ok(near(m.pg_loss, ref.pg), 'pg');
  assert.ok(near(m.kl_loss, ref.kl), 'kl');
  assert.ok(near(m.entropy_sum, ref.entropy), 'entropy sum');
  assert.ok(near(m.clip_fraction, ref.diagnostics.clipFraction), 'clip fraction');
  assert.ok(near(m.approx_kl, ref.diagnostics.approxKl), 'approx kl');
  assert.ok(near(m.entropy, ref.diagnostics.entropy!), 'mean entropy');
  assert.equal(out.tokens, 15);
});
