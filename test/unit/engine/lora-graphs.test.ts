/**
 * The LoRA training graphs (engines/onnx/transformer/lora-update-graph.ts):
 *  - the adapter gradient (float64) equals an independent chain: θ' merged on the host in float64 loops, the
 *    plain transformer's gradient graph at θ' (buildTransformerGradGraph, checked against finite differences
 *    in transformer-gradient.test.ts), then dA = s·Bᵀ·dW'ᵀ and dB = s·dW'ᵀ·Aᵀ in float64 loops;
 *  - and central finite differences of its own loss, for every adapter value;
 *  - one update step = that gradient (float32) → clip → AdamW over φ, bit for bit, its loss the plain graph's at
 *    mergeLora's weights bit for bit; K fused steps = K runs;
 *    2 micro-batches = the whole batch within float32 summation order.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { biasCorrections } from '../../../engines/onnx/ops/adamw';
import { buildAdamwGraph } from '../../../engines/onnx/tiny-lm/update-graph';
import { adapterLayout, baseSpecOf, loraScale, mergeLora } from '../../../engines/families/transformer/lora';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec } from '../../../engines/families/transformer/spec';
import { buildTransformerGradGraph } from '../../../engines/onnx/transformer/update-graph';
import { buildLoraGradGraph, buildLoraUpdateGraph } from '../../../engines/onnx/transformer/lora-update-graph';
import { rng, sameBits, session } from './helpers';

/** float64 graphs with basic optimizations only (transformer-gradient.test.ts says why). */
const session64 = (model: Uint8Array) =>
  ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'basic', logSeverityLevel: 3 });

const small = { vocabSize: 7, layers: 2, maxSeq: 8 };
const CONFIGS: [string, TransformerSpec][] = [
  [
    'GPT-2 layout, tied head; q, v and the MLP down projection, rank 2',
    normalizeTransformerSpec({ ...small, width: 8, heads: 2, mlpWidth: 12, lora: { rank: 2, alpha: 3, targets: ['q', 'v', '2'] } }),
  ],
  [
    'Llama layout (RoPE, GQA, SwiGLU, untied, no biases); every projection, rank 3',
    normalizeTransformerSpec({
      ...small,
      width: 8,
      heads: 4,
      kvHeads: 2,
      norm: 'rmsnorm',
      positions: 'rope',
      mlp: 'swiglu',
      tiedHead: false,
      bias: false,
      mlpWidth: 10,
      lora: { rank: 3, alpha: 5, targets: ['q', 'k', 'v', 'o', 'g', 'u', 'd'] },
    }),
  ],
  [
    'Qwen3 layout (headDim 6, q/k norms); k and o, rank 1',
    normalizeTransformerSpec({
      ...small,
      width: 8,
      heads: 4,
      kvHeads: 2,
      headDim: 6,
      qkNorm: true,
      norm: 'rmsnorm',
      positions: 'rope',
      mlp: 'swiglu',
      bias: false,
      mlpWidth: 10,
      lora: { rank: 1, alpha: 2, targets: ['k', 'o'] },
    }),
  ],
];

/** Values of order `scale` (gains near 1) for the base, and both A and B non-zero so every path carries gradient. */
function baseTheta(spec: TransformerSpec, seed: number): Float64Array {
  const r = rng(seed);
  const layout = paramLayout(baseSpecOf(spec));
  const theta = new Float64Array(layout.total);
  for (const slot of layout.slots)
    for (let i = slot.offset; i < slot.offset + slot.size; i++) theta[i] = slot.kind === 'gain' ? r.range(0.7, 1.3) : r.range(-0.5, 0.5);
  return theta;
}
const adapter = (spec: TransformerSpec, seed: number) => {
  const r = rng(seed);
  return Float64Array.from({ length: adapterLayout(spec).total }, () => r.range(-0.4, 0.4));
};

