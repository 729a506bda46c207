/**
 * In-graph sampling of one token per row from next-token logits, shared by
 * every model family's fused rollout graph (a `Loop` with one iteration per
 * token), from pre-drawn uniforms u[b, t] (Philox keyed by the sequence's seed
 * and the token index t — see philox.ts).
 *
 * Per row (all ops are row-local and no float op's bits depend on the row's
 * position — see lastColumn and engine/invariance.ts):
 *   logp    = log_softmax(logits)                 — returned: the policy at T=1
 *   scaled  = logits / temperature
 *   greedy rows (temperature 0): token = argmax(logits) (ties → lowest id); sample_logp = 0
 *   plain rows (no top-k/top-p): q = softmax(scaled);
 *     token = #{v : cumsum(q)_v ≤ u·Σq} (inverse CDF in id order); sample_logp = log_softmax(scaled)[token]
 *   filtered rows: sorted = TopK(scaled, V) (descending); q = softmax(sorted)
 *     top-k: keep ranks < k;  top-p: then keep rank i while Σ_{j<i} q_j < p·Σ_{top-k} q
 *     rank = #{i : cumsum(q·keep)_i ≤ u·Σ(q·keep)} (clamped to the kept set)
 *     token = sorted id at rank;  sample_logp = log_softmax(sorted, kept only)[rank]
 *     (the sort is skipped — an `If` — when no row of the batch is filtered: TopK
 *     was 40% of a step; which sampler a row uses depends only on its own settings)
 *   done ← done ∨ token ∈ stop set ∨ t+1 ≥ max_tokens; the loop exits when every row is done.
 */
import { type Graph, graphAttr, int } from '../graph/builder';

/**
 * Row sums as the last column of an inclusive CumSum: ORT's CumSum is a plain
 * sequential loop, while ReduceSum (Eigen) peels unaligned heads before its
 * vector loop, so its summation order — and the last bits — depend on where
 * the row sits in memory, i.e. on the row's position in the batch.
 */
export function lastColumn(g: Graph, cumsum: string): string {
  return g.op('Slice', [cumsum, g.constant('int64', [-1]), g.constant('int64', [2 ** 62]), g.constant('int64', [1])]);
}

/** The per-row sampling inputs of a rollout graph (names as the runtimes feed them). */
export interface SamplingInputs {
  uniforms: string;
  temperature: string;
  topK: string;
  topP: string;
  stopMask: string;
  maxTokens: string;
}

export function declareSamplingInputs(g: Graph, V: number): SamplingInputs {
  return {
    uniforms: g.input('uniforms', 'float32', ['B', 'T']),
    temperature: g.input('temperature', 'float32', ['B']),
    topK: g.input('top_k', 'int64', ['B']),
    topP: g.input('top_p', 'float32', ['B']),
    stopMask: g.input('stop_mask', 'bool', ['B', V]),
    maxTokens: g.input('max_tokens', 'int64', ['B']),
  };
}

/** Per-row settings prepared once outside the loop. */
export interface SamplingPrep {
  x: SamplingInputs;
  V: number;
  greedyCol: string;
  tempCol: string;
  kEff: string;
  pEff: string;
  filteredCol: string;
  anyFiltered: string;
  ranks: string;
  /** bool [B], all false: the loop's initial `done` */
  doneInit: string;
}

export function prepareSampling(g: Graph, V: number, x: SamplingInputs): SamplingPrep {
  const axis1 = g.constant('int64', [1]);
  const i64 = { to: int(7) };
  const greedy = g.op('LessOrEqual', [x.temperature, g.constant('float32', 0)]);
  const safeTemp = g.op('Where', [greedy, g.constant('float32', 1), x.temperature]);
  const kOff = g.op('Or', [g.op('LessOrEqual', [x.topK, g.constant('int64', 0)]), g.op('GreaterOrEqual', [x.topK, g.constant('int64', V)])]);
  const pOff = g.op('Or', [g.op('LessOrEqual', [x.topP, g.constant('float32', 0)]), g.op('GreaterOrEqual', [x.topP, g.constant('float32', 1)])]);
  // A row is "filtered" when top-k or top-p restricts it (and it is not greedy).
  const filtered = g.op('And', [g.op('Not', [greedy]), g.op('Not', [g.op('And', [kOff, pOff])])]);
  return {
    x,
    V,
    greedyCol: g.op('Unsqueeze', [greedy, axis1]),
    tempCol: g.op('Unsqueeze', [safeTemp, axis1]),
    kEff: g.op('Unsqueeze', [g.op('Where', [kOff, g.constant('int64', V), x.topK]), axis1]),
    pEff: g.op('Unsqueeze', [g.op('Where', [pOff, g.constant('float32', 2), x.topP]), axis1]),
    filteredCol: g.op('Unsqueeze', [filtered, axis1]),
    anyFiltered: g.op('Cast', [g.op('ReduceMax', [g.op('Cast', [filtered], i64)], { keepdims: int(0) })], { to: int(9) }),
    ranks: g.constant(
      'int64',
      Array.from({ length: V }, (_, i) => i),
      [1, V],
    ),
    doneInit: g.op('Less', [x.maxTokens, g.constant('int64', 0)]), // all false (max_tokens ≥ 1), shape [B]
  };
}

export interface SampledStep {
  /** int64 [B, 1] */
  tok: string;
  /** log π(tok) at temperature 1 [B, 1] */
  tokLogp: string;
  /** log-prob under the distribution sampled from [B, 1] (0 for greedy) */
  sampleLogp: string;
  /** bool [B] */
  doneOut: string;
  /** bool scalar: some row is still running */
  cont: string;
}

