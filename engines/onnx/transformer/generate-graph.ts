/**
 * Fused transformer rollout: one `session.run` generates up to T tokens for B
 * sequences with key/value caches preallocated once.
 *
 *   prefill: the left-padded contexts [B, C] (row b's len_b tokens sit in the
 *     last len_b columns; position ids start at 0 on its first real token) run
 *     through the full forward once; their rotated keys and values are the
 *     context caches [B, Hkv, 1, C, hd] per layer, read-only from then on.
 *   Loop, iteration t: sample from the current next-token logits
 *     (tiny-lm/sampling.ts: same per-row uniforms, temperature, top-k, top-p,
 *     stop tokens as tiny-lm) → embed the token at position len_b + t → per
 *     layer write its key/value into column t of a generated-token cache
 *     [B, Hkv, T, hd] (ScatterElements) and attend over the context cache and
 *     that cache as one softmax over C + T columns → next logits.
 *   A context column j is visible to row b iff j ≥ C − len_b, a generated
 *   column iff j ≤ t, so padding and not-yet-written columns get probability
 *   exactly 0; in the prefill a pad query sees itself (no all-masked softmax
 *   row, hence no NaN that 0·NaN would spread).
 *
 * Why two caches: onnxruntime's ScatterElements writes a copy of its input
 * (a Loop-carried value cannot be updated in place), so a single cache of
 * C + T columns was copied whole per layer and token — at C = 512 that copy
 * was ~70% of a decode step and made the per-token cost grow with the
 * context. The context cache is an outer-scope value the Loop body only
 * reads; only the T-column cache is carried and copied. Per-token cost is
 * then the attention over C + T keys (as in any KV-cache decoder) plus an
 * O(T) copy; it never regrows a cache. Generate and Score compute the same
 * function with different shapes (cache blocks vs whole sequences), so their
 * log-probs agree within float32 rounding, not bit for bit
 * (test/unit/engine/transformer-generate.test.ts).
 */
import { encodeModel, Graph, graphAttr, int } from '../graph/builder';
import { declareSamplingInputs, prepareSampling, sampleStep } from '../ops/sampling';
import {
  block,
  embed,
  forward,
  headLogits,
  logitsOf,
  maskedScores,
  Ops,
  type Positions,
  projectHeads,
  ropeConstants,
  rotationAt,
  sliceParams,
} from './forward';
import { rowAdapters } from './lora-graph';
import { paramLayout, type TransformerSpec } from '../../families/transformer/spec';

