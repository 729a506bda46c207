/**
 * Host-side batch assembly: sequences → per-token rows of left-padded windows
 * (score and update graphs), with padding rows so no run has fewer than
 * `minRows` rows (see engines/onnx/README.md, "Batch invariance").
 */
import type { ScoreSequence, UpdateSample } from '../model-runtime';
import { type TinyLmSpec, writeWindow } from '../../families/tiny-lm/spec';

export interface TokenRows {
  /** real rows (before padding) */
  n: number;
  /** rows including padding */
  rows: number;
  windows: BigInt64Array;
  targets: BigInt64Array;
}

/** One row per token of each sequence; the window ends just before that token. */
export function scoreRows(spec: TinyLmSpec, seqs: ScoreSequence[], minRows: number): TokenRows {
  let n = 0;
  for (const s of seqs) n += s.tokens.length;
  const rows = Math.max(n, minRows);
  const W = spec.contextWindow;
  const windows = new BigInt64Array(rows * W).fill(BigInt(spec.vocabSize));
  const targets = new BigInt64Array(rows);
  let r = 0;
  for (const s of seqs) {
    const full = concat(s.context, s.tokens);
    for (let t = 0; t < s.tokens.length; t++, r++) {
      writeWindow(spec, full, s.context.length + t, windows, r * W);
      targets[r] = BigInt(s.tokens[t]!);
    }
  }
  return { n, rows, windows, targets };
}

export function concat(a: ArrayLike<number>, b: ArrayLike<number>): number[] {
  const out = new Array<number>(a.length + b.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i]!;
  for (let i = 0; i < b.length; i++) out[a.length + i] = b[i]!;
  return out;
}

export interface UpdateRows extends TokenRows {
  advantages: Float32Array;
  oldLogprobs: Float32Array;
  weights: Float32Array;
  /** 1 for trained rows with w_t ≠ 0 (the rows mean metrics average over), 0 otherwise */
  rowMask: Float32Array;
  refLogprobs: Float32Array;
  hasRef: Uint8Array;
}

/** Rows for trained tokens only (loss mask 1); masked tokens still appear in later windows. */
export function updateRows(spec: TinyLmSpec, samples: UpdateSample[], minRows: number): UpdateRows {
  let n = 0;
  for (const s of samples) for (let t = 0; t < s.tokens.length; t++) if (s.lossMask[t] === 1) n++;
  const rows = Math.max(n, minRows);
  const W = spec.contextWindow;
  const out: UpdateRows = {
    n,
    rows,
    windows: new BigInt64Array(rows * W).fill(BigInt(spec.vocabSize)),
    targets: new BigInt64Array(rows),
    advantages: new Float32Array(rows),
    oldLogprobs: new Float32Array(rows),
    weights: new Float32Array(rows),
    rowMask: new Float32Array(rows),
    refLogprobs: new Float32Array(rows),
    hasRef: new Uint8Array(rows),
  };
  let r = 0;
  for (const s of samples) {
    const full = concat(s.context, s.tokens);
    const hasRef = s.refLogprobs.length > 0;
    for (let t = 0; t < s.tokens.length; t++) {
      if (s.lossMask[t] !== 1) continue;
      writeWindow(spec, full, s.context.length + t, out.windows, r * W);
      out.targets[r] = BigInt(s.tokens[t]!);
      out.advantages[r] = s.advantages[t]!;
      out.oldLogprobs[r] = s.oldLogprobs[t]!;
      out.weights[r] = s.lossWeights[t]!;
      out.rowMask[r] = s.lossWeights[t] !== 0 ? 1 : 0;
      if (hasRef) {
        out.refLogprobs[r] = s.refLogprobs[t]!;
        out.hasRef[r] = 1;
      }
      r++;
    }
  }
  return out;
}
