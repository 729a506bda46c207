/**
 * The transformer's float32 graphs as the engine would run them:
 *  - causality: changing later tokens never changes an earlier position's
 *    log-prob (bit for bit, in one batch), and a prefix scored alone matches;
 *  - Score equals the float64 reference within float32 rounding;
 *  - one update step = its own gradient → clip → AdamW (tiny-lm/adamw.ts), bit
 *    for bit; K fused steps = K single-step runs; reruns are bitwise identical.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { biasCorrections } from '../../../engines/onnx/ops/adamw';
import { buildAdamwGraph } from '../../../engines/onnx/tiny-lm/update-graph';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { referenceForward } from '../../../engines/onnx/transformer/reference';
import { buildTransformerScoreGraph } from '../../../engines/onnx/transformer/score-graph';
import { paramLayout, type TransformerSpec } from '../../../engines/families/transformer/spec';
import { buildTransformerGradGraph, buildTransformerUpdateGraph } from '../../../engines/onnx/transformer/update-graph';
import { rng, sameBits, session, TINY_LAYOUTS } from './helpers';

const SPECS = TINY_LAYOUTS;

/** Weights large enough that every position's distribution is far from uniform. */
function theta32(spec: TransformerSpec, seed: number): Float32Array {
  return Float32Array.from(initTransformerWeights(spec, seed), (x) => x * 20);
}

const i64 = (rows: number[][]) => new ort.Tensor('int64', BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0]!.length]);

async function score(s: ort.InferenceSession, theta: Float32Array, tokens: number[][], targets: number[][]) {
  const out = await s.run({ theta: new ort.Tensor('float32', theta, [theta.length]), tokens: i64(tokens), targets: i64(targets) });
  return { logprobs: out.logprobs!.data as Float32Array, entropy: out.entropy!.data as Float32Array };
}

for (const [name, spec] of SPECS) {
  test(`causality: later tokens never change an earlier position's log-prob (${name})`, async () => {
    const s = await session(buildTransformerScoreGraph(spec));
    const theta = theta32(spec, 1);
    const r = rng(5);
    const S = 10;
    const base = Array.from({ length: S }, () => r.int(spec.vocabSize));
    const targets = Array.from({ length: S }, () => r.int(spec.vocabSize));
    for (const k of [1, 4, 9]) {
      const changed = base.map((t, p) => (p >= k ? (t + 1 + r.int(spec.vocabSize - 1)) % spec.vocabSize : t));
      const out = await score(s, theta, [base, changed], [targets, targets]);
      const a = out.logprobs.subarray(0, S);
      const b = out.logprobs.subarray(S, 2 * S);
      assert.ok(sameBits(a.subarray(0, k), b.subarray(0, k)), `positions < ${k} changed`);
      assert.ok(!sameBits(a.subarray(k), b.subarray(k)), `positions ≥ ${k} should see the change`);
      // A prefix scored alone (shorter S: other GEMM/softmax shapes) agrees within float32 rounding.
      const alone = await score(s, theta, [base.slice(0, k), base.slice(0, k)], [targets.slice(0, k), targets.slice(0, k)]);
      for (let p = 0; p < k; p++) assert.ok(Math.abs(alone.logprobs[p]! - a[p]!) < 1e-5, `prefix alone, position ${p}: ${alone.logprobs[p]} vs ${a[p]}`);
    }
  });

  test(`Score matches the float64 reference within float32 rounding, its head in one chunk or in chunks of 4 rows (${name})`, async () => {
    const theta = theta32(spec, 2);
    const r = rng(9);
    const seqs = [0, 1, 2].map(() => Array.from({ length: 7 }, () => r.int(spec.vocabSize)));
    const targets = seqs.map((q) => q.map((_, p) => q[(p + 1) % q.length]!));
    const out = await score(await session(buildTransformerScoreGraph(spec)), theta, seqs, targets!);
    // 21 rows in chunks of 4 (the last one partial): the same per-row values up to float32 rounding
    // (not bit for bit: the head's GEMM runs at other shapes)
    const chunked = await score(await session(buildTransformerScoreGraph(spec, 'float32', 4)), theta, seqs, targets!);
    const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(1, Math.abs(b));
    const worstChunked = Math.max(
      ...[...out.logprobs.keys()].map((i) => Math.max(rel(chunked.logprobs[i]!, out.logprobs[i]!), rel(chunked.entropy[i]!, out.entropy[i]!))),
    );
    assert.ok(worstChunked < 1e-6, `chunked head differs by ${worstChunked} (relative)`);
    const ref = referenceForward(spec, theta, seqs);
    seqs.forEach((q, b) =>
      q.forEach((_, p) => {
        const want = ref.logp[b]![p]![targets[b]![p]!]!;
        const entropy = -ref.logp[b]![p]!.reduce((acc, lp) => acc + Math.exp(lp) * lp, 0);
        assert.ok(Math.abs(out.logprobs[b * 7 + p]! - want) < 1e-4, `(${b}, ${p}): ${out.logprobs[b * 7 + p]} vs ${want}`);
        assert.ok(Math.abs(out.entropy[b * 7 + p]! - entropy) < 1e-4, `entropy (${b}, ${p})`);
      }),
    );
    // The reference log-probs are far from uniform, so the comparison is not vacuous.
    assert.ok(ref.logp.flat().some((row) => Math.max(...row) > Math.log(1 / spec.vocabSize) + 1));
  });
}