/** One token per row inside a loop body `b` at iteration `iter` (int64 scalar). */
export function sampleStep(b: Graph, s: SamplingPrep, logits: string, logp: string, iter: string, doneIn: string): SampledStep {
  const V = s.V;
  const axis1 = b.constant('int64', [1]);
  const i64 = { to: int(7) };
  const one64 = b.constant('int64', 1);
  const zero = b.constant('float32', 0);
  const lastId = b.constant('int64', V - 1);
  const scaled = b.op('Div', [logits, s.tempCol]);
  const u = b.op('Unsqueeze', [b.op('Gather', [s.x.uniforms, iter], { axis: int(1) }), axis1]);
  const countAtMost = (cum: string, target: string) =>
    b.op('ReduceSum', [b.op('Cast', [b.op('LessOrEqual', [cum, target])], i64), axis1], { keepdims: int(1) });

  // Plain rows: inverse CDF over the vocabulary in id order.
  const q = b.op('Softmax', [scaled], { axis: int(-1) });
  const cum = b.op('CumSum', [q, b.constant('int64', 1)]);
  const plainTok = b.op('Min', [countAtMost(cum, b.op('Mul', [u, lastColumn(b, cum)])), lastId]);
  const plainLogp = b.op('GatherElements', [b.op('LogSoftmax', [scaled], { axis: int(-1) }), plainTok], { axis: int(1) });

  // Greedy rows: argmax (ties → lowest id).
  const greedyTok = b.op('ArgMax', [logits], { axis: int(1), keepdims: int(1), select_last_index: int(0) });

  // Filtered rows: sort (only when some row needs it), keep top-k then top-p, inverse CDF in rank order.
  const f = b.subgraph('filtered_sampler');
  const [sortedVals, sortedIdx] = f.opN('TopK', [scaled, f.constant('int64', [V])], 2, { axis: int(-1), largest: int(1), sorted: int(1) });
  const qs = f.op('Softmax', [sortedVals!], { axis: int(-1) });
  const keepK = f.op('Less', [s.ranks, s.kEff]);
  const qk = f.op('Where', [keepK, qs, zero]);
  const totK = lastColumn(f, f.op('CumSum', [qk, f.constant('int64', 1)]));
  const cumExcl = f.op('CumSum', [qk, f.constant('int64', 1)], { exclusive: int(1) });
  const keep = f.op('And', [keepK, f.op('Less', [cumExcl, f.op('Mul', [s.pEff, totK])])]);
  const qm = f.op('Where', [keep, qs, zero]);
  const cumKept = f.op('CumSum', [qm, f.constant('int64', 1)]);
  const below = f.op('ReduceSum', [f.op('Cast', [f.op('LessOrEqual', [cumKept, f.op('Mul', [u, lastColumn(f, cumKept)])])], i64), axis1], { keepdims: int(1) });
  const nKeep = f.op('ReduceSum', [f.op('Cast', [keep], i64), axis1], { keepdims: int(1) });
  const rank = f.op('Min', [below, f.op('Sub', [nKeep, one64])]);
  // log of the renormalized sampling distribution, via LogSoftmax over the kept
  // sorted values (others −∞). Not Log(q/total): ORT's Log runs Eigen's vector
  // log on full packets and std::log on the tail, so its bits depend on where
  // an element sits in the tensor — i.e. on the batch.
  const keptLogq = f.op('LogSoftmax', [f.op('Where', [keep, sortedVals, f.constant('float32', -Infinity)])], { axis: int(-1) });
  f.output(f.op('GatherElements', [sortedIdx, rank], { axis: int(1) }), 'filtered_tok', 'int64', ['B', 1]);
  f.output(f.op('GatherElements', [keptLogq, rank], { axis: int(1) }), 'filtered_logp', 'float32', ['B', 1]);
  const skip = b.subgraph('no_filtered_rows');
  skip.output(skip.op('Identity', [plainTok]), 'skip_tok', 'int64', ['B', 1]);
  skip.output(skip.op('Identity', [plainLogp]), 'skip_logp', 'float32', ['B', 1]);
  const [filteredTok, filteredLogp] = b.opN('If', [s.anyFiltered], 2, {
    then_branch: graphAttr(f.toProto()),
    else_branch: graphAttr(skip.toProto()),
  });

  const tok = b.op('Where', [s.greedyCol, greedyTok, b.op('Where', [s.filteredCol, filteredTok, plainTok])]); // [B,1]
  const tokLogp = b.op('GatherElements', [logp, tok], { axis: int(1) });
  const sampleLogp = b.op('Where', [s.greedyCol, zero, b.op('Where', [s.filteredCol, filteredLogp, plainLogp])]);
  const hitStop = b.op('Squeeze', [b.op('GatherElements', [s.x.stopMask, tok], { axis: int(1) }), axis1]);
  const atMax = b.op('GreaterOrEqual', [b.op('Add', [iter, one64]), s.x.maxTokens]);
  const doneOut = b.op('Or', [doneIn, b.op('Or', [hitStop, atMax])]);
  const allDone = b.op('Cast', [b.op('ReduceMin', [b.op('Cast', [doneOut], i64)], { keepdims: int(0) })], { to: int(9) });
  return { tok, tokLogp, sampleLogp, doneOut, cont: b.op('Not', [allDone]) };
}
