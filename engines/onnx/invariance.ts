/**
 * Batch-invariance probe, run once per spec when its runtime is created.
 *
 * Everything in the graphs is row-local except the GEMMs (the graphs also avoid
 * element-wise ops whose bits depend on an element's position in the tensor,
 * e.g. ORT's Log — see generate-graph.ts). A GEMM's result for one row can
 * depend on the number of rows M: on CPU (MLAS) M = 1 takes a GEMV-style
 * kernel whose float sums differ from the M ≥ 2 kernel; on CUDA, cuBLAS picks
 * algorithms by shape. The probe scores and generates the same
 * rows inside batches of several sizes, at different positions, next to random
 * filler, and compares bits:
 *   - "free": every run has ≥ 2 rows (padding a lone row) and rows were
 *     bit-identical across all probed sizes — the CPU case, measured.
 *   - "fixed": otherwise every run is padded to exactly maxBatch rows, so the
 *     GEMM shapes never change; the probe then checks position/filler only.
 *   - "none": even that failed (reported in Stats, logged as a warning).
 */
import { familyOf } from '../families';
import type { ModelSpec } from '../families/model-family';
import type { GenerateRow, GenerateRowResult, ModelRuntime, SessionFactory } from './model-runtime';
import { createRuntime } from './runtimes';

export type InvarianceMode = 'free' | 'fixed' | 'none';

function lcg(seed: number) {
  let s = seed >>> 0;
  return (n: number) => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % n;
  };
}

/** The probe rows' shape: their context length and generated tokens. */
function probeShape(spec: ModelSpec): { contextLength: number; maxTokens: number } {
  const family = familyOf(spec.family);
  const contextLength = family.probeContextLength(spec);
  // 3 generated tokens where the spec's sequence length allows (a transformer's maxSeq may be as small as 2)
  const maxTokens = [3, 2, 1].find((n) => !family.sequenceIssue(spec, contextLength, contextLength + n)) ?? 1;
  return { contextLength, maxTokens };
}

/**
 * The batch sizes worth probing: a runtime that splits batches by memory never runs more than
 * `largestRun` rows at once (a larger batch is runs of at most that many), so sizes above it are
 * left out and that run's own size is probed instead. At a 152k vocabulary this keeps the probe
 * from generating and scoring thousands of vocabulary-wide rows (minutes, GBs) for run shapes
 * that never occur.
 */
export function probeSizes(sizes: readonly number[], largestRun: number): number[] {
  const kept = sizes.filter((s) => s <= largestRun);
  return largestRun < Math.max(...sizes) && !kept.includes(largestRun) ? [...kept, largestRun] : kept;
}

/** Probe rows: a Score row and a Generate row (3 tokens, varied sampling) per probe. */
async function rowsAgree(rt: ModelRuntime, spec: ModelSpec, sizes: number[], minRows: number): Promise<boolean> {
  const family = familyOf(spec.family);
  const theta = family.init(spec, 12345);
  for (let i = 0; i < theta.length; i++) theta[i]! *= 4; // non-trivial activations
  const rnd = lcg(7);
  const { contextLength, maxTokens } = probeShape(spec);
  const seq = () => ({
    context: Array.from({ length: contextLength }, () => rnd(spec.vocabSize)),
    tokens: [rnd(spec.vocabSize)],
  });
  const genRow = (k: number, length = contextLength): GenerateRow => ({
    context: Array.from({ length }, () => rnd(spec.vocabSize)),
    seedKey: [rnd(2 ** 31), k],
    temperature: [1, 0.7, 1.3, 0][k % 4]!,
    topK: [0, 3, 0, 0][k % 4]!,
    topP: [0, 0, 0.9, 0][k % 4]!,
    maxTokens,
    stopTokens: [],
  });
  const probes = Array.from({ length: 4 }, seq);
  // probe rows shorter than their neighbours: a left-padded row must not depend on how much padding it gets
  const genProbes = Array.from({ length: 4 }, (_, k) => genRow(k, Math.max(1, contextLength - k)));
  const ref = await Promise.all(probes.map((p) => rt.score(theta, [p]).then((r) => r.logprobs[0]![0])));
  const genRef = await Promise.all(genProbes.map((p) => rt.generate(theta, [p]).then((r) => r[0])));
  const same = (a: GenerateRowResult, b: GenerateRowResult) =>
    a.tokens.join() === b.tokens.join() &&
    a.logprobs.every((x, i) => Object.is(x, b.logprobs[i])) &&
    a.sampleLogprobs.every((x, i) => Object.is(x, b.sampleLogprobs[i]));
  for (const size of sizes) {
    if (size < minRows) continue;
    for (const at of [0, size - 1, Math.floor(size / 2)]) {
      const batch = Array.from({ length: size }, seq);
      const genBatch = Array.from({ length: size }, (_, k) => genRow(k + 1));
      const placed = Math.min(size, probes.length);
      for (let k = 0; k < placed; k++) {
        batch[(at + k) % size] = probes[k]!;
        genBatch[(at + k) % size] = genProbes[k]!;
      }
      const out = await rt.score(theta, batch);
      const gen = await rt.generate(theta, genBatch);
      for (let k = 0; k < placed; k++) {
        if (!Object.is(out.logprobs[(at + k) % size]![0], ref[k])) return false;
        if (!same(gen[(at + k) % size]!, genRef[k]!)) return false;
      }
    }
  }
  return true;
}

export interface InvarianceResult {
  mode: InvarianceMode;
  minRows: number;
  maxRows?: number;
  description: string;
  /** the runtime the probe ran on, configured for the chosen mode */
  runtime: ModelRuntime;
}

/** Decide how runs must be shaped for `spec` on this device (see module doc). */
export async function probeInvariance(spec: ModelSpec, factory: SessionFactory, maxBatch: number, force?: 'free' | 'fixed'): Promise<InvarianceResult> {
  if (force === 'free') {
    // not probed (--batch-shape free): the caller knows runs of >= 2 rows are batch-invariant here
    return { mode: 'free', minRows: 2, runtime: createRuntime(spec, factory, { minRows: 2 }), description: 'free: runs have >= 2 rows (forced, not probed)' };
  }
  if (force !== 'fixed') {
    const runtime = createRuntime(spec, factory, { minRows: 2 });
    const { contextLength, maxTokens } = probeShape(spec);
    const sizes = probeSizes(
      [2, 3, 5, 8, 17, 64, 255, maxBatch].filter((s) => s <= maxBatch),
      runtime.largestRun?.(contextLength + maxTokens) ?? Infinity,
    );
    if (await rowsAgree(runtime, spec, sizes, 2)) {
      return { mode: 'free', minRows: 2, runtime, description: `free: runs have >= 2 rows; rows verified bit-identical for batch sizes ${sizes.join(',')}` };
    }
  }
  const runtime = createRuntime(spec, factory, { minRows: maxBatch, maxRows: maxBatch });
  if (await rowsAgree(runtime, spec, [maxBatch], maxBatch)) {
    return {
      mode: 'fixed',
      minRows: maxBatch,
      maxRows: maxBatch,
      runtime,
      description: `fixed: every run padded to ${maxBatch} rows (row results depend on batch size on this device)`,
    };
  }
  return {
    mode: 'none',
    minRows: maxBatch,
    maxRows: maxBatch,
    runtime,
    description: 'none: rows differ even at a fixed batch shape; results may depend on batch composition',
  };
}
