/**
 * The training graphs of the transformer family.
 *
 *  - update graph (float32): K fused optimizer steps in one ONNX `Loop`; each
 *    step = for each of M micro-batches (an inner `Loop`, so activations are
 *    held for one micro-batch at a time): forward → (per chunk of rows, head.ts) RL objective
 *    (tiny-lm/objective.ts: PPO/KL as rl/loss-reference.ts, entropy bonus) → hand-built
 *    backward (backward.ts), gradients and metric sums accumulated in a fixed
 *    order; then global-norm clip → AdamW (tiny-lm/adamw.ts). θ, m, v are
 *    loop-carried; per-step metrics (tiny-lm STEP_METRICS order) are scan
 *    outputs. Mean metrics divide by the row count of the whole batch, so
 *    every metric is a sum over micro-batches; with M = 1 the step is exactly
 *    the single-batch step (0 + x = x).
 *  - grad graph (float32 or float64): loss and flat gradient at θ, no optimizer
 *    — for finite-difference and reference checks.
 *
 * Batch layout: B right-padded sequences of S tokens ([M, B, S] in the update
 * graph: M micro-batches of B sequences). Row (b, p) is the
 * prediction at position p of targets[b, p] (normally tokens[b, p+1]); rows
 * with weight 0 (context, padding) contribute nothing.
 */
import { encodeModel, type FloatType, Graph, graphAttr, int } from '../graph/builder';
import { optimizerLoop } from '../ops/adamw';
import { metricVector, rlObjective, type ObjectiveInputs } from '../ops/objective';
import { STEP_METRICS } from '../model-runtime';
import { flatGrads, parameterGrads } from './backward';
import { forward, headMatrix, logitsOf, Ops, sequencePositions, sliceParams, type Weights } from './forward';
import { overRowChunks } from './head';
import { headChunkRows } from '../../families/transformer/memory';
import { paramLayout, type TransformerSpec } from '../../families/transformer/spec';

export interface BatchInputs extends Omit<ObjectiveInputs, 'targetsCol' | 'onehot' | 'nRows'> {
  tokens: string;
  targets: string;
}

export const ROW_INPUTS = ['tokens', 'targets', 'advantages', 'old_logprobs', 'weights', 'row_mask', 'ref_logprobs', 'has_ref'] as const;
export type RowInputs = Record<(typeof ROW_INPUTS)[number], string>;
export type Settings = Pick<BatchInputs, 'clipLow' | 'clipHigh' | 'dualClip' | 'klCoef' | 'klIsK3' | 'entropyCoef'>;

/** Per-row inputs with the given leading dims ([B, S] or [M, B, S]); loss settings as scalars. */
export function declareBatch(g: Graph, ft: FloatType, dims: string[]): { rows: RowInputs; settings: Settings } {
  const type = (n: string) => (n === 'tokens' || n === 'targets' ? 'int64' : n === 'has_ref' ? 'bool' : ft);
  const rows = Object.fromEntries(ROW_INPUTS.map((n) => [n, g.input(n, type(n), dims)])) as RowInputs;
  const sc = (name: string) => g.input(name, ft, []);
  return {
    rows,
    settings: {
      clipLow: sc('clip_low'),
      clipHigh: sc('clip_high'),
      dualClip: sc('dual_clip'),
      klCoef: sc('kl_coef'),
      klIsK3: g.input('kl_is_k3', 'bool', []),
      entropyCoef: sc('entropy_coef'),
    },
  };
}

/** The batch (or micro-batch `micro` of it) as objective rows; tokens stay [B, S]. */
export function batchRows(g: Graph, r: RowInputs, settings: Settings, micro?: string): BatchInputs {
  const pick = (t: string) => (micro ? g.op('Gather', [t, micro], { axis: int(0) }) : t);
  const flat = (t: string) => g.op('Reshape', [pick(t), g.constant('int64', [-1])]);
  return {
    ...settings,
    tokens: pick(r.tokens),
    targets: flat(r.targets),
    advantages: flat(r.advantages),
    oldLogp: flat(r.old_logprobs),
    weights: flat(r.weights),
    rowMask: flat(r.row_mask),
    refLogp: flat(r.ref_logprobs),
    hasRef: flat(r.has_ref),
  };
}

