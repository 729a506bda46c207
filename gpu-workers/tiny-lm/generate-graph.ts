/**
 * Fused rollout graph: one `session.run` generates up to T tokens for a batch of
 * B sequences inside an ONNX `Loop` (one iteration per token), with sampling
 * in the graph from pre-drawn uniforms u[b, t] (Philox keyed by the sequence's
 * seed and the token index t — see philox.ts).
 *
 * Per row and step (all ops are row-local, nothing mixes rows except the GEMMs
 * in the forward pass, and no float op's bits depend on the row's position —
 * see lastColumn and engine/invariance.ts):
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
 *   window  ← window[1:] ++ token;  done ← done ∨ token ∈ stop set ∨ t+1 ≥ max_tokens
 * The loop exits early when every row is done.
 */
import { Graph, graphAttr, int, encodeModel } from '../onnx/builder';
import { forward, sliceParams } from './forward';
import { paramLayout, TinyLmSpec } from './spec';

/**
 * Row sums as the last column of an inclusive CumSum: ORT's CumSum is a plain
 * sequential loop, while ReduceSum (Eigen) peels unaligned heads before its
 * vector loop, so its summation order — and the last bits — depend on where
 * the row sits in memory, i.e. on the row's position in the batch.
 */
export function lastColumn(g: Graph, cumsum: string): string {
  return g.op('Slice', [cumsum, g.constant('int64', [-1]), g.constant('int64', [2 ** 62]), g.constant('int64', [1])]);
}

