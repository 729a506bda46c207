/**
 * The transformer's hand-built backward (engines/onnx/transformer/backward.ts):
 *  - float64 grad graph vs central finite differences of its own loss, for every
 *    parameter, for small configs covering each option (LayerNorm/RMSNorm,
 *    learned/RoPE, MHA/GQA/MQA, GELU/SwiGLU, tied/untied, biases or none, a free
 *    head dimension with q/k norms);
 *    tokens repeat within and across sequences (ScatterND reduction='add'), rows
 *    sit in every PPO regime, with KL and an entropy bonus;
 *  - logits and gradient vs the independent plain-TypeScript reference
 *    (reference.ts: loops + a scalar autodiff tape);
 *  - the float32 graph agrees with the float64 one up to float32 rounding.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { referenceForward, referenceObjective } from '../../../engines/onnx/transformer/reference';
import { buildTransformerLogitsGraph } from '../../../engines/onnx/transformer/score-graph';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec } from '../../../engines/families/transformer/spec';
import { buildTransformerGradGraph } from '../../../engines/onnx/transformer/update-graph';
import { rng, session } from './helpers';

/**
 * float64 graphs run with basic optimizations only: ORT's extended fusions are float32-only
 * (QuickGelu for x·σ(x)) or store constants as float32 (FusedMatMul's alpha = 1/√hd).
 */
const session64 = (model: Uint8Array) =>
  ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'basic', logSeverityLevel: 3 });

/** Varied weights of order 1 so attention, norms and activations are far from linear. */
function testTheta(spec: TransformerSpec, seed: number): Float64Array {
  const r = rng(seed);
  const layout = paramLayout(spec);
  const theta = new Float64Array(layout.total);
  for (const slot of layout.slots) {
    for (let i = slot.offset; i < slot.offset + slot.size; i++) {
      theta[i] = slot.kind === 'gain' ? r.range(0.7, 1.3) : slot.kind === 'bias' ? r.range(-0.2, 0.2) : r.range(-0.5, 0.5);
    }
  }
  return theta;
}

interface Row {
  advantage: number;
  /** intended ratio π/π_old at θ */
  ratio: number;
  weight: number;
  /** ref − logp at θ, or null for no reference */
  refGap: number | null;
}

// Two right-padded sequences; token 1 repeats within and across them.
const SEQS = [
  [1, 3, 1, 1, 2, 0],
  [4, 1, 5, 1, 6, 6], // the last position is padding (weight 0)
];
const UNUSED: Row = { advantage: 0, ratio: 1, weight: 0, refGap: null };
// Row (b, p) predicts SEQS[b][p + 1]; position 0 of each sequence is context (weight 0).
const ROWS: Row[][] = [
  [
    UNUSED,
    { advantage: 1.0, ratio: 1.05, weight: 0.2, refGap: 0.3 }, // unclipped, A > 0
    { advantage: 0.7, ratio: 1.6, weight: 0.1, refGap: null }, // clipped high (grad 0 from PPO)
    { advantage: -0.8, ratio: 0.5, weight: 0.3, refGap: -0.4 }, // clipped low, A < 0
    { advantage: 0.9, ratio: 0.6, weight: 0.15, refGap: 0.2 }, // A > 0, ratio low: unclipped
    UNUSED, // the last token predicts nothing
  ],
  [
    UNUSED,
    { advantage: -1.5, ratio: 5, weight: 0.25, refGap: null }, // dual clip
    { advantage: 2.0, ratio: Math.exp(-25), weight: 0.5, refGap: 5 }, // log-ratio clamp; k3 clamp
    { advantage: -0.3, ratio: 0.95, weight: 0.4, refGap: -1.2 }, // unclipped, A < 0
    UNUSED,
    UNUSED,
  ],
];
const B = SEQS.length;
const S = SEQS[0]!.length;
const targetOf = (b: number, p: number): number => (p + 1 < S ? SEQS[b]![p + 1]! : 0);

interface Settings {
  klIsK3: boolean;
  klCoef: number;
  entropyCoef: number;
}

