/**
 * Memory a transformer spec needs in the engine, estimated from its shapes
 * (float32, 4 bytes a value), and the fit of a spec into a memory budget.
 * Pure TypeScript: the engine calls it with its budget (engine/memory.ts);
 * the runtime sizes update micro-batches and generate chunks with it.
 *
 * With P parameters, D width, F mlp width, H heads, Dq = heads·headDim,
 * Dkv = kvHeads·headDim, L layers, V vocabulary, S the sequence length (context + tokens):
 *
 *   state       = 4·P·8: θ, AdamW m, v in; θ, m, v out; gradient sum, clipped gradient
 *                 (a LoRA spec: 4·(2·P + 2·Pt + 8·Pa), Pt the targeted matrices' values, Pa the adapter's: the
 *                 frozen base θ and the graphs' slices of it (sampling runs the adapter unmerged); each update
 *                 step's merged targets and their gradient; the 8 copies above of the adapter only)
 *   update      = 4·S·(L + 1)·(8·D + 2·Dq + 2·Dkv + n·(Dq + Dkv) + 2·H·S + k·F) bytes per sequence:
 *                 per layer and token the forward values the backward reads (h, norm
 *                 outputs and x̂, h1: 8·D; q, ctx: 2·Dq; k, v: 2·Dkv; with qkNorm, n = 2,
 *                 the normalized q, k and their x̂; scores and
 *                 probabilities: 2·H·S; MLP pre-activations and activation: k·F,
 *                 k = 3 GELU, 4 SwiGLU) and one more layer's worth of backward transients;
 *                 the head's vocabulary-sized values exist for one chunk of rows at a time
 *                 (onnx/transformer/head.ts: HEAD_CHUNK_BYTES each), counted by enginePeakBytes
 *   generate    = 4·[4·L·Dkv·S + S·(8·D + 2·Dq + 2·Dkv + n·(Dq + Dkv) + 3·H·S + k·F) + 4·V] bytes per row:
 *                 key/value caches (context cache plus the generated cache carried
 *                 in and out of the Loop: at most 2·2·L·Dkv·S) and one prefill layer's
 *                 transients (scores, masked scores, probabilities: 3·H·S per token);
 *                 a LoRA spec adds 2·Pa: the row's gathered A and B, and its share of the run's
 *                 transposed adapters (onnx/transformer/lora-graph.ts)
 *
 * A spec fits when state + 2 rows (the smallest run) of the larger of update and
 * generate at S = maxSeq fit in the budget; otherwise TransformerSpecError names
 * the field that dominates: `maxSeq` when the per-sequence term does, else
 * `vocabSize` when embeddings and head hold most parameters, else `width`.
 */
import { adapterLayout } from './lora';
import { paramLayout, type TransformerSpec, TransformerSpecError } from './spec';

const F32 = 4;
/** bytes of one [rows, V] float32 tensor of the chunked head (onnx/transformer/head.ts) */
export const HEAD_CHUNK_BYTES = 16 * 2 ** 20;

/** Rows per chunk of the score/update head: one [rows, V] float32 tensor in HEAD_CHUNK_BYTES (at least 1). */
export function headChunkRows(vocabSize: number): number {
  return Math.max(1, Math.floor(HEAD_CHUNK_BYTES / (F32 * vocabSize)));
}
/** θ, m, v in; θ, m, v out; gradient sum; clipped gradient */
const STATE_COPIES = 8;
/** every fused run has at least this many rows (RowPolicy.minRows default) */
const MIN_ROWS = 2;

export function stateBytes(spec: TransformerSpec): number {
  const P = paramLayout(spec).total;
  if (!spec.lora) return F32 * STATE_COPIES * P;
  const { slots, total, base } = adapterLayout(spec);
  const targeted = slots.filter((x) => x.matrix === 'A').reduce((a, x) => a + base.get(`l${x.layer}.w${x.target}`)!.size, 0);
  return F32 * (2 * P + 2 * targeted + STATE_COPIES * total);
}

function perLayerToken(spec: TransformerSpec, S: number, attentionCopies: number): number {
  const dq = spec.heads * spec.headDim;
  const dkv = spec.kvHeads * spec.headDim;
  const mlp = (spec.mlp === 'gelu' ? 3 : 4) * spec.mlpWidth;
  const qkNorm = spec.qkNorm ? 2 * (dq + dkv) : 0;
  return 8 * spec.width + 2 * dq + 2 * dkv + qkNorm + attentionCopies * spec.heads * S + mlp;
}

/** Activation bytes one update sequence of S tokens holds while its micro-batch runs. */
export function updateBytesPerSequence(spec: TransformerSpec, S: number): number {
  return F32 * S * (spec.layers + 1) * perLayerToken(spec, S, 2);
}

/** Activation bytes one Score sequence of S tokens holds while its run goes through the layers (prefill-like: 3 attention copies). */
export function scoreBytesPerSequence(spec: TransformerSpec, S: number): number {
  return F32 * S * spec.layers * perLayerToken(spec, S, 3);
}

/**
 * Vocabulary-sized float tensors one generate row holds at once while sampling: logits, their
 * scaled and normalized copies, top-k/top-p's sorted values, int64 indices and cumulative sums.
 * Measured at V 151,669 (context 64, 3 tokens): 15–16 MiB a row with top-p at 8–32 rows, 7.5 MiB
 * without it, i.e. ~24 and ~10 V-floats besides the KV caches.
 */
const GENERATE_VOCAB_FLOATS = 24;

