/**
 * The update graph's hand-derived backward pass against central finite
 * differences of its own loss, on the float64 variant of the graph, for every
 * parameter. The batch repeats token ids inside windows and across rows (the
 * ScatterND reduction='add' case), and its old log-probs are placed so that
 * tokens sit in every PPO regime (unclipped, clipped, dual clip, log-ratio
 * clamp) with k1 / k3 KL (one k3 clamped) and an entropy bonus.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { initWeights } from '../../../engines/families/tiny-lm/init';
import { normalizeSpec, paramLayout, type TinyLmSpec } from '../../../engines/families/tiny-lm/spec';
import { buildGradGraph } from '../../../engines/onnx/tiny-lm/update-graph';
import { buildScoreGraph } from '../../../engines/onnx/tiny-lm/score-graph';
import { referenceLogp, session } from './helpers';

interface Row {
  window: number[];
  target: number;
  advantage: number;
  /** intended ratio π/π_old at θ */
  ratio: number;
  weight: number;
  /** ref − logp at θ, or null for no reference */
  refGap: number | null;
}

// Token 1 repeats inside windows and across rows; 6 is the pad id (V = 6).
const ROWS: Row[] = [
  { window: [6, 6, 1], target: 1, advantage: 1.0, ratio: 1.05, weight: 0.2, refGap: 0.3 }, // unclipped, A > 0
  { window: [1, 1, 1], target: 1, advantage: 0.7, ratio: 1.6, weight: 0.1, refGap: null }, // clipped high (grad 0)
  { window: [2, 1, 1], target: 3, advantage: -0.8, ratio: 0.5, weight: 0.3, refGap: -0.4 }, // clipped low, A < 0
  { window: [1, 2, 3], target: 0, advantage: 0.9, ratio: 0.6, weight: 0.15, refGap: 0.2 }, // A > 0, ratio low: unclipped
  { window: [6, 0, 0], target: 0, advantage: -1.5, ratio: 5, weight: 0.25, refGap: null }, // dual clip (A < 0, ratio > c)
  { window: [5, 5, 1], target: 5, advantage: 2.0, ratio: Math.exp(-25), weight: 0.5, refGap: 5 }, // log-ratio clamp; k3 clamp
  { window: [4, 1, 4], target: 2, advantage: -0.3, ratio: 0.95, weight: 0.4, refGap: -1.2 }, // unclipped, A < 0
  { window: [3, 3, 3], target: 3, advantage: 0.0, ratio: 1.0, weight: 0.05, refGap: 0.05 }, // A = 0: KL/entropy only
];

interface Settings {
  klIsK3: boolean;
  klCoef: number;
  entropyCoef: number;
}