function feeds(logpAt: (b: number, p: number) => number, s: Settings, rows: Row[][] = ROWS): Record<string, ort.Tensor> {
  const grid = (f: (r: Row, b: number, p: number) => number) => Float64Array.from(rows.flatMap((rs, b) => rs.map((r, p) => f(r, b, p))));
  const t2 = (a: Float64Array) => new ort.Tensor('float64', a, [B, S]);
  const sc = (x: number) => new ort.Tensor('float64', Float64Array.of(x), []);
  return {
    tokens: new ort.Tensor('int64', BigInt64Array.from(SEQS.flat(), BigInt), [B, S]),
    targets: new ort.Tensor('int64', BigInt64Array.from(rows.flatMap((rs, b) => rs.map((_, p) => BigInt(targetOf(b, p))))), [B, S]),
    advantages: t2(grid((r) => r.advantage)),
    old_logprobs: t2(grid((r, b, p) => logpAt(b, p) - Math.log(r.ratio))),
    weights: t2(grid((r) => r.weight)),
    row_mask: t2(grid((r) => (r.weight !== 0 ? 1 : 0))),
    ref_logprobs: t2(grid((r, b, p) => (r.refGap === null ? 0 : logpAt(b, p) + r.refGap))),
    has_ref: new ort.Tensor('bool', Uint8Array.from(rows.flatMap((rs) => rs.map((r) => (r.refGap === null ? 0 : 1)))), [B, S]),
    clip_low: sc(0.2),
    clip_high: sc(0.28),
    dual_clip: sc(3),
    kl_coef: sc(s.klCoef),
    kl_is_k3: new ort.Tensor('bool', Uint8Array.of(s.klIsK3 ? 1 : 0), []),
    entropy_coef: sc(s.entropyCoef),
  };
}

/** `headChunk`: rows per chunk of the head (head.ts); default one chunk for these few rows. */
async function gradRunner(spec: TransformerSpec, base: Record<string, ort.Tensor>, headChunk?: number) {
  const P = paramLayout(spec).total;
  const grad = await session64(buildTransformerGradGraph(spec, 'float64', headChunk));
  return async (t: Float64Array) => {
    const out = await grad.run({ ...base, theta: new ort.Tensor('float64', t, [P]) });
    return { loss: (out.loss!.data as Float64Array)[0], grad: out.grad!.data as Float64Array };
  };
}

/** Returns the worst relative error |fd − g| / max(1, |fd|) over all parameters. */
async function finiteDifferenceCheck(spec: TransformerSpec, s: Settings, headChunk?: number): Promise<number> {
  const P = paramLayout(spec).total;
  const theta = testTheta(spec, 7);
  const ref = referenceForward(spec, theta, SEQS);
  const run = await gradRunner(
    spec,
    feeds((b, p) => ref.logp[b]![p]![targetOf(b, p)]!, s),
    headChunk,
  );
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
    if (Math.abs(fd) > 1e-7) nonZero++;
    assert.ok(err < 1e-6, `${slotOf(spec, i)}: finite difference ${fd} vs backward ${base.grad[i]}`);
  }
  // Every slot must receive gradient somewhere, else its check would be vacuous — except key
  // biases: q·b_k is the same for every key of a query, and softmax ignores a shared shift.
  for (const slot of paramLayout(spec).slots.filter((x) => !x.name.endsWith('.bk'))) {
    const g = base.grad.subarray(slot.offset, slot.offset + slot.size);
    assert.ok(
      g.some((x) => Math.abs(x) > 1e-7),
      `no gradient reaches ${slot.name}`,
    );
  }
  assert.ok(nonZero > P / 3, `gradient mostly zero (${nonZero}/${P})`);
  return worst;
}

function slotOf(spec: TransformerSpec, i: number): string {
  const slot = paramLayout(spec).slots.find((s) => i >= s.offset && i < s.offset + s.size)!;
  return `${slot.name}[${i - slot.offset}]`;
}

const CONFIGS: [string, Record<string, unknown>][] = [
  ['GPT-2 style: LayerNorm, learned positions, MHA, GELU, tied, biases', { width: 8, heads: 2, mlpWidth: 12 }],
  [
    'Llama style: RMSNorm, RoPE, GQA, SwiGLU, untied, no biases',
    { width: 8, heads: 4, kvHeads: 2, norm: 'rmsnorm', positions: 'rope', mlp: 'swiglu', tiedHead: false, bias: false, mlpWidth: 10 },
  ],
  ['LayerNorm, RoPE, MHA, SwiGLU, tied, biases', { width: 8, heads: 2, positions: 'rope', mlp: 'swiglu', mlpWidth: 10 }],
  ['RMSNorm, learned positions, MQA (1 kv head), GELU, untied, biases', { width: 8, heads: 4, kvHeads: 1, norm: 'rmsnorm', tiedHead: false, mlpWidth: 12 }],
  [
    'Qwen3 style: headDim 6 ≠ width / heads, q/k RMSNorm, RoPE, GQA, SwiGLU, tied, no biases',
    { width: 8, heads: 4, kvHeads: 2, headDim: 6, qkNorm: true, norm: 'rmsnorm', positions: 'rope', mlp: 'swiglu', bias: false, mlpWidth: 10 },
  ],
];
const specOf = (opts: Record<string, unknown>) => normalizeTransformerSpec({ vocabSize: 7, layers: 2, maxSeq: 8, ...opts });
// The head in chunks of 5 of the B·S = 12 rows (5, 5, 2: a partial last chunk), as a large vocabulary runs it.
const CHUNKED = 5;