/**
 * Generate's left-padded context width (C) for a run whose longest context is `longest`: a
 * multiple of 16. A row's tokens then sit at the same offset modulo the SIMD width (16 floats
 * on AVX-512) in any batch, so the attention's sums over keys add the same lanes in the same
 * order as when the row runs alone. Padded to the longest context instead, a row's log-probs
 * moved by up to 4.8e-7 with its neighbours' lengths (engines/onnx/README.md, "Batch invariance").
 */
const GENERATE_CONTEXT_ALIGN = 16;
export const generateContextWidth = (longest: number) => Math.ceil(longest / GENERATE_CONTEXT_ALIGN) * GENERATE_CONTEXT_ALIGN;

/** Bytes one generate row of S tokens (context + generated) holds: KV caches, prefill transients and sampling's vocabulary-sized tensors. */
export function generateBytesPerRow(spec: TransformerSpec, S: number): number {
  const dkv = spec.kvHeads * spec.headDim;
  const adapter = spec.lora ? 2 * adapterLayout(spec).total : 0;
  return F32 * (4 * spec.layers * dkv * S + S * perLayerToken(spec, S, 3) + GENERATE_VOCAB_FLOATS * spec.vocabSize + adapter);
}

/**
 * Rows of `bytesPerRow` one run holds: as many as fit beside the state in `budget` and in `runBytes`
 * (the activations one run may hold: the engine's --micro-batch-bytes), at least `MIN_ROWS` (checked at load).
 */
export function rowsThatFit(spec: TransformerSpec, budget: number, bytesPerRow: number, runBytes = Infinity): number {
  return Math.max(MIN_ROWS, Math.floor(Math.min(budget - stateBytes(spec), runBytes) / bytesPerRow));
}

/** Refuse a spec whose smallest run at maxSeq would not fit in `budget` bytes; the error names the dominant field. */
export function checkTransformerFits(spec: TransformerSpec, budget: number, prefix = 'spec'): void {
  const state = stateBytes(spec);
  // at S = maxSeq: a generate run's aligned context can add up to 15 columns, under 1% at maxSeq 2,048
  const rows = MIN_ROWS * Math.max(updateBytesPerSequence(spec, spec.maxSeq), generateBytesPerRow(spec, spec.maxSeq));
  if (state + rows <= budget) return;
  const layout = paramLayout(spec);
  const embeddings = layout.slots.filter((s) => s.kind === 'embedding' || s.name === 'head').reduce((a, s) => a + s.size, 0);
  const field = rows >= state ? 'maxSeq' : embeddings * 2 >= layout.total ? 'vocabSize' : 'width';
  const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
  throw new TransformerSpecError([
    {
      path: `${prefix}.${field}`,
      message:
        `needs ~${gib(state + rows)} (weights and AdamW state ${gib(state)}, ${MIN_ROWS} sequences of maxSeq ${spec.maxSeq} ${gib(rows)}) ` +
        `but the engine's memory budget is ${gib(budget)} (reduce ${field}, or raise the budget: engine --memory-bytes / TROUPE_ENGINE_MEMORY_BYTES)`,
    },
  ]);
}

/** node, onnxruntime and the sessions of one spec before any run (measured: 157 MiB peak at V 100, 32 tokens: bench/memory.ts) */
export const ENGINE_BASE_BYTES = 150 * 2 ** 20;
/** [rows, V] tensors live at once in one chunk of the head (fitted to bench/memory.ts at V 152k, no arena): score's and update's */
const SCORE_HEAD_CHUNKS = 6;
const UPDATE_HEAD_CHUNKS = 12;
/** V-sized float values per generate row (carried logits / log-probs in and out, the sampler's) */
const GENERATE_V_VALUES = 10;

/** Sequences in one update micro-batch (onnx/transformer/runtime.ts): as many as fit, one when fewer than MIN_ROWS do. */
export function updateMicroBatchRows(spec: TransformerSpec, rows: number, S: number, microBatchBytes: number, minRows = MIN_ROWS): number {
  const fit = Math.floor(microBatchBytes / updateBytesPerSequence(spec, S));
  return fit < minRows ? 1 : Math.max(minRows, Math.min(fit, rows));
}

/**
 * Peak RSS of an engine that loaded `spec` and ran one training step's calls on `rows` sequences
 * of `seq` tokens (Generate, Score, Update). The engine's sessions run without a CPU arena
 * (onnx/device.ts), so each run's memory goes back when it ends: the peak is the largest run's
 * (Generate's, Score's or one Update micro-batch's, each split into runs as the runtime splits them).
 */
export function enginePeakBytes(spec: TransformerSpec, work: { rows: number; seq: number }, microBatchBytes = 256 * 2 ** 20): number {
  const V = spec.vocabSize;
  const chunk = Math.min(headChunkRows(V), work.rows * work.seq) * F32 * V;
  const genRow = generateBytesPerRow(spec, work.seq) + F32 * GENERATE_V_VALUES * V;
  const generate = Math.min(work.rows, rowsThatFit(spec, Infinity, genRow, microBatchBytes)) * genRow;
  const scoreSeq = scoreBytesPerSequence(spec, work.seq);
  const score = Math.min(Math.max(work.rows, MIN_ROWS), rowsThatFit(spec, Infinity, scoreSeq, microBatchBytes)) * scoreSeq + SCORE_HEAD_CHUNKS * chunk;
  const update =
    updateMicroBatchRows(spec, work.rows, work.seq, microBatchBytes) * updateBytesPerSequence(spec, work.seq) +
    UPDATE_HEAD_CHUNKS * chunk +
    4 * F32 * V * spec.width;
  return ENGINE_BASE_BYTES + stateBytes(spec) + Math.max(generate, score, update);
}