async function check(spec: TinyLmSpec, s: Settings): Promise<void> {
  const P = paramLayout(spec).total;
  const theta = Float64Array.from(initWeights(spec, 11), (x) => x * 3);
  const N = ROWS.length;
  const W = spec.contextWindow;
  const logpAt = ROWS.map((r) => referenceLogp(spec, theta, r.window)[r.target]);
  const f64 = (xs: number[]) => new ort.Tensor('float64', Float64Array.from(xs), [xs.length]);
  const sc = (x: number) => new ort.Tensor('float64', Float64Array.of(x), []);
  const feeds: Record<string, ort.Tensor> = {
    windows: new ort.Tensor(
      'int64',
      BigInt64Array.from(
        ROWS.flatMap((r) => r.window),
        BigInt,
      ),
      [N, W],
    ),
    targets: new ort.Tensor(
      'int64',
      BigInt64Array.from(
        ROWS.map((r) => r.target),
        BigInt,
      ),
      [N],
    ),
    advantages: f64(ROWS.map((r) => r.advantage)),
    old_logprobs: f64(ROWS.map((r, i) => logpAt[i]! - Math.log(r.ratio))),
    weights: f64(ROWS.map((r) => r.weight)),
    row_mask: f64(ROWS.map(() => 1)),
    ref_logprobs: f64(ROWS.map((r, i) => (r.refGap === null ? 0 : logpAt[i]! + r.refGap))),
    has_ref: new ort.Tensor('bool', Uint8Array.from(ROWS.map((r) => (r.refGap === null ? 0 : 1))), [N]),
    clip_low: sc(0.2),
    clip_high: sc(0.28),
    dual_clip: sc(3),
    kl_coef: sc(s.klCoef),
    kl_is_k3: new ort.Tensor('bool', Uint8Array.of(s.klIsK3 ? 1 : 0), []),
    entropy_coef: sc(s.entropyCoef),
  };
  const grad = await session(buildGradGraph(spec, 'float64'));
  const run = async (t: Float64Array) => {
    const out = await grad.run({ ...feeds, theta: new ort.Tensor('float64', t, [P]) });
    return { loss: (out.loss!.data as Float64Array)[0], grad: out.grad!.data as Float64Array };
  };
  const base = await run(theta);
  assert.ok(Number.isFinite(base.loss));
  const h = 1e-6;
  let worst = 0;
  let nonZero = 0;
  for (let i = 0; i < P; i++) {
    const plus = theta.slice();
    plus[i]! += h;
    const minus = theta.slice();
    minus[i]! -= h;
    const fd = ((await run(plus)).loss! - (await run(minus)).loss!) / (2 * h);
    const err = Math.abs(fd - base.grad[i]!) / Math.max(1, Math.abs(fd));
    worst = Math.max(worst, err);
    if (Math.abs(fd) > 1e-6) nonZero++;
    assert.ok(err < 1e-6, `param ${i}: finite difference ${fd} vs backward ${base.grad[i]}`);
  }
  assert.ok(nonZero > P / 3, `gradient mostly zero (${nonZero}/${P}); the check would be vacuous`);

  // The embedding row of token 1 (4 occurrences over 4 rows) is where scatter-add matters.
  const emb = paramLayout(spec).slots.find((x) => x.name === 'emb')!;
  const row1 = Array.from(base.grad.subarray(emb.offset + spec.embedDim, emb.offset + 2 * spec.embedDim));
  assert.ok(
    row1.some((g) => Math.abs(g) > 1e-4),
    'token 1 embedding gradient is non-zero',
  );

  // The float32 graph computes the same gradient up to float32 rounding.
  const grad32 = await session(buildGradGraph(spec, 'float32'));
  const feeds32: Record<string, ort.Tensor> = {};
  for (const [k, v] of Object.entries(feeds)) {
    feeds32[k] = v.type === 'float64' ? new ort.Tensor('float32', Float32Array.from(v.data as Float64Array), v.dims) : v;
  }
  const out32 = await grad32.run({ ...feeds32, theta: new ort.Tensor('float32', Float32Array.from(theta), [P]) });
  const g32 = out32.grad!.data as Float32Array;
  const scale = Math.max(...Array.from(base.grad, Math.abs));
  for (let i = 0; i < P; i++) assert.ok(Math.abs(g32[i]! - base.grad[i]!) < 2e-4 * scale, `float32 grad ${i}: ${g32[i]} vs ${base.grad[i]}`);
}

test('backward matches central finite differences: tanh, 2 layers (residual), k3 KL + entropy bonus', async () => {
  const spec = normalizeSpec({ vocabSize: 6, contextWindow: 3, embedDim: 4, hiddenDim: 5, layers: 2, activation: 'tanh' });
  await check(spec, { klIsK3: true, klCoef: 0.5, entropyCoef: 0.05 });
});

test('backward matches central finite differences: relu, 3 layers, k1 KL', async () => {
  const spec = normalizeSpec({ vocabSize: 6, contextWindow: 3, embedDim: 3, hiddenDim: 6, layers: 3, activation: 'relu' });
  await check(spec, { klIsK3: false, klCoef: 0.3, entropyCoef: 0 });
});

test('the graph forward equals a plain TypeScript forward (float32 vs float64)', async () => {
  const spec = normalizeSpec({ vocabSize: 7, contextWindow: 4, embedDim: 3, hiddenDim: 8, layers: 2 });
  const theta = initWeights(spec, 5);
  const windows = [
    [7, 7, 7, 1],
    [1, 1, 2, 6],
    [0, 3, 3, 3],
  ];
  const s = await session(buildScoreGraph(spec));
  for (const target of [0, 3, 6]) {
    const out = await s.run({
      theta: new ort.Tensor('float32', theta, [theta.length]),
      windows: new ort.Tensor('int64', BigInt64Array.from(windows.flat(), BigInt), [3, 4]),
      targets: new ort.Tensor('int64', BigInt64Array.from([target, target, target], BigInt), [3]),
    });
    const lp = out.logprobs!.data as Float32Array;
    windows.forEach((w, i) => assert.ok(Math.abs(lp[i]! - referenceLogp(spec, theta, w)[target]!) < 1e-5));
  }
});