/** max(number of counted rows, 1) over the whole batch */
export function countRows(g: Graph, ft: FloatType, rowMask: string): string {
  return g.op('Max', [g.op('ReduceSum', [rowMask], { keepdims: int(0) }), g.constant(ft, 1)]);
}

export interface StepValues {
  grad: string;
  /** [STEP_METRICS] sums (grad_norm 0) */
  metrics: string;
}

/**
 * Forward to nf, then the head, RL objective and ∂logits in chunks of rows (head.ts), so no
 * [B·S, V] tensor exists; the backward starts from ∂nf and the head's gradient summed over chunks.
 * Returns the gradients of the parameters `want` names (all by default), by slot name.
 */
export function lossAndGrads(
  g: Graph,
  spec: TransformerSpec,
  ft: FloatType,
  w: Weights,
  x: BatchInputs,
  nRows: string,
  headChunk: number,
  want: (name: string) => boolean = () => true,
): { grads: Map<string, string>; metrics: string } {
  const o = new Ops(g, spec, ft);
  const V = spec.vocabSize;
  const D = spec.width;
  const pos = sequencePositions(o, x.tokens);
  const fw = forward(o, w, x.tokens, pos);
  const nf = o.rows(fw.nf, D); // [N, D]
  const N = g.op('Gather', [g.op('Shape', [nf]), g.constant('int64', 0)], { axis: int(0) });
  const head = headMatrix(o, w); // [D, V]
  const headT = spec.tiedHead ? w.get('tok_emb') : o.transpose(w.get('head'), [1, 0]); // [V, D]
  const ids = g.constant(
    'int64',
    Array.from({ length: V }, (_, i) => i),
    [1, V],
  );
  // the head's own gradient is summed over chunks only when it is wanted (a LoRA update leaves it out)
  const sumHead = want(spec.tiedHead ? 'tok_emb' : 'head');
  const headGrad0 = g.op('Expand', [g.constant(ft, 0), g.constant('int64', spec.tiedHead ? [V, D] : [D, V])]);
  const metrics0 = g.constant(ft, new Array(STEP_METRICS.length).fill(0), [STEP_METRICS.length]);
  const { perRow, sums } = overRowChunks(g, ft, headChunk, N, [[D]], sumHead ? [metrics0, headGrad0] : [metrics0], (b, chunk) => {
    const ob = new Ops(b, spec, ft);
    const nfc = chunk.rows(nf);
    const targetsCol = b.op('Unsqueeze', [chunk.rows(x.targets), b.constant('int64', [1])]);
    const onehot = b.op('Cast', [b.op('Equal', [ids, targetsCol])], { to: int(ft === 'float32' ? 1 : 11) });
    const { dLogits, ...values } = rlObjective(b, ft, logitsOf(ob, w, nfc, head).logp, {
      ...x,
      advantages: chunk.rows(x.advantages),
      oldLogp: chunk.rows(x.oldLogp),
      weights: chunk.rows(x.weights),
      rowMask: chunk.rows(x.rowMask),
      refLogp: chunk.rows(x.refLogp),
      hasRef: chunk.rows(x.hasRef),
      targetsCol,
      onehot,
      nRows,
    });
    const metrics = metricVector(b, ft, values);
    const perRow = [b.op('MatMul', [dLogits, headT])];
    if (!sumHead) return { perRow, sums: [metrics] };
    // tied: ∂tok_emb += ∂logitsᵀ·nf [V, D]; untied: ∂head += nfᵀ·∂logits [D, V]
    const headGrad = spec.tiedHead ? b.op('Gemm', [dLogits, nfc], { transA: int(1) }) : b.op('Gemm', [nfc, dLogits], { transA: int(1) });
    return { perRow, sums: [metrics, headGrad] };
  });
  const dnf = g.op('Reshape', [perRow[0]!, g.op('Shape', [fw.nf])]);
  return { grads: parameterGrads(o, w, fw, x.tokens, pos, { dnf, grad: sums[1] }, want), metrics: sums[0]! };
}