const HYPER = { lr: 0.01, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 0.05 };

function batchFeeds(spec: TransformerSpec, seed: number) {
  const r = rng(seed);
  const B = 4;
  const S = 8;
  const tokens = Array.from({ length: B }, () => Array.from({ length: S }, () => r.int(spec.vocabSize)));
  const grid = (f: (b: number, p: number) => number) =>
    new ort.Tensor('float32', Float32Array.from(tokens.flatMap((row, b) => row.map((_, p) => f(b, p)))), [B, S]);
  const weight = (b: number, p: number) => (p >= 2 && p < S - 1 - b ? 1 / 14 : 0); // context and right padding untrained
  const sc = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);
  return {
    tokens: i64(tokens),
    targets: i64(tokens.map((row) => row.map((_, p) => row[(p + 1) % S]!))),
    advantages: grid(() => r.range(-1, 1)),
    old_logprobs: grid(() => -Math.log(spec.vocabSize) + r.range(-0.1, 0.1)),
    weights: grid(weight),
    row_mask: grid((b, p) => (weight(b, p) !== 0 ? 1 : 0)),
    ref_logprobs: grid(() => -Math.log(spec.vocabSize)),
    has_ref: new ort.Tensor(
      'bool',
      Uint8Array.from(tokens.flat(), (_, i) => i % 2),
      [B, S],
    ),
    clip_low: sc(0.2),
    clip_high: sc(0.28),
    dual_clip: sc(3),
    kl_coef: sc(0.1),
    kl_is_k3: new ort.Tensor('bool', Uint8Array.of(1), []),
    entropy_coef: sc(0.01),
  };
}

/** The batch's [B, S] row tensors as M micro-batches [M, B/M, S]. */
function microBatches(feeds: Record<string, ort.Tensor>, M: number): Record<string, ort.Tensor> {
  const out: Record<string, ort.Tensor> = {};
  for (const [k, t] of Object.entries(feeds)) out[k] = t.dims.length === 2 ? new ort.Tensor(t.type, t.data as never, [M, t.dims[0]! / M, t.dims[1]!]) : t;
  return out;
}

async function runUpdate(
  s: ort.InferenceSession,
  spec: TransformerSpec,
  theta: Float32Array,
  m: Float32Array,
  v: Float32Array,
  firstStep: number,
  K: number,
  M = 1,
  seed = 4,
) {
  const P = paramLayout(spec).total;
  const bc = biasCorrections(Math.fround(HYPER.lr), Math.fround(HYPER.beta1), Math.fround(HYPER.beta2), firstStep, K);
  const vec = (a: Float32Array) => new ort.Tensor('float32', a, [P]);
  const sc = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);
  const out = await s.run({
    ...microBatches(batchFeeds(spec, seed), M),
    theta: vec(theta),
    adam_m: vec(m),
    adam_v: vec(v),
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
    theta: out.new_theta!.data as Float32Array,
    m: out.new_adam_m!.data as Float32Array,
    v: out.new_adam_v!.data as Float32Array,
    metrics: out.metrics!.data as Float32Array,
  };
}

