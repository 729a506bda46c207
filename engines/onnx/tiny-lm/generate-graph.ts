/**
 * Fused rollout graph: one `session.run` generates up to T tokens for a batch of
 * B sequences inside an ONNX `Loop` (one iteration per token), with sampling
 * in the graph (sampling.ts: greedy / plain / top-k / top-p from pre-drawn
 * Philox uniforms, stop tokens, max tokens).
 *
 * Per row and step: forward over the window → sample → window ← window[1:] ++ token.
 * Nothing mixes rows except the GEMMs in the forward pass. The loop exits early
 * when every row is done.
 */
import { Graph, graphAttr, int, encodeModel } from '../graph/builder';
import { forward, sliceParams } from './forward';
import { declareSamplingInputs, prepareSampling, sampleStep } from '../ops/sampling';
import { paramLayout, type TinyLmSpec } from '../../families/tiny-lm/spec';

export function buildGenerateGraph(spec: TinyLmSpec): Uint8Array {
  const V = spec.vocabSize;
  const W = spec.contextWindow;
  const g = new Graph('tiny_lm_generate');
  const theta = g.input('theta', 'float32', [paramLayout(spec).total]);
  const context = g.input('context', 'int64', ['B', W]);
  const sampling = prepareSampling(g, V, declareSamplingInputs(g, V));
  const steps = g.input('steps', 'int64', []);

  const p = sliceParams(g, spec, theta);
  const axis1 = g.constant('int64', [1]);
  const condInit = g.constant('bool', 1);

  // ---- loop body: one token for every row ------------------------------------
  const b = g.subgraph('generate_step');
  const iter = b.input('iter', 'int64', []);
  b.input('cond_in', 'bool', []);
  const ctxIn = b.input('ctx_in', 'int64', ['B', W]);
  const doneIn = b.input('done_in', 'bool', ['B']);

  const fw = forward(b, spec, p, ctxIn);
  const st = sampleStep(b, sampling, fw.logits, fw.logp, iter, doneIn);
  const ctxOut = b.op('Concat', [b.op('Slice', [ctxIn, axis1, b.constant('int64', [W]), axis1]), st.tok], {
    axis: int(1),
  });
  b.output(st.cont, 'cond_out', 'bool', []);
  b.output(ctxOut, 'ctx_out', 'int64', ['B', W]);
  b.output(st.doneOut, 'done_out', 'bool', ['B']);
  b.output(b.op('Squeeze', [st.tok, axis1]), 'tok_out', 'int64', ['B']);
  b.output(b.op('Squeeze', [st.tokLogp, axis1]), 'logp_out', 'float32', ['B']);
  b.output(b.op('Squeeze', [st.sampleLogp, axis1]), 'slogp_out', 'float32', ['B']);

  const [, , tokens, logprobs, sampleLogprobs] = g.opN('Loop', [steps, condInit, context, sampling.doneInit], 5, {
    body: graphAttr(b.toProto()),
  });
  g.output(tokens, 'tokens', 'int64', ['S', 'B']);
  g.output(logprobs, 'logprobs', 'float32', ['S', 'B']);
  g.output(sampleLogprobs, 'sample_logprobs', 'float32', ['S', 'B']);
  return encodeModel(g, 'tiny-lm fused rollout (Loop over tokens, in-graph sampling)');
}
