/**
 * Score graph: log-prob (policy at temperature 1) and entropy at every
 * position of right-padded sequences — the same forward as the update graph.
 * The logits graph returns the raw logits (checks against reference
 * implementations and imported checkpoints).
 */
import { encodeModel, FloatType, Graph, int } from '../graph/builder';
import { lastColumn } from '../ops/sampling';
import { forward, Ops, sequencePositions, sliceParams } from './forward';
import { paramLayout, TransformerSpec } from '../../families/transformer/spec';

function model(name: string, spec: TransformerSpec, ft: FloatType) {
  const g = new Graph(name);
  const theta = g.input('theta', ft, [paramLayout(spec).total]);
  const tokens = g.input('tokens', 'int64', ['B', 'S']);
  const o = new Ops(g, spec, ft);
  return { g, fw: forward(o, sliceParams(g, spec, theta), tokens, sequencePositions(o, tokens)) };
}

/** tokens [B, S], targets [B, S] (targets[b, p] scored at position p) → logprobs, entropy [B, S]. */
export function buildTransformerScoreGraph(spec: TransformerSpec, ft: FloatType = 'float32'): Uint8Array {
  const { g, fw } = model('transformer_score', spec, ft);
  const targets = g.input('targets', 'int64', ['B', 'S']);
  const last = g.constant('int64', [2]);
  const picked = g.op('GatherElements', [fw.logp, g.op('Unsqueeze', [targets, last])], { axis: int(2) });
  // Row sum via CumSum (position-independent bits, see tiny-lm/sampling.ts lastColumn).
  const plogp = g.op('Reshape', [g.op('Mul', [g.op('Exp', [fw.logp]), fw.logp]), g.constant('int64', [-1, spec.vocabSize])]);
  const rowSums = lastColumn(g, g.op('CumSum', [plogp, g.constant('int64', 1)]));
  const entropy = g.op('Neg', [g.op('Reshape', [rowSums, g.op('Shape', [targets])])]);
  g.output(g.op('Squeeze', [picked, last]), 'logprobs', ft, ['B', 'S']);
  g.output(entropy, 'entropy', ft, ['B', 'S']);
  return encodeModel(g, 'transformer score: log-prob of given tokens');
}

/** tokens [B, S] → logits [B, S, V]. */
export function buildTransformerLogitsGraph(spec: TransformerSpec, ft: FloatType = 'float32'): Uint8Array {
  const { g, fw } = model('transformer_logits', spec, ft);
  g.output(fw.logits, 'logits', ft, ['B', 'S', spec.vocabSize]);
  return encodeModel(g, 'transformer logits');
}