/** A [B, S] batch (B = 4, S = 6) in every PPO regime; `ft` its float type. */
function batch(spec: TransformerSpec, ft: 'float32' | 'float64', seed: number, M = 0): Record<string, ort.Tensor> {
  const r = rng(seed);
  const B = 4;
  const S = 6;
  const dims = M ? [M, B / M, S] : [B, S];
  const typed = (a: Float64Array) => (ft === 'float32' ? Float32Array.from(a) : a);
  const tokens = Array.from({ length: B * S }, () => r.int(spec.vocabSize));
  const weight = (i: number) => (i % S >= 1 && i % S < S - 1 ? 0.1 + 0.05 * (i % 3) : 0);
  const grid = (f: (i: number) => number) => new ort.Tensor(ft, typed(Float64Array.from({ length: B * S }, (_, i) => f(i))), dims);
  const sc = (x: number) => new ort.Tensor(ft, typed(Float64Array.of(x)), []);
  return {
    tokens: new ort.Tensor('int64', BigInt64Array.from(tokens, BigInt), dims),
    targets: new ort.Tensor('int64', BigInt64Array.from(tokens.map((_, i) => BigInt(tokens[(i + 1) % tokens.length]!))), dims),
    advantages: grid(() => r.range(-1.5, 1.5)),
    old_logprobs: grid(() => -Math.log(spec.vocabSize) + r.range(-1, 1)),
    weights: grid(weight),
    row_mask: grid((i) => (weight(i) !== 0 ? 1 : 0)),
    ref_logprobs: grid(() => -Math.log(spec.vocabSize) + r.range(-0.5, 0.5)),
    has_ref: new ort.Tensor(
      'bool',
      Uint8Array.from(tokens, (_, i) => i % 2),
      dims,
    ),
    clip_low: sc(0.2),
    clip_high: sc(0.28),
    dual_clip: sc(3),
    kl_coef: sc(0.3),
    kl_is_k3: new ort.Tensor('bool', Uint8Array.of(1), []),
    entropy_coef: sc(0.02),
  };
}

/** W + s·Aᵀ·Bᵀ for every target, in float64 loops. */
function merge64(spec: TransformerSpec, theta: Float64Array, phi: Float64Array): Float64Array {
  const { slots, base } = adapterLayout(spec);
  const s = loraScale(spec.lora!);
  const out = Float64Array.from(theta);
  for (let i = 0; i < slots.length; i += 2) {
    const [a, b] = [slots[i]!, slots[i + 1]!];
    const w = base.get(`l${a.layer}.w${a.target}`)!;
    const [r, fanIn] = a.shape;
    const fanOut = b.shape[0];
    for (let x = 0; x < fanIn; x++)
      for (let y = 0; y < fanOut; y++) {
        let d = 0;
        for (let k = 0; k < r; k++) d += phi[a.offset + k * fanIn + x]! * phi[b.offset + y * r + k]!;
        out[w.offset + x * fanOut + y]! += s * d;
      }
  }
  return out;
}

/** dA = s·Bᵀ·dWᵀ, dB = s·dWᵀ·Aᵀ from the merged θ's gradient, in float64 loops. */
function chain64(spec: TransformerSpec, dTheta: Float64Array, phi: Float64Array): Float64Array {
  const { slots, base, total } = adapterLayout(spec);
  const s = loraScale(spec.lora!);
  const out = new Float64Array(total);
  for (let i = 0; i < slots.length; i += 2) {
    const [a, b] = [slots[i]!, slots[i + 1]!];
    const w = base.get(`l${a.layer}.w${a.target}`)!;
    const [r, fanIn] = a.shape;
    const fanOut = b.shape[0];
    const dW = (x: number, y: number) => dTheta[w.offset + x * fanOut + y]!;
    for (let k = 0; k < r; k++)
      for (let x = 0; x < fanIn; x++) {
        let d = 0;
        for (let y = 0; y < fanOut; y++) d += phi[b.offset + y * r + k]! * dW(x, y);
        out[a.offset + k * fanIn + x] = s * d;
      }
    for (let y = 0; y < fanOut; y++)
      for (let k = 0; k < r; k++) {
        let d = 0;
        for (let x = 0; x < fanIn; x++) d += dW(x, y) * phi[a.offset + k * fanIn + x]!;
        out[b.offset + y * r + k] = s * d;
      }
  }
  return out;
}

