/**
 * The head over many positions in chunks of rows: a `Loop` whose iteration i
 * takes rows [i·c, min((i + 1)·c, N)) of nf [N, D], so the vocabulary-sized
 * values (logits, log-softmax, one-hot targets, ∂logits: [c, V] each) exist
 * for one chunk at a time instead of for all N = B·S positions at once —
 * with V = 152k one [N, V] tensor of 8 sequences of 128 tokens is 620 MB.
 * c = headChunkRows(V) (memory.ts) unless a test asks for another. Rows are independent through the head,
 * so per-row results are those of the unchunked head; sums over rows (the
 * head's gradient, loss metrics) differ from one big sum only by float
 * summation order.
 *
 * Per-row outputs are zero-padded to c rows in the body (a Loop's scan
 * outputs must have one shape), concatenated and cut back to N rows.
 */
import { type FloatType, type Graph, graphAttr, int } from '../graph/builder';

export interface ChunkBody {
  /** rows [start, end) of an outer [N, ...] tensor */
  rows(t: string): string;
  /** rows in this chunk (int64 [1]) */
  count: string;
}

export interface ChunkStep {
  /** per-row float outputs [rows, ...] (rank ≥ 1) */
  perRow: string[];
  /** added into the matching accumulator */
  sums: string[];
}

/**
 * Run `step` over chunks of `chunkRows` of N (int64 scalar) rows. `trailing` are the per-row outputs' dims
 * after the row axis ([] for [rows], [D] for [rows, D]), `zeros` the accumulators' starting values.
 * Returns per-row outputs [N, ...] and the sums.
 */
export function overRowChunks(
  g: Graph,
  ft: FloatType,
  chunkRows: number,
  N: string,
  trailing: number[][],
  zeros: string[],
  step: (b: Graph, chunk: ChunkBody) => ChunkStep,
): { perRow: string[]; sums: string[] } {
  const i64 = (v: number[]) => g.constant('int64', v);
  const n = g.op('Reshape', [N, i64([1])]);
  const axis0Outer = i64([0]);
  const chunk = g.op('Min', [n, i64([chunkRows])]); // [1]
  const count = g.op('Div', [g.op('Sub', [g.op('Add', [n, chunk]), i64([1])]), chunk]); // ⌈N / c⌉

  const b = g.subgraph('head_chunk');
  const bi64 = (v: number[]) => b.constant('int64', v);
  const iter = b.input('i', 'int64', []);
  const cond = b.input('cond_in', 'bool', []);
  const accIn = zeros.map((_, k) => b.input(`acc_in_${k}`, ft));
  const start = b.op('Mul', [b.op('Reshape', [iter, bi64([1])]), chunk]);
  const end = b.op('Min', [b.op('Add', [start, chunk]), n]);
  const axis0 = bi64([0]);
  const out = step(b, { rows: (t) => b.op('Slice', [t, start, end, axis0]), count: b.op('Sub', [end, start]) });
  const pad = b.op('Sub', [chunk, b.op('Sub', [end, start])]);
  b.output(b.op('Identity', [cond]), 'cond_out', 'bool', []);
  // outputs under their own names: a renaming Identity would copy each accumulator once more per chunk
  const output = (t: string) => b.output(t, t, ft);
  out.sums.forEach((s, k) => output(b.op('Add', [accIn[k]!, s])));
  out.perRow.forEach((t, k) => {
    // pads [0…, pad, 0…]: `pad` rows after the last one, nothing on the other axes
    const rest = trailing[k]!.length;
    const pads = b.op('Concat', [bi64(new Array(rest + 1).fill(0)), pad, ...(rest > 0 ? [bi64(new Array(rest).fill(0))] : [])], { axis: int(0) });
    output(b.op('Pad', [t, pads]));
  });

  const outs = g.opN('Loop', [count, g.constant('bool', 1), ...zeros], zeros.length + trailing.length, { body: graphAttr(b.toProto()) });
  const perRow = trailing.map((dims, k) => {
    const flat = g.op('Reshape', [outs[zeros.length + k]!, i64([-1, ...dims])]); // [count, c, ...] → [count·c, ...]
    return g.op('Slice', [flat, i64([0]), n, axis0Outer]);
  });
  return { perRow, sums: outs.slice(0, zeros.length) };
}
