/**
 * The optimizer half of the update graph:
 *  - one clip + AdamW step in ONNX equals a plain TypeScript reference step,
 *    bit for bit (each float32 op mirrored with Math.fround);
 *  - the update graph's step = (its gradient) → clip → AdamW, bit for bit;
 *  - K fused inner steps equal K separate runs of one step, bit for bit.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { biasCorrections } from '../../../engines/onnx/ops/adamw';
import { initWeights } from '../../../engines/families/tiny-lm/init';
import type { OptimState, UpdateSample, UpdateSettings } from '../../../engines/onnx/model-runtime';
import { TinyLmRuntime } from '../../../engines/onnx/tiny-lm/runtime';
import { normalizeSpec, paramLayout } from '../../../engines/families/tiny-lm/spec';
import { updateRows } from '../../../engines/onnx/tiny-lm/batch';
import { buildAdamwGraph, buildGradGraph } from '../../../engines/onnx/tiny-lm/update-graph';
import { sessionFactory } from '../../../engines/onnx/device';
import { rng, sameBits, session } from './helpers';

interface Hyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  maxGradNorm: number;
  stepSize: number;
  bc2Sqrt: number;
}

/** Plain TypeScript AdamW step in float32, op for op as adamw.ts documents it. */
function adamwReference(theta: Float32Array, m: Float32Array, v: Float32Array, grad: Float32Array, norm: number, h: Hyper) {
  const f = Math.fround;
  const coef = Math.min(1, f(f(h.maxGradNorm) / f(norm + f(1e-6))));
  const lr = f(h.lr);
  const b1 = f(h.beta1);
  const b2 = f(h.beta2);
  const decay = f(1 - f(lr * f(h.weightDecay)));
  const omb1 = f(1 - b1);
  const omb2 = f(1 - b2);
  const out = { theta: new Float32Array(theta.length), m: new Float32Array(theta.length), v: new Float32Array(theta.length) };
  for (let i = 0; i < theta.length; i++) {
    const g = f(grad[i]! * coef);
    const p = f(theta[i]! * decay);
    const mi = f(f(b1 * m[i]!) + f(omb1 * g));
    const vi = f(f(b2 * v[i]!) + f(omb2 * f(g * g)));
    const denom = f(f(f(Math.sqrt(vi)) / f(h.bc2Sqrt)) + f(h.eps));
    out.theta[i] = f(p - f(f(h.stepSize) * f(mi / denom)));
    out.m[i] = mi;
    out.v[i] = vi;
  }
  return out;
}

const f32 = (a: Float32Array) => new ort.Tensor('float32', a, [a.length]);
const scalar = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);

async function runAdamwGraph(s: ort.InferenceSession, theta: Float32Array, m: Float32Array, v: Float32Array, grad: Float32Array, h: Hyper) {
  const out = await s.run({
    theta: f32(theta),
    adam_m: f32(m),
    adam_v: f32(v),
    grad: f32(grad),
    lr: scalar(h.lr),
    beta1: scalar(h.beta1),
    beta2: scalar(h.beta2),
    eps: scalar(h.eps),
    weight_decay: scalar(h.weightDecay),
    max_grad_norm: scalar(h.maxGradNorm),
    step_size: scalar(h.stepSize),
    bc2_sqrt: scalar(h.bc2Sqrt),
  });
  return {
    theta: out.new_theta!.data as Float32Array,
    m: out.new_adam_m!.data as Float32Array,
    v: out.new_adam_v!.data as Float32Array,
    norm: (out.grad_norm!.data as Float32Array)[0],
  };
}

test('one AdamW step in ONNX equals the TypeScript reference bit for bit', async () => {
  const s = await session(buildAdamwGraph());
  const r = rng(3);
  const n = 1000;
  for (const [maxGradNorm, weightDecay, t] of [
    [1.0, 0.01, 1],
    [1e9, 0.0, 7],
    [0.05, 0.1, 1000],
  ] as const) {
    const theta = Float32Array.from({ length: n }, () => r.range(-1, 1));
    const m = Float32Array.from({ length: n }, () => (t === 1 ? 0 : r.range(-0.1, 0.1)));
    const v = Float32Array.from({ length: n }, () => (t === 1 ? 0 : r.range(0, 0.01)));
    const grad = Float32Array.from({ length: n }, () => r.range(-0.2, 0.2) * (r.uniform() < 0.1 ? 100 : 1));
    const bc = biasCorrections(1e-3, Math.fround(0.9), Math.fround(0.999), t, 1);
    const h: Hyper = { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay, maxGradNorm, stepSize: bc.stepSize[0]!, bc2Sqrt: bc.bc2Sqrt[0]! };
    const got = await runAdamwGraph(s, theta, m, v, grad, h);
    const normRef = Math.sqrt(grad.reduce((a, g) => a + g * g, 0));
    assert.ok(Math.abs(got.norm! - normRef) < 1e-5 * normRef, `grad norm ${got.norm} vs ${normRef}`);
    const ref = adamwReference(theta, m, v, grad, got.norm!, h);
    assert.ok(sameBits(got.m, ref.m), 'first moment');
    assert.ok(sameBits(got.v, ref.v), 'second moment');
    assert.ok(sameBits(got.theta, ref.theta), 'parameters');
    assert.ok(!sameBits(got.theta, theta), 'the step moved the parameters');
  }
});

