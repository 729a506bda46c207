/**
 * A LoRA spec's sampling graphs (Generate, Score) run the adapter unmerged, next to the frozen base θ:
 *
 *   y = x·W (+ b) + s·(x·Aᵀ)·Bᵀ,   s = α/r   (PEFT's order)
 *
 * so no merged copy of θ exists per adapter, and one Generate run can hold rows of different adapters over
 * one base (different LoRA models of one spec, or versions of one model):
 *
 *  - Generate (`rowAdapters`): inputs `adapters` [K, Pa] (one φ per adapter in the run) and `adapter_of_row`
 *    int64 [B]. Each row's A [in, r] and B [r, out] are gathered once per run ([B, in, r], [B, r, out]), and
 *    the term is a batched MatMul: every row's GEMMs have the same shape whatever the other rows' adapters
 *    are, so a row's bits do not depend on the mix (the conformance check lora.mixed-batch measures it).
 *    The base's x·W stays one GEMM over all rows, as in the base's graphs.
 *  - Score (`oneAdapter`): input `adapter` [Pa]; a request names one version, so the term is x·Aᵀ·Bᵀ over all
 *    rows at once (row-independent as the base's GEMMs: M = B·S ≥ 2).
 *
 * Generate and Score then compute the same function with different GEMM shapes: equal within float32
 * rounding, as for every transformer (generate-graph.ts). Update merges in the graph (lora-update-graph.ts).
 */
import { type Graph, int, ints } from '../graph/builder';
import type { Ops, Weights } from './forward';
import { adapterLayout, loraScale } from '../../families/transformer/lora';
import type { TransformerSpec } from '../../families/transformer/spec';

type Term = (o: Ops, x: string) => string;

/** `w` with `adapterTerm` for each targeted map: terms[`l0.q`] maps x [B, S, in] to its [B, S, out] term. */
function adapted(w: Weights, terms: Map<string, Term>): Weights {
  return {
    get: (name) => w.get(name),
    has: (name) => w.has(name),
    adapterTerm: (o, x, layer, n) => terms.get(`${layer}${n}`)?.(o, x),
  };
}

/** Each target's A and B of a [..., Pa] adapter tensor, as [..., r, in] and [..., out, r] (PEFT's shapes). */
function targetPairs(g: Graph, spec: TransformerSpec, phi: string, lead: number[]): Array<{ key: string; A: string; B: string }> {
  const { slots } = adapterLayout(spec);
  const axis = g.constant('int64', [-1]);
  const take = (offset: number, size: number, shape: readonly number[]) =>
    g.op('Reshape', [
      g.op('Slice', [phi, g.constant('int64', [offset]), g.constant('int64', [offset + size]), axis]),
      g.constant('int64', [...lead, ...shape]),
    ]);
  const out: Array<{ key: string; A: string; B: string }> = [];
  for (let i = 0; i < slots.length; i += 2) {
    const a = slots[i]!;
    const b = slots[i + 1]!;
    out.push({ key: `l${a.layer}.${a.target}`, A: take(a.offset, a.size, a.shape), B: take(b.offset, b.size, b.shape) });
  }
  return out;
}

/** Generate: every row its own adapter (inputs `adapters` [K, Pa], `adapter_of_row` [B]). */
export function rowAdapters(g: Graph, spec: TransformerSpec, w: Weights): Weights {
  const Pa = adapterLayout(spec).total;
  const adapters = g.input('adapters', 'float32', ['K', Pa]);
  const ofRow = g.input('adapter_of_row', 'int64', ['B']);
  const s = loraScale(spec.lora!);
  const terms = new Map<string, Term>();
  for (const { key, A, B } of targetPairs(g, spec, adapters, [0])) {
    // [K, r, in] → [K, in, r] → the rows' [B, in, r]; [K, out, r] → [K, r, out] → [B, r, out]
    const rowA = g.op('Gather', [g.op('Transpose', [A], { perm: ints([0, 2, 1]) }), ofRow], { axis: int(0) });
    const rowB = g.op('Gather', [g.op('Transpose', [B], { perm: ints([0, 2, 1]) }), ofRow], { axis: int(0) });
    terms.set(key, (o, x) => o.op('Mul', [o.op('MatMul', [o.op('MatMul', [x, rowA]), rowB]), o.c(s)]));
  }
  return adapted(w, terms);
}

/** Score: one adapter for every row (input `adapter` [Pa]). */
export function oneAdapter(g: Graph, spec: TransformerSpec, w: Weights): Weights {
  const adapter = g.input('adapter', 'float32', [adapterLayout(spec).total]);
  const s = loraScale(spec.lora!);
  const terms = new Map<string, Term>();
  for (const { key, A, B } of targetPairs(g, spec, adapter, [])) {
    const At = g.op('Transpose', [A]); // [in, r]
    const Bt = g.op('Transpose', [B]); // [r, out]
    terms.set(key, (o, x) => o.op('Mul', [o.op('MatMul', [o.op('MatMul', [x, At]), Bt]), o.c(s)]));
  }
  return adapted(w, terms);
}