/** The flat gradient [P] of every parameter (θ layout). */
function lossAndGrad(g: Graph, spec: TransformerSpec, ft: FloatType, w: Weights, x: BatchInputs, nRows: string, headChunk: number): StepValues {
  const { grads, metrics } = lossAndGrads(g, spec, ft, w, x, nRows, headChunk);
  return { grad: flatGrads(new Ops(g, spec, ft), grads), metrics };
}

/**
 * The inner Loop of an update graph's optimizer step: Σ over the batch's M micro-batches (activations
 * held for one at a time) of `step`'s gradient [size] and metric sums (grad_norm slot stays 0). The
 * zeros and the count are built once in `g`; the returned function builds the Loop in a step's body.
 */
export function microBatchLoop(g: Graph, ft: FloatType, batch: { rows: RowInputs; settings: Settings }, size: number) {
  const nMetrics = STEP_METRICS.length;
  const microBatches = g.op('Gather', [g.op('Shape', [batch.rows.tokens]), g.constant('int64', 0)], { axis: int(0) });
  const zeroGrad = g.op('Expand', [g.constant(ft, 0), g.constant('int64', [size])]);
  const zeroSums = g.constant(ft, new Array(nMetrics).fill(0), [nMetrics]);
  return (b: Graph, step: (mb: Graph, x: BatchInputs) => StepValues): StepValues => {
    const mb = b.subgraph('micro_batch');
    const micro = mb.input('micro', 'int64', []);
    const microCond = mb.input('micro_cond_in', 'bool', []);
    const gradIn = mb.input('grad_in', ft, [size]);
    const sumsIn = mb.input('sums_in', ft, [nMetrics]);
    const st = step(mb, batchRows(mb, batch.rows, batch.settings, micro));
    mb.output(mb.op('Identity', [microCond]), 'micro_cond_out', 'bool', []);
    mb.output(mb.op('Add', [gradIn, st.grad]), 'grad_out', ft, [size]);
    mb.output(mb.op('Add', [sumsIn, st.metrics]), 'sums_out', ft, [nMetrics]);
    const [grad, metrics] = b.opN('Loop', [microBatches, b.constant('bool', 1), zeroGrad, zeroSums], 2, { body: graphAttr(mb.toProto()) });
    return { grad: grad!, metrics: metrics! };
  };
}

/** `headChunk`: rows per chunk of the head (default headChunkRows(V); tests pick small ones). */
export function buildTransformerUpdateGraph(spec: TransformerSpec, headChunk = headChunkRows(spec.vocabSize)): Uint8Array {
  const ft: FloatType = 'float32';
  const P = paramLayout(spec).total;
  const g = new Graph('transformer_update');
  const batch = declareBatch(g, ft, ['M', 'B', 'S']);
  const nRows = countRows(g, ft, batch.rows.row_mask);
  const sumMicroBatches = microBatchLoop(g, ft, batch, P);
  optimizerLoop(g, ft, P, (b, theta) => {
    const w = sliceParams(b, spec, theta);
    return sumMicroBatches(b, (mb, x) => lossAndGrad(mb, spec, ft, w, x, nRows, headChunk));
  });
  return encodeModel(g, 'transformer update: K x (M micro-batches of forward, PPO loss, backward; clip, AdamW) in one Loop');
}

/** Loss and flat gradient at θ for one [B, S] batch, no optimizer (float64 variant for finite differences). */
export function buildTransformerGradGraph(spec: TransformerSpec, ft: FloatType, headChunk = headChunkRows(spec.vocabSize)): Uint8Array {
  const g = new Graph('transformer_grad');
  const P = paramLayout(spec).total;
  const theta = g.input('theta', ft, [P]);
  const batch = declareBatch(g, ft, ['B', 'S']);
  const x = batchRows(g, batch.rows, batch.settings);
  const st = lossAndGrad(g, spec, ft, sliceParams(g, spec, theta), x, countRows(g, ft, x.rowMask), headChunk);
  const loss = g.op('Gather', [st.metrics, g.constant('int64', STEP_METRICS.indexOf('loss'))], { axis: int(0) });
  g.output(loss, 'loss', ft, []);
  g.output(st.grad, 'grad', ft, [P]);
  return encodeModel(g, 'transformer loss and gradient');
}
