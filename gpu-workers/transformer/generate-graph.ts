/**
 * Fused transformer rollout: one `session.run` generates up to T tokens for B
 * sequences with a key/value cache preallocated to C + T columns.
 *
 *   prefill: the left-padded contexts [B, C] (row b's len_b tokens sit in the
 *     last len_b columns; position ids start at 0 on its first real token) run
 *     through the full forward once; their rotated keys and values, padded
 *     with T empty columns, become the caches [B, Hkv, C+T, hd] per layer.
 *   Loop, iteration t: sample from the current next-token logits
 *     (tiny-lm/sampling.ts: same per-row uniforms, temperature, top-k, top-p,
 *     stop tokens as tiny-lm) → embed the token at position len_b + t → per
 *     layer write its key/value into column C + t (ScatterElements, in place
 *     of a Concat-grown cache whose copy cost grows with position) and attend
 *     over all C + T columns with a mask → next logits.
 *   A key column j is visible to row b iff C − len_b ≤ j ≤ C + t, so padding and
 *   not-yet-written columns get probability exactly 0; a pad query sees itself
 *   (no all-masked softmax row, hence no NaN that 0·NaN would spread).
 *
 * Per-token cost is constant in the position (the attention always spans C + T
 * columns). Generate and Score compute the same function with different
 * shapes (cache columns vs whole sequences), so their log-probs agree within
 * float32 rounding, not bit for bit (test/unit/engine/transformer-generate.test.ts).
 */
import { encodeModel, Graph, graphAttr, int } from '../onnx/builder';
import { declareSamplingInputs, prepareSampling, sampleStep } from '../tiny-lm/sampling';
import { attend, block, embed, forward, headLogits, Ops, Positions, projectHeads, ropeConstants, rotationAt, sliceParams } from './forward';
import { paramLayout, TransformerSpec } from './spec';

export function buildTransformerGenerateGraph(spec: TransformerSpec): Uint8Array {
  const V = spec.vocabSize;
  const g = new Graph('transformer_generate');
  const o = new Ops(g, spec, 'float32');
  const theta = g.input('theta', 'float32', [paramLayout(spec).total]);
  const context = g.input('context', 'int64', ['B', 'C']);
  const contextLen = g.input('context_len', 'int64', ['B']);
  const sampling = prepareSampling(g, V, declareSamplingInputs(g, V));
  const steps = g.input('steps', 'int64', []);
  const w = sliceParams(g, spec, theta);

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
  const fw = forward(o, w, context, prefillPos, true);
  const lastOf = (t: string) => g.op('Squeeze', [t, o.i64([1])]); // [B, 1, V] → [B, V]
  const pads = g.op('Concat', [o.i64([0, 0, 0, 0, 0, 0]), g.op('Reshape', [steps, o.i64([1])]), o.i64([0])], { axis: int(0) });
  const squeezeGroup = (t: string) => g.op('Squeeze', [t, o.i64([2])]); // [B, Hkv, 1, C, hd] → [B, Hkv, C, hd]
  const caches0 = fw.layers.flatMap((l) => [l.k, l.v].map((t) => g.op('Pad', [squeezeGroup(t), pads])));

  // ---- loop body: sample a token, run it through the layers over the caches ---
  const b = g.subgraph('generate_step');
  const ob = new Ops(b, spec, 'float32');
  const iter = b.input('iter', 'int64', []);
  b.input('cond_in', 'bool', []);
  const logitsIn = b.input('logits_in', 'float32', ['B', V]);
  const logpIn = b.input('logp_in', 'float32', ['B', V]);
  const doneIn = b.input('done_in', 'bool', ['B']);
  const cachesIn = caches0.map((_, i) => b.input(`cache_in_${i}`, 'float32', ['B', spec.kvHeads, 'M', ob.hd]));

  const st = sampleStep(b, sampling, logitsIn, logpIn, iter, doneIn);
  const col = b.op('Add', [C, iter]); // the cache column this token occupies
  const tokIds = b.op('Add', [lenCol, iter]); // its position id [B, 1]
  const cacheCols = b.op('Range', [b.constant('int64', 0), b.op('Add', [C, steps]), b.constant('int64', 1)]);
  const visible = b.op('And', [b.op('GreaterOrEqual', [cacheCols, start]), b.op('LessOrEqual', [cacheCols, col])]); // [B, C+T]
  const pos: Positions = { ids: tokIds, mask: b.op('Reshape', [visible, ob.i64([0, 1, 1, 1, -1])]), ...rotationAt(ob, tokIds, tables) };
  const cachesOut: string[] = [];
  let h = embed(ob, w, st.tok, pos);
  for (let l = 0; l < spec.layers; l++) {
    h = block(ob, w, h, `l${l}.`, (n1) => {
      const { q, k, v } = projectHeads(ob, w, n1, `l${l}.`, pos);
      const [kc, vc] = [k, v].map((t, j) => {
        const fresh = b.op('Squeeze', [t, ob.i64([2])]); // [B, Hkv, 1, hd]
        const at = b.op('Expand', [col, b.op('Shape', [fresh])]);
        const cache = b.op('ScatterElements', [cachesIn[2 * l + j], at, fresh], { axis: int(2) });
        cachesOut.push(cache);
        return b.op('Unsqueeze', [cache, ob.i64([2])]); // [B, Hkv, 1, C+T, hd]
      });
      return attend(ob, q, kc, vc, pos.mask).ctx;
    }).h;
  }
  const next = headLogits(ob, w, h);
  const squeeze1 = (t: string) => b.op('Squeeze', [t, ob.i64([1])]);
  b.output(st.cont, 'cond_out', 'bool', []);
  b.output(squeeze1(next.logits), 'logits_out', 'float32', ['B', V]);
  b.output(squeeze1(next.logp), 'logp_out', 'float32', ['B', V]);
  b.output(st.doneOut, 'done_out', 'bool', ['B']);
  cachesOut.forEach((c, i) => b.output(c, `cache_out_${i}`, 'float32', ['B', spec.kvHeads, 'M', ob.hd]));
  b.output(squeeze1(st.tok), 'tok_out', 'int64', ['B']);
  b.output(squeeze1(st.tokLogp), 'tok_logp_out', 'float32', ['B']);
  b.output(squeeze1(st.sampleLogp), 'sample_logp_out', 'float32', ['B']);

  const carried = 3 + caches0.length;
  const outs = g.opN('Loop', [steps, g.constant('bool', 1), lastOf(fw.logits), lastOf(fw.logp), sampling.doneInit, ...caches0], carried + 3, {
    body: graphAttr(b.toProto()),
  });
  g.output(outs[carried], 'tokens', 'int64', ['S', 'B']);
  g.output(outs[carried + 1], 'logprobs', 'float32', ['S', 'B']);
  g.output(outs[carried + 2], 'sample_logprobs', 'float32', ['S', 'B']);
  return encodeModel(g, 'transformer fused rollout (prefill, then a Loop over tokens with a preallocated KV cache)');
}