async function loraGrad64(spec: TransformerSpec, feeds: Record<string, ort.Tensor>) {
  const grad = await session64(buildLoraGradGraph(spec, 'float64'));
  return async (theta: Float64Array, phi: Float64Array) => {
    const out = await grad.run({ ...feeds, base_theta: new ort.Tensor('float64', theta, [theta.length]), phi: new ort.Tensor('float64', phi, [phi.length]) });
    return { loss: (out.loss!.data as Float64Array)[0]!, grad: out.grad!.data as Float64Array };
  };
}

for (const [name, spec] of CONFIGS) {
  test(`LoRA adapter gradient = the plain gradient at the merged θ chained to A and B by hand (float64): ${name}`, async () => {
    const feeds = batch(spec, 'float64', 11);
    const theta = baseTheta(spec, 3);
    const phi = adapter(spec, 5);
    const lora = await (await loraGrad64(spec, feeds))(theta, phi);

    const merged = merge64(spec, theta, phi);
    const plain = await session64(buildTransformerGradGraph(baseSpecOf(spec), 'float64'));
    const out = await plain.run({ ...feeds, theta: new ort.Tensor('float64', merged, [merged.length]) });
    const expected = chain64(spec, out.grad!.data as Float64Array, phi);
    assert.equal((out.loss!.data as Float64Array)[0], lora.loss, 'the loss is the merged model’s');
    let worst = 0;
    expected.forEach((e, i) => {
      const err = Math.abs(e - lora.grad[i]!) / Math.max(1e-3, Math.abs(e));
      worst = Math.max(worst, err);
      assert.ok(err < 1e-9, `adapter value ${i}: graph ${lora.grad[i]}, reference ${e}`);
    });
    for (const slot of adapterLayout(spec).slots)
      assert.ok(
        lora.grad.subarray(slot.offset, slot.offset + slot.size).some((g) => Math.abs(g) > 1e-6),
        `no gradient reaches ${slot.name}`,
      );
    console.log(`# ${name}: ${expected.length} adapter values, worst relative error ${worst.toExponential(2)}`);
  });
}

test('LoRA adapter gradient matches central finite differences of its own loss for every adapter value', async () => {
  const spec = CONFIGS[1]![1];
  const run = await loraGrad64(spec, batch(spec, 'float64', 12));
  const theta = baseTheta(spec, 4);
  const phi = adapter(spec, 6);
  const at = await run(theta, phi);
  const h = 1e-6;
  for (let i = 0; i < phi.length; i++) {
    const plus = phi.slice();
    plus[i]! += h;
    const minus = phi.slice();
    minus[i]! -= h;
    const fd = ((await run(theta, plus)).loss - (await run(theta, minus)).loss) / (2 * h);
    assert.ok(Math.abs(fd - at.grad[i]!) / Math.max(1, Math.abs(fd)) < 1e-6, `adapter value ${i}: finite difference ${fd}, graph ${at.grad[i]}`);
  }
});

const HYPER = { lr: 0.01, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 0.05 };
const sc = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);
const vec = (a: Float32Array) => new ort.Tensor('float32', a, [a.length]);

async function runUpdate(
  s: ort.InferenceSession,
  spec: TransformerSpec,
  theta: Float32Array,
  st: { phi: Float32Array; m: Float32Array; v: Float32Array },
  first: number,
  K: number,
  M = 1,
) {
  const bc = biasCorrections(Math.fround(HYPER.lr), Math.fround(HYPER.beta1), Math.fround(HYPER.beta2), first, K);
  const out = await s.run({
    ...batch(spec, 'float32', 13, M),
    base_theta: vec(theta),
    theta: vec(st.phi),
    adam_m: vec(st.m),
    adam_v: vec(st.v),
    lr: sc(HYPER.lr),
    beta1: sc(HYPER.beta1),
    beta2: sc(HYPER.beta2),
    eps: sc(HYPER.eps),
    weight_decay: sc(HYPER.weightDecay),
    max_grad_norm: sc(HYPER.maxGradNorm),
    step_size: new ort.Tensor('float32', bc.stepSize, [K]),
    bc2_sqrt: new ort.Tensor('float32', bc.bc2Sqrt, [K]),
    steps: new ort.Tensor('int64', BigInt64Array.of(BigInt(K)), []),
  });
  return {
    phi: out.new_theta!.data as Float32Array,
    m: out.new_adam_m!.data as Float32Array,
    v: out.new_adam_v!.data as Float32Array,
    metrics: out.metrics!.data as Float32Array,
  };
}