for (const [i, [name, opts]] of CONFIGS.entries()) {
  // the tied and the untied head each in chunks; the other two in one chunk
  const headChunk = i < 2 ? CHUNKED : undefined;
  test(`transformer backward matches central finite differences for every parameter: ${name}${headChunk ? `, head in chunks of ${headChunk} rows` : ''}`, async () => {
    const spec = specOf(opts);
    const worst = await finiteDifferenceCheck(spec, { klIsK3: name.startsWith('GPT'), klCoef: 0.5, entropyCoef: 0.05 }, headChunk);
    console.log(`# ${name}: ${paramLayout(spec).total} parameters, worst relative error ${worst.toExponential(2)}`);
  });
}

for (const [name, opts] of CONFIGS) {
  test(`transformer logits and gradient (head in chunks of ${CHUNKED} rows; float32 in one chunk) match the plain TypeScript reference: ${name}`, async () => {
    const spec = specOf(opts);
    const theta = testTheta(spec, 3);
    const ref = referenceForward(spec, theta, SEQS);
    const logitsGraph = await session64(buildTransformerLogitsGraph(spec, 'float64'));
    const out = await logitsGraph.run({
      theta: new ort.Tensor('float64', theta, [theta.length]),
      tokens: new ort.Tensor('int64', BigInt64Array.from(SEQS.flat(), BigInt), [B, S]),
    });
    const logits = out.logits!.data as Float64Array;
    const V = spec.vocabSize;
    let worstLogit = 0;
    for (let b = 0; b < B; b++)
      for (let p = 0; p < S; p++)
        for (let v = 0; v < V; v++) worstLogit = Math.max(worstLogit, Math.abs(logits[(b * S + p) * V + v]! - ref.logits[b]![p]![v]!));
    assert.ok(worstLogit < 1e-12, `logits differ by ${worstLogit}`);

    // With old log-probs equal to the current ones (ratio 1, unclipped) and no KL, the loss is
    // Σ −w·A·logp − β_H·Σ w·H: the reference objective with those coefficients.
    const s: Settings = { klIsK3: false, klCoef: 0, entropyCoef: 0.05 };
    const rows = ROWS.map((rs) => rs.map((r) => ({ ...r, ratio: 1 })));
    const run = await gradRunner(
      spec,
      feeds((b, p) => ref.logp[b]![p]![targetOf(b, p)]!, s, rows),
      CHUNKED,
    );
    const graph = await run(theta);
    const expected = referenceObjective(
      spec,
      theta,
      SEQS.map((tokens, b) => ({
        tokens,
        targets: tokens.map((_, p) => targetOf(b, p)),
        logpCoef: rows[b]!.map((r) => -r.weight * r.advantage),
        entropyCoef: rows[b]!.map((r) => -s.entropyCoef * r.weight),
      })),
    );
    // Loss values: the graph's PPO term is Σ −w·A·ratio = Σ −w·A; the entropy parts must agree.
    let pg = 0;
    let logpTerm = 0;
    rows.forEach((rs, b) =>
      rs.forEach((r, p) => {
        pg += -r.weight * r.advantage;
        logpTerm += -r.weight * r.advantage * ref.logp[b]![p]![targetOf(b, p)]!;
      }),
    );
    assert.ok(Math.abs(graph.loss! - (pg + expected.value - logpTerm)) < 1e-12, `loss ${graph.loss} vs reference ${pg + expected.value - logpTerm}`);
    const scale = Math.max(...Array.from(expected.grad, Math.abs));
    let worst = 0;
    for (let i = 0; i < theta.length; i++) {
      worst = Math.max(worst, Math.abs(graph.grad[i]! - expected.grad[i]!) / scale);
      assert.ok(Math.abs(graph.grad[i]! - expected.grad[i]!) < 1e-10 * scale, `${slotOf(spec, i)}: graph ${graph.grad[i]} vs reference ${expected.grad[i]}`);
    }
    console.log(`# ${name}: logits max |Δ| ${worstLogit.toExponential(2)}, gradient max |Δ|/max|g| ${worst.toExponential(2)}`);

    // float32 graph: same gradient up to float32 rounding.
    const grad32 = await session(buildTransformerGradGraph(spec, 'float32'));
    const f64feeds = feeds((b, p) => ref.logp[b]![p]![targetOf(b, p)]!, s, rows);
    const f32feeds: Record<string, ort.Tensor> = {};
    for (const [k, v] of Object.entries(f64feeds))
      f32feeds[k] = v.type === 'float64' ? new ort.Tensor('float32', Float32Array.from(v.data as Float64Array), v.dims) : v;
    const g32 = (await grad32.run({ ...f32feeds, theta: new ort.Tensor('float32', Float32Array.from(theta), [theta.length]) })).grad!.data as Float32Array;
    for (let i = 0; i < theta.length; i++)
      assert.ok(Math.abs(g32[i]! - expected.grad[i]!) < 2e-4 * scale, `float32 ${slotOf(spec, i)}: ${g32[i]} vs ${expected.grad[i]}`);
  });
}