export function buildTransformerGenerateGraph(spec: TransformerSpec): Uint8Array {
  const V = spec.vocabSize;
  const g = new Graph('transformer_generate');
  const o = new Ops(g, spec, 'float32');
  const theta = g.input('theta', 'float32', [paramLayout(spec).total]);
  const context = g.input('context', 'int64', ['B', 'C']);
  const contextLen = g.input('context_len', 'int64', ['B']);
  const sampling = prepareSampling(g, V, declareSamplingInputs(g, V));
  const steps = g.input('steps', 'int64', []);
  // a LoRA spec: theta is the frozen base's, and each row names its adapter (lora-graph.ts)
  const w = spec.lora ? rowAdapters(g, spec, sliceParams(g, spec, theta)) : sliceParams(g, spec, theta);

  // ---- prefill -----------------------------------------------------------------
  const C = g.op('Gather', [g.op('Shape', [context]), g.constant('int64', 1)], { axis: int(0) });
  const cols = g.op('Range', [g.constant('int64', 0), C, g.constant('int64', 1)]); // [C]
  const lenCol = g.op('Unsqueeze', [contextLen, o.i64([1])]); // [B, 1]
  const start = g.op('Sub', [C, lenCol]); // first real column per row [B, 1]
  const colRow = g.op('Unsqueeze', [cols, o.i64([0])]); // [1, C]
  const ids = g.op('Max', [g.op('Sub', [colRow, start]), g.constant('int64', 0)]); // [B, C]
  const queryCol = g.op('Unsqueeze', [cols, o.i64([1])]); // [C, 1]
  const keyValid = g.op('Reshape', [g.op('GreaterOrEqual', [colRow, start]), o.i64([0, 1, 1, 1, -1])]); // [B, 1, 1, 1, C]
  const prefillMask = g.op('Or', [g.op('And', [g.op('GreaterOrEqual', [queryCol, colRow]), keyValid]), g.op('Equal', [queryCol, colRow])]);
  const tables = spec.positions === 'rope' ? ropeConstants(o) : undefined;
  const prefillPos: Positions = { ids, mask: prefillMask, ...rotationAt(o, ids, tables) };
  const fw = forward(o, w, context, prefillPos, true); // the prefill's logits: last position only
  const prefill = logitsOf(o, w, fw.nf);
  const lastOf = (t: string) => g.op('Squeeze', [t, o.i64([1])]); // [B, 1, V] → [B, V]
  const B = g.op('Gather', [g.op('Shape', [context]), g.constant('int64', [0])], { axis: int(0) }); // [1]
  const genShape = g.op('Concat', [B, o.i64([spec.kvHeads]), g.op('Reshape', [steps, o.i64([1])]), o.i64([o.hd])], { axis: int(0) });
  const genCache0 = g.op('Expand', [g.constant('float32', 0), genShape]); // [B, Hkv, T, hd]
  const caches0 = fw.layers.flatMap(() => [genCache0, genCache0]);
  const cEnd = g.op('Reshape', [C, o.i64([1])]); // where the generated columns start in the joint softmax

  // ---- loop body: sample a token, run it through the layers over the caches ---
  const b = g.subgraph('generate_step');
  const ob = new Ops(b, spec, 'float32');
  const iter = b.input('iter', 'int64', []);
  b.input('cond_in', 'bool', []);
  const logitsIn = b.input('logits_in', 'float32', ['B', V]);
  const logpIn = b.input('logp_in', 'float32', ['B', V]);
  const doneIn = b.input('done_in', 'bool', ['B']);
  const cachesIn = caches0.map((_, i) => b.input(`cache_in_${i}`, 'float32', ['B', spec.kvHeads, 'T', ob.hd]));

  const st = sampleStep(b, sampling, logitsIn, logpIn, iter, doneIn);
  const tokIds = b.op('Add', [lenCol, iter]); // its position id [B, 1]
  const genCols = b.op('Range', [b.constant('int64', 0), steps, b.constant('int64', 1)]);
  const genVisible = b.op('Reshape', [b.op('LessOrEqual', [genCols, iter]), ob.i64([1, 1, 1, 1, -1])]); // [1, 1, 1, 1, T]
  // mask: the context block's; the attention below masks each cache block itself
  const pos: Positions = { ids: tokIds, mask: keyValid, ...rotationAt(ob, tokIds, tables) };
  const cachesOut: string[] = [];
  let h = embed(ob, w, st.tok, pos);
  for (let l = 0; l < spec.layers; l++) {
    h = block(ob, w, h, `l${l}.`, (n1) => {
      const { q, k, v } = projectHeads(ob, w, n1, `l${l}.`, pos);
      const [kg, vg] = [k, v].map((t, j) => {
        const fresh = b.op('Squeeze', [t, ob.i64([2])]); // [B, Hkv, 1, hd]
        const at = b.op('Expand', [iter, b.op('Shape', [fresh])]);
        const cache = b.op('ScatterElements', [cachesIn[2 * l + j]!, at, fresh], { axis: int(2) });
        cachesOut.push(cache);
        return b.op('Unsqueeze', [cache, ob.i64([2])]); // [B, Hkv, 1, T, hd]
      });
      const { k: kc, v: vc } = fw.layers[l]!; // context keys / values [B, Hkv, 1, C, hd]
      const scores = b.op('Concat', [maskedScores(ob, q, kc, keyValid), maskedScores(ob, q, kg!, genVisible)], { axis: int(-1) });
      const p = b.op('Softmax', [scores], { axis: int(-1) });
      const part = (from: string, to: string, values: string) => b.op('MatMul', [b.op('Slice', [p, from, to, ob.i64([-1])]), values]);
      return ob.fromHeads(b.op('Add', [part(ob.i64([0]), cEnd, vc), part(cEnd, ob.i64([2 ** 62]), vg!)]));
    }).h;
  }
  const next = headLogits(ob, w, h);
  const squeeze1 = (t: string) => b.op('Squeeze', [t, ob.i64([1])]);
  b.output(st.cont, 'cond_out', 'bool', []);
  b.output(squeeze1(next.logits), 'logits_out', 'float32', ['B', V]);
  b.output(squeeze1(next.logp), 'logp_out', 'float32', ['B', V]);
  b.output(st.doneOut, 'done_out', 'bool', ['B']);
  // under their own names: a renaming Identity would copy every cache once more per token
  cachesOut.forEach((c) => b.output(c, c, 'float32', ['B', spec.kvHeads, 'T', ob.hd]));
  b.output(squeeze1(st.tok), 'tok_out', 'int64', ['B']);
  b.output(squeeze1(st.tokLogp), 'tok_logp_out', 'float32', ['B']);
  b.output(squeeze1(st.sampleLogp), 'sample_logp_out', 'float32', ['B']);

  const carried = 3 + caches0.length;
  const outs = g.opN('Loop', [steps, g.constant('bool', 1), lastOf(prefill.logits), lastOf(prefill.logp), sampling.doneInit, ...caches0], carried + 3, {
    body: graphAttr(b.toProto()),
  });
  g.output(outs[carried]!, 'tokens', 'int64', ['S', 'B']);
  g.output(outs[carried + 1]!, 'logprobs', 'float32', ['S', 'B']);
  g.output(outs[carried + 2]!, 'sample_logprobs', 'float32', ['S', 'B']);
  return encodeModel(g, 'transformer fused rollout (prefill, then a Loop over tokens with a preallocated KV cache)');
}
