/**
 * Score graph: log-prob (policy at temperature 1) and entropy at every
 * position of right-padded sequences — the same forward and chunked head as
 * the update graph.
 * The logits graph returns the raw logits (checks against reference
 * implementations and imported checkpoints).
 */
import { encodeModel, type FloatType, Graph, int } from '../graph/builder';
import { lastColumn } from '../ops/sampling';
import { forward, headMatrix, logitsOf, Ops, sequencePositions, sliceParams } from './forward';
import { overRowChunks } from './head';
import { headChunkRows } from '../../families/transformer/memory';
import { oneAdapter } from './lora-graph';
import { paramLayout, type TransformerSpec } from '../../families/transformer/spec';

function model(name: string, spec: TransformerSpec, ft: FloatType) {
  const g = new Graph(name);
  const theta = g.input('theta', ft, [paramLayout(spec).total]);
  const tokens = g.input('tokens', 'int64', ['B', 'S']);
  const o = new Ops(g, spec, ft);
  // a LoRA spec: theta is the frozen base's, and `adapter` the version's φ (lora-graph.ts)
  const w = spec.lora ? oneAdapter(g, spec, sliceParams(g, spec, theta)) : sliceParams(g, spec, theta);
  return { g, o, w, fw: forward(o, w, tokens, sequencePositions(o, tokens)) };
}

/**
 * tokens [B, S], targets [B, S] (targets[b, p] scored at position p) → logprobs, entropy [B, S].
 * The head runs in chunks of rows (head.ts): no [B·S, V] tensor.
 */
export function buildTransformerScoreGraph(spec: TransformerSpec, ft: FloatType = 'float32', headChunk = headChunkRows(spec.vocabSize)): Uint8Array {
  const { g, o, w, fw } = model('transformer_score', spec, ft);
  const targets = g.input('targets', 'int64', ['B', 'S']);
  const nf = o.rows(fw.nf, spec.width);
  const N = g.op('Gather', [g.op('Shape', [nf]), g.constant('int64', 0)], { axis: int(0) });
  const flatTargets = g.op('Reshape', [targets, g.constant('int64', [-1, 1])]);
  const head = headMatrix(o, w);
  const { perRow } = overRowChunks(g, ft, headChunk, N, [[], []], [], (b, chunk) => {
    const { logp } = logitsOf(new Ops(b, spec, ft), w, chunk.rows(nf), head); // [c, V]
    const axis1 = b.constant('int64', [1]);
    const picked = b.op('Squeeze', [b.op('GatherElements', [logp, chunk.rows(flatTargets)], { axis: int(1) }), axis1]);
    // Row sum via CumSum (position-independent bits, see tiny-lm/sampling.ts lastColumn).
    const rowSums = lastColumn(b, b.op('CumSum', [b.op('Mul', [b.op('Exp', [logp]), logp]), axis1]));
    return { perRow: [picked, b.op('Neg', [b.op('Squeeze', [rowSums, axis1])])], sums: [] };
  });
  const shape = g.op('Shape', [targets]);
  g.output(g.op('Reshape', [perRow[0]!, shape]), 'logprobs', ft, ['B', 'S']);
  g.output(g.op('Reshape', [perRow[1]!, shape]), 'entropy', ft, ['B', 'S']);
  return encodeModel(g, 'transformer score: log-prob of given tokens');
}

/** tokens [B, S] → logits [B, S, V] of every position (checks against references and imported checkpoints). */
export function buildTransformerLogitsGraph(spec: TransformerSpec, ft: FloatType = 'float32'): Uint8Array {
  const { g, o, w, fw } = model('transformer_logits', spec, ft);
  g.output(logitsOf(o, w, fw.nf).logits, 'logits', ft, ['B', 'S', spec.vocabSize]);
  return encodeModel(g, 'transformer logits');
}
