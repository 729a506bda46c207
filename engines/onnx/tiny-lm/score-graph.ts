/**
 * Score graph: log-prob (policy at temperature 1) of given target tokens, one
 * row per scored token — the same forward and log-softmax as Generate and Update.
 */
import { encodeModel, Graph, int } from '../graph/builder';
import { forward, sliceParams } from './forward';
import { lastColumn } from '../ops/sampling';
import { paramLayout, type TinyLmSpec } from '../../families/tiny-lm/spec';

export function buildScoreGraph(spec: TinyLmSpec): Uint8Array {
  const g = new Graph('tiny_lm_score');
  const theta = g.input('theta', 'float32', [paramLayout(spec).total]);
  const windows = g.input('windows', 'int64', ['N', spec.contextWindow]);
  const targets = g.input('targets', 'int64', ['N']);
  const fw = forward(g, spec, sliceParams(g, spec, theta), windows);
  const axis1 = g.constant('int64', [1]);
  const picked = g.op('GatherElements', [fw.logp, g.op('Unsqueeze', [targets, axis1])], { axis: int(1) });
  // Row sum via CumSum (position-independent, see sampling.ts lastColumn).
  const plogp = g.op('Mul', [g.op('Exp', [fw.logp]), fw.logp]);
  const entropy = g.op('Neg', [g.op('Squeeze', [lastColumn(g, g.op('CumSum', [plogp, g.constant('int64', 1)])), axis1])]);
  g.output(g.op('Squeeze', [picked, axis1]), 'logprobs', 'float32', ['N']);
  g.output(entropy, 'entropy', 'float32', ['N']);
  return encodeModel(g, 'tiny-lm score: log-prob of given tokens');
}