export function buildGenerateGraph(spec: TinyLmSpec): Uint8Array {
  const V = spec.vocabSize;
  const W = spec.contextWindow;
  const g = new Graph('tiny_lm_generate');
  const theta = g.input('theta', 'float32', [paramLayout(spec).total]);
  const context = g.input('context', 'int64', ['B', W]);
  const uniforms = g.input('uniforms', 'float32', ['B', 'T']);
  const temperature = g.input('temperature', 'float32', ['B']);
  const topK = g.input('top_k', 'int64', ['B']);
  const topP = g.input('top_p', 'float32', ['B']);
  const stopMask = g.input('stop_mask', 'bool', ['B', V]);
  const maxTokens = g.input('max_tokens', 'int64', ['B']);
  const steps = g.input('steps', 'int64', []);

  const p = sliceParams(g, spec, theta);
  const one64 = g.constant('int64', 1);
  const axis1 = g.constant('int64', [1]);
  const i64 = { to: int(7) };

  // Per-row sampling settings, prepared once outside the loop.
  const greedy = g.op('LessOrEqual', [temperature, g.constant('float32', 0)]);
  const safeTemp = g.op('Where', [greedy, g.constant('float32', 1), temperature]);
  const tempCol = g.op('Unsqueeze', [safeTemp, axis1]);
  const greedyCol = g.op('Unsqueeze', [greedy, axis1]);
  const kOff = g.op('Or', [g.op('LessOrEqual', [topK, g.constant('int64', 0)]), g.op('GreaterOrEqual', [topK, g.constant('int64', V)])]);
  const kEff = g.op('Unsqueeze', [g.op('Where', [kOff, g.constant('int64', V), topK]), axis1]);
  const pOff = g.op('Or', [
    g.op('LessOrEqual', [topP, g.constant('float32', 0)]),
    g.op('GreaterOrEqual', [topP, g.constant('float32', 1)]),
  ]);
  const pEff = g.op('Unsqueeze', [g.op('Where', [pOff, g.constant('float32', 2), topP]), axis1]);
  // A row is "filtered" when top-k or top-p restricts it (and it is not greedy).
  const filtered = g.op('And', [g.op('Not', [greedy]), g.op('Not', [g.op('And', [kOff, pOff])])]);
  const filteredCol = g.op('Unsqueeze', [filtered, axis1]);
  const anyFiltered = g.op('Cast', [g.op('ReduceMax', [g.op('Cast', [filtered], i64)], { keepdims: int(0) })], { to: int(9) });
  const ranks = g.constant('int64', Array.from({ length: V }, (_, i) => i), [1, V]);
  const kV = g.constant('int64', [V]);
  const lastId = g.constant('int64', V - 1);
  const doneInit = g.op('Less', [maxTokens, g.constant('int64', 0)]); // all false (max_tokens >= 1), shape [B]
  const condInit = g.constant('bool', 1);

  // ---- loop body: one token for every row ------------------------------------
  const b = g.subgraph('generate_step');
  const iter = b.input('iter', 'int64', []);
  b.input('cond_in', 'bool', []);
  const ctxIn = b.input('ctx_in', 'int64', ['B', W]);
  const doneIn = b.input('done_in', 'bool', ['B']);

  const fw = forward(b, spec, p, ctxIn);
  const zero = b.constant('float32', 0);
  const scaled = b.op('Div', [fw.logits, tempCol]);
  const u = b.op('Unsqueeze', [b.op('Gather', [uniforms, iter], { axis: int(1) }), axis1]);
  const countAtMost = (cum: string, target: string) =>
    b.op('ReduceSum', [b.op('Cast', [b.op('LessOrEqual', [cum, target])], i64), axis1], { keepdims: int(1) });

  // Plain rows: inverse CDF over the vocabulary in id order.
  const q = b.op('Softmax', [scaled], { axis: int(-1) });
  const cum = b.op('CumSum', [q, b.constant('int64', 1)]);
  const plainTok = b.op('Min', [countAtMost(cum, b.op('Mul', [u, lastColumn(b, cum)])), lastId]);
  const plainLogp = b.op('GatherElements', [b.op('LogSoftmax', [scaled], { axis: int(-1) }), plainTok], { axis: int(1) });

  // Greedy rows: argmax (ties → lowest id).
  const greedyTok = b.op('ArgMax', [fw.logits], { axis: int(1), keepdims: int(1), select_last_index: int(0) });

  // Filtered rows: sort (only when some row needs it), keep top-k then top-p, inverse CDF in rank order.
  const f = b.subgraph('filtered_sampler');
  const [sortedVals, sortedIdx] = f.opN('TopK', [scaled, kV], 2, { axis: int(-1), largest: int(1), sorted: int(1) });
  const qs = f.op('Softmax', [sortedVals], { axis: int(-1) });
  const keepK = f.op('Less', [ranks, kEff]);
  const qk = f.op('Where', [keepK, qs, zero]);
  const totK = lastColumn(f, f.op('CumSum', [qk, f.constant('int64', 1)]));
  const cumExcl = f.op('CumSum', [qk, f.constant('int64', 1)], { exclusive: int(1) });
  const keep = f.op('And', [keepK, f.op('Less', [cumExcl, f.op('Mul', [pEff, totK])])]);
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
  const [filteredTok, filteredLogp] = b.opN('If', [anyFiltered], 2, {
    then_branch: graphAttr(f.toProto()),
    else_branch: graphAttr(skip.toProto()),
  });

  const tok = b.op('Where', [greedyCol, greedyTok, b.op('Where', [filteredCol, filteredTok, plainTok])]); // [B,1]
  const tokLogp = b.op('GatherElements', [fw.logp, tok], { axis: int(1) });
  const sampleLogp = b.op('Where', [greedyCol, zero, b.op('Where', [filteredCol, filteredLogp, plainLogp])]);
  const ctxOut = b.op('Concat', [b.op('Slice', [ctxIn, axis1, b.constant('int64', [W]), axis1]), tok], {
    axis: int(1),
  });
  const hitStop = b.op('Squeeze', [b.op('GatherElements', [stopMask, tok], { axis: int(1) }), axis1]);
  const atMax = b.op('GreaterOrEqual', [b.op('Add', [iter, one64]), maxTokens]);
  const doneOut = b.op('Or', [doneIn, b.op('Or', [hitStop, atMax])]);
  const allDone = b.op('Cast', [b.op('ReduceMin', [b.op('Cast', [doneOut], i64)], { keepdims: int(0) })], { to: int(9) });
  b.output(b.op('Not', [allDone]), 'cond_out', 'bool', []);
  b.output(ctxOut, 'ctx_out', 'int64', ['B', W]);
  b.output(doneOut, 'done_out', 'bool', ['B']);
  b.output(b.op('Squeeze', [tok, axis1]), 'tok_out', 'int64', ['B']);
  b.output(b.op('Squeeze', [tokLogp, axis1]), 'logp_out', 'float32', ['B']);
  b.output(b.op('Squeeze', [sampleLogp, axis1]), 'slogp_out', 'float32', ['B']);

  const [, , tokens, logprobs, sampleLogprobs] = g.opN('Loop', [steps, condInit, context, doneInit], 5, {
    body: graphAttr(b.toProto()),
  });
  g.output(tokens, 'tokens', 'int64', ['S', 'B']);
  g.output(logprobs, 'logprobs', 'float32', ['S', 'B']);
  g.output(sampleLogprobs, 'sample_logprobs', 'float32', ['S', 'B']);
  return encodeModel(g, 'tiny-lm fused rollout (Loop over tokens, in-graph sampling)');
}
