/**
 * The training graphs of a LoRA model (engines/families/transformer/lora.ts): the optimizer's θ is the adapter φ
 * [Pa] (per layer, per target, A [r, in] then B [out, r]); the base's θ [P] is a frozen input, `base_theta`.
 *
 * Each step merges in the graph, θ' = θ with every targeted W [in, out] replaced by W + s·Aᵀ·Bᵀ (s = α/r), in
 * float64 rounded once as mergeLora merges for export (Generate and Score run the adapter unmerged, lora-graph.ts,
 * so an update from their log-probs starts at ratio 1 within float32 rounding); runs the plain transformer's forward, objective
 * and backward on θ' (update-graph.ts lossAndGrads, asked for the targeted matrices' gradients dW' only); and
 * chains them to the adapter:
 *
 *   dA = s·Bᵀ·dW'ᵀ [r, in],   dB = s·dW'ᵀ·Aᵀ [out, r]
 *
 * summed over micro-batches, then global-norm clip and AdamW over φ alone (ops/adamw.ts optimizerLoop), so the
 * optimizer state is adapter-sized. Nodes that feed nothing (the backward below the first layer, the untargeted
 * matrices' slices of the chain) are pruned (builder.ts pruneUnused).
 */
import { encodeModel, type FloatType, Graph, int } from '../graph/builder';
import { optimizerLoop } from '../ops/adamw';
import { STEP_METRICS } from '../model-runtime';
import { sliceParams, type Weights } from './forward';
import { batchRows, countRows, declareBatch, lossAndGrads, microBatchLoop } from './update-graph';
import { headChunkRows } from '../../families/transformer/memory';
import { adapterLayout, baseSpecOf, loraScale } from '../../families/transformer/lora';
import { paramLayout, type TransformerSpec } from '../../families/transformer/spec';

interface Adapted {
  /** the base's weights with every target merged */
  w: Weights;
  /** the targets' slot names (`l0.wq`) */
  targets: Set<string>;
  /** ∂loss/∂φ [Pa] from the targets' gradients dW' */
  chain(g: Graph, grads: Map<string, string>): string;
}

/** θ' from the base's weights and φ (a [Pa] value of `g`), and the chain rule back to φ. */
function adapt(g: Graph, spec: TransformerSpec, ft: FloatType, base: Weights, phi: string): Adapted {
  const { slots } = adapterLayout(spec);
  // the merge in float64, rounded once (module doc)
  const wide = (t: string) => (ft === 'float64' ? t : g.op('Cast', [t], { to: int(11) }));
  const narrow = (t: string) => (ft === 'float64' ? t : g.op('Cast', [t], { to: int(1) }));
  const scale = g.constant('float64', loraScale(spec.lora!));
  const axis0 = g.constant('int64', [0]);
  const take = (offset: number, size: number, shape: number[]) =>
    g.op('Reshape', [g.op('Slice', [phi, g.constant('int64', [offset]), g.constant('int64', [offset + size]), axis0]), g.constant('int64', shape)]);
  const pairs: { name: string; A: string; B: string }[] = [];
  const merged = new Map<string, string>();
  for (let i = 0; i < slots.length; i += 2) {
    const a = slots[i]!;
    const b = slots[i + 1]!;
    const name = `l${a.layer}.w${a.target}`;
    const A = take(a.offset, a.size, a.shape);
    const B = take(b.offset, b.size, b.shape);
    // W + s·Aᵀ·Bᵀ: [in, r]·[r, out]
    const delta = g.op('Mul', [g.op('Gemm', [wide(A), wide(B)], { transA: int(1), transB: int(1) }), scale]);
    merged.set(name, narrow(g.op('Add', [wide(base.get(name)), delta])));
    pairs.push({ name, A, B });
  }
  return {
    w: { get: (name) => merged.get(name) ?? base.get(name), has: (name) => base.has(name) },
    targets: new Set(merged.keys()),
    chain: (c, grads) => {
      const s = c.constant(ft, loraScale(spec.lora!));
      const flat = c.constant('int64', [-1]);
      const parts = pairs.flatMap(({ name, A, B }) => {
        const dW = grads.get(name)!; // [in, out]
        const dA = c.op('Mul', [c.op('Gemm', [B, dW], { transA: int(1), transB: int(1) }), s]); // Bᵀ·dWᵀ [r, in]
        const dB = c.op('Mul', [c.op('Gemm', [dW, A], { transA: int(1), transB: int(1) }), s]); // dWᵀ·Aᵀ [out, r]
        return [c.op('Reshape', [dA, flat]), c.op('Reshape', [dB, flat])];
      });
      return c.op('Concat', parts, { axis: int(0) });
    },
  };
}

/** K fused AdamW steps over φ (inputs: update-graph.ts's, with `theta` [Pa] the adapter, and `base_theta` [P]). */
export function buildLoraUpdateGraph(spec: TransformerSpec, headChunk = headChunkRows(spec.vocabSize)): Uint8Array {
  const ft: FloatType = 'float32';
  const base = baseSpecOf(spec);
  const Pa = adapterLayout(spec).total;
  const g = new Graph('transformer_lora_update');
  const batch = declareBatch(g, ft, ['M', 'B', 'S']);
  const nRows = countRows(g, ft, batch.rows.row_mask);
  const sumMicroBatches = microBatchLoop(g, ft, batch, Pa);
  // the frozen base, cut into its tensors once per run
  const baseW = sliceParams(g, base, g.input('base_theta', ft, [paramLayout(base).total]));

  optimizerLoop(g, ft, Pa, (b, phi) => {
    const adapted = adapt(b, spec, ft, baseW, phi);
    // Σ over micro-batches of ∂loss/∂φ (the targets' gradients chained to A and B) and of every metric
    return sumMicroBatches(b, (mb, x) => {
      const step = lossAndGrads(mb, base, ft, adapted.w, x, nRows, headChunk, (name) => adapted.targets.has(name));
      return { grad: adapted.chain(mb, step.grads), metrics: step.metrics };
    });
  });
  return encodeModel(g, 'transformer LoRA update: K x (merge, M micro-batches of forward, PPO loss, backward to A and B; clip, AdamW over the adapter)', {
    prune: true,
  });
}

/** Loss and ∂loss/∂φ [Pa] at (base_theta, phi) for one [B, S] batch, no optimizer (float64 for reference checks). */
export function buildLoraGradGraph(spec: TransformerSpec, ft: FloatType, headChunk = headChunkRows(spec.vocabSize)): Uint8Array {
  const base = baseSpecOf(spec);
  const g = new Graph('transformer_lora_grad');
  const baseW = sliceParams(g, base, g.input('base_theta', ft, [paramLayout(base).total]));
  const adapted = adapt(g, spec, ft, baseW, g.input('phi', ft, [adapterLayout(spec).total]));
  const batch = declareBatch(g, ft, ['B', 'S']);
  const x = batchRows(g, batch.rows, batch.settings);
  const st = lossAndGrads(g, base, ft, adapted.w, x, countRows(g, ft, x.rowMask), headChunk, (name) => adapted.targets.has(name));
  const loss = g.op('Gather', [st.metrics, g.constant('int64', STEP_METRICS.indexOf('loss'))], { axis: int(0) });
  g.output(loss, 'loss', ft, []);
  g.output(adapted.chain(g, st.grads), 'grad', ft, [adapterLayout(spec).total]);
  return encodeModel(g, 'transformer LoRA loss and adapter gradient', { prune: true });
}