for (const [name, spec] of SPECS) {
  test(`update step = its gradient → clip → AdamW, bit for bit; fused K steps = K runs; reruns identical (${name})`, async () => {
    const P = paramLayout(spec).total;
    const theta = theta32(spec, 3);
    const zeros = new Float32Array(P);
    const upd = await session(buildTransformerUpdateGraph(spec));
    const one = await runUpdate(upd, spec, theta, zeros, zeros, 1, 1);

    const grad = await session(buildTransformerGradGraph(spec, 'float32'));
    const g = await grad.run({ ...batchFeeds(spec, 4), theta: new ort.Tensor('float32', theta, [P]) });
    const adamw = await session(buildAdamwGraph());
    const bc = biasCorrections(Math.fround(HYPER.lr), Math.fround(HYPER.beta1), Math.fround(HYPER.beta2), 1, 1);
    const sc = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);
    const vec = (a: Float32Array) => new ort.Tensor('float32', a, [P]);
    const ref = await adamw.run({
      theta: vec(theta),
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
    assert.ok(sameBits(one.theta, ref.new_theta!.data as Float32Array), 'θ after one step');
    assert.ok(sameBits(one.m, ref.new_adam_m!.data as Float32Array), 'm after one step');
    assert.equal(one.metrics[0], (g.loss!.data as Float32Array)[0], 'step metric "loss" is the loss at the starting weights');
    assert.ok((ref.grad_norm!.data as Float32Array)[0]! > HYPER.maxGradNorm, 'the clip binds in this batch');
    assert.ok(!sameBits(one.theta, theta));

    const fused = await runUpdate(upd, spec, theta, zeros, zeros, 1, 3);
    let st: { theta: Float32Array; m: Float32Array; v: Float32Array } = { theta, m: zeros, v: zeros };
    for (let k = 1; k <= 3; k++) st = await runUpdate(upd, spec, st.theta, st.m, st.v, k, 1);
    assert.ok(sameBits(fused.theta, st.theta) && sameBits(fused.m, st.m) && sameBits(fused.v, st.v), '3 fused steps = 3 runs');
    const again = await runUpdate(upd, spec, theta, zeros, zeros, 1, 3);
    assert.ok(sameBits(fused.theta, again.theta) && sameBits(fused.metrics, again.metrics), 'rerun is bitwise identical');
  });
}

for (const [name, spec] of SPECS) {
  test(`update with 2 micro-batches = the whole batch at once, within float32 summation order; bitwise on rerun (${name})`, async () => {
    const P = paramLayout(spec).total;
    const theta = theta32(spec, 5);
    const zeros = new Float32Array(P);
    const upd = await session(buildTransformerUpdateGraph(spec));
    const whole = await runUpdate(upd, spec, theta, zeros, zeros, 1, 2, 1, 8);
    const split = await runUpdate(upd, spec, theta, zeros, zeros, 1, 2, 2, 8);
    const again = await runUpdate(upd, spec, theta, zeros, zeros, 1, 2, 2, 8);
    assert.ok(sameBits(split.theta, again.theta) && sameBits(split.metrics, again.metrics), 'micro-batched rerun is bitwise identical');
    let worst = 0;
    let moved = 0;
    for (let i = 0; i < P; i++) {
      worst = Math.max(worst, Math.abs(split.theta[i]! - whole.theta[i]!));
      moved = Math.max(moved, Math.abs(whole.theta[i]! - theta[i]!));
    }
    assert.ok(worst < 1e-3 * moved, `θ differs by ${worst} (update size ${moved})`);
    whole.metrics.forEach((x, i) => assert.ok(Math.abs(split.metrics[i]! - x) <= 1e-4 * Math.max(1, Math.abs(x)), `metric ${i}: ${split.metrics[i]} vs ${x}`));
  });
}