const spec = normalizeSpec({ vocabSize: 12, contextWindow: 4, embedDim: 5, hiddenDim: 16, layers: 2 });

function batch(seed: number): UpdateSample[] {
  const r = rng(seed);
  return Array.from({ length: 6 }, () => {
    const n = 5;
    return {
      context: Array.from({ length: 3 }, () => r.int(12)),
      tokens: Array.from({ length: n }, () => r.int(12)),
      lossMask: Array.from({ length: n }, (_, t) => (t === 1 ? 0 : 1)),
      advantages: Array.from({ length: n }, () => r.range(-1, 1)),
      oldLogprobs: Array.from({ length: n }, () => r.range(-3.5, -1.5)),
      lossWeights: Array.from({ length: n }, () => 1 / 24),
      refLogprobs: [],
    };
  });
}

const SETTINGS: UpdateSettings = {
  lr: 3e-3,
  beta1: 0.9,
  beta2: 0.999,
  eps: 1e-8,
  weightDecay: 0.01,
  maxGradNorm: 0.05,
  clipLow: 0.2,
  clipHigh: 0.2,
  dualClip: 3,
  klCoef: 0,
  klType: 'low_var_kl',
  entropyCoef: 0,
  innerSteps: 1,
};

test('an update-graph step is its own gradient, clipped, through the AdamW step', async () => {
  const rt = new TinyLmRuntime(spec, sessionFactory('cpu', { intraOpThreads: 1 }), { minRows: 2 });
  const P = paramLayout(spec).total;
  const theta = initWeights(spec, 9);
  const state = { theta, m: new Float32Array(P), v: new Float32Array(P), step: 0 };
  const samples = batch(1);
  const upd = await rt.update(state, samples, SETTINGS);

  // Gradient from the grad graph on the same rows.
  const rows = updateRows(spec, samples, 2);
  const g = await session(buildGradGraph(spec, 'float32'));
  const N = rows.rows;
  const out = await g.run({
    theta: f32(theta),
    windows: new ort.Tensor('int64', rows.windows, [N, spec.contextWindow]),
    targets: new ort.Tensor('int64', rows.targets, [N]),
    advantages: f32(rows.advantages),
    old_logprobs: f32(rows.oldLogprobs),
    weights: f32(rows.weights),
    row_mask: f32(rows.rowMask),
    ref_logprobs: f32(rows.refLogprobs),
    has_ref: new ort.Tensor('bool', rows.hasRef, [N]),
    clip_low: scalar(SETTINGS.clipLow),
    clip_high: scalar(SETTINGS.clipHigh),
    dual_clip: scalar(SETTINGS.dualClip),
    kl_coef: scalar(0),
    kl_is_k3: new ort.Tensor('bool', Uint8Array.of(1), []),
    entropy_coef: scalar(0),
  });
  const grad = out.grad!.data as Float32Array;
  const bc = biasCorrections(Math.fround(SETTINGS.lr), Math.fround(0.9), Math.fround(0.999), 1, 1);
  const h: Hyper = { ...SETTINGS, stepSize: bc.stepSize[0]!, bc2Sqrt: bc.bc2Sqrt[0]! };
  const step = await runAdamwGraph(await session(buildAdamwGraph()), theta, state.m, state.v, grad, h);
  assert.equal(upd.steps[0]!.grad_norm, step.norm);
  assert.ok(upd.steps[0]!.grad_norm > SETTINGS.maxGradNorm, 'the clip is exercised');
  assert.ok(sameBits(upd.state.theta, step.theta));
  assert.ok(sameBits(upd.state.m, step.m));
  assert.ok(sameBits(upd.state.v, step.v));
  const ref = adamwReference(theta, state.m, state.v, grad, step.norm!, h);
  assert.ok(sameBits(upd.state.theta, ref.theta), 'equals the TypeScript reference');
  assert.equal(upd.state.step, 1);
});

test('K fused inner steps equal K separate single-step runs, bit for bit', async () => {
  const rt = new TinyLmRuntime(spec, sessionFactory('cpu', { intraOpThreads: 1 }), { minRows: 2 });
  const P = paramLayout(spec).total;
  const start: OptimState = { theta: initWeights(spec, 4), m: new Float32Array(P), v: new Float32Array(P), step: 0 };
  // Behaviour log-probs from Score: the first inner step must then see ratio = 1 exactly.
  const samples = batch(2);
  const scored = await rt.score(start.theta, samples);
  samples.forEach((x, i) => (x.oldLogprobs = Array.from(scored.logprobs[i]!)));
  const fused = await rt.update(start, samples, { ...SETTINGS, innerSteps: 3 });
  let state = start;
  const metrics = [];
  for (let k = 0; k < 3; k++) {
    const one = await rt.update(state, samples, SETTINGS);
    state = one.state;
    metrics.push(one.steps[0]);
  }
  assert.equal(fused.state.step, 3);
  assert.equal(state.step, 3);
  assert.ok(sameBits(fused.state.theta, state.theta));
  assert.ok(sameBits(fused.state.m, state.m));
  assert.ok(sameBits(fused.state.v, state.v));
  assert.deepEqual(fused.steps, metrics);
  assert.equal(fused.steps[0]!.clip_fraction, 0, 'first inner step: ratio 1 (no clipping)');
  assert.equal(fused.steps[0]!.approx_kl, 0, 'first inner step: ratio exactly 1');
  assert.ok(fused.steps[2]!.approx_kl > 0, 'later inner steps move away from the behaviour policy');
});