for (const [name, spec] of CONFIGS) {
  test(`LoRA update step = its adapter gradient → clip → AdamW over φ, bit for bit; fused K = K runs; micro-batches (${name})`, async () => {
    const theta = Float32Array.from(baseTheta(spec, 7));
    const phi = Float32Array.from(adapter(spec, 8));
    const Pa = phi.length;
    const zeros = new Float32Array(Pa);
    const upd = await session(buildLoraUpdateGraph(spec));
    const one = await runUpdate(upd, spec, theta, { phi, m: zeros, v: zeros }, 1, 1);
    assert.equal(one.phi.length, Pa);

    const grad = await session(buildLoraGradGraph(spec, 'float32'));
    const g = await grad.run({ ...batch(spec, 'float32', 13), base_theta: vec(theta), phi: vec(phi) });
    const bc = biasCorrections(Math.fround(HYPER.lr), Math.fround(HYPER.beta1), Math.fround(HYPER.beta2), 1, 1);
    const ref = await (
      await session(buildAdamwGraph())
    ).run({
      theta: vec(phi),
      adam_m: vec(zeros),
      adam_v: vec(zeros),
      grad: g.grad as ort.Tensor,
      lr: sc(HYPER.lr),
      beta1: sc(HYPER.beta1),
      beta2: sc(HYPER.beta2),
      eps: sc(HYPER.eps),
      weight_decay: sc(HYPER.weightDecay),
      max_grad_norm: sc(HYPER.maxGradNorm),
      step_size: sc(bc.stepSize[0]!),
      bc2_sqrt: sc(bc.bc2Sqrt[0]!),
    });
    assert.ok(sameBits(one.phi, ref.new_theta!.data as Float32Array), 'φ after one step');
    assert.ok(sameBits(one.m, ref.new_adam_m!.data as Float32Array) && sameBits(one.v, ref.new_adam_v!.data as Float32Array), 'm, v after one step');
    assert.equal(one.metrics[0], (g.loss!.data as Float32Array)[0], 'step metric "loss" is the loss at the starting adapter');
    // the graph merges as mergeLora does on the host (Generate / Score): the same loss, bit for bit
    const merged = mergeLora(spec, theta, phi);
    const plain = await (await session(buildTransformerGradGraph(baseSpecOf(spec), 'float32'))).run({ ...batch(spec, 'float32', 13), theta: vec(merged) });
    assert.equal((g.loss!.data as Float32Array)[0], (plain.loss!.data as Float32Array)[0], 'the loss at the host-merged weights');
    assert.ok(!sameBits(one.phi, phi));

    const fused = await runUpdate(upd, spec, theta, { phi, m: zeros, v: zeros }, 1, 3);
    let st: { phi: Float32Array; m: Float32Array; v: Float32Array } = { phi, m: zeros, v: zeros };
    for (let k = 1; k <= 3; k++) st = await runUpdate(upd, spec, theta, st, k, 1);
    assert.ok(sameBits(fused.phi, st.phi) && sameBits(fused.m, st.m) && sameBits(fused.v, st.v), '3 fused steps = 3 runs');

    const split = await runUpdate(upd, spec, theta, { phi, m: zeros, v: zeros }, 1, 3, 2);
    let worst = 0;
    let moved = 0;
    for (let i = 0; i < Pa; i++) {
      worst = Math.max(worst, Math.abs(split.phi[i]! - fused.phi[i]!));
      moved = Math.max(moved, Math.abs(fused.phi[i]! - phi[i]!));
    }
    assert.ok(worst < 1e-3 * moved, `φ with 2 micro-batches differs by ${worst} (update size ${moved})`);
  });
}
