/**
 * What the engine core needs from a model family's runtime: the row shapes
 * of Generate / Score / Update, optimizer state and settings, step metrics,
 * and the runtime interface itself. Every family's runtime implements
 * `ModelRuntime`; nothing here knows how a family computes.
 */
import type * as ort from 'onnxruntime-node';

export interface SessionFactory {
  create(model: Uint8Array, label: string): Promise<ort.InferenceSession>;
  /** what the sessions of this device may use (families that size runs by memory read it) */
  readonly memory: MemoryPolicy;
}

/** The memory one spec's runs may use on a device (engine --memory-bytes; transformer/memory.ts). */
export interface MemoryPolicy {
  /** weights, optimizer state and the activations of one run; a spec whose smallest run exceeds it is refused */
  budgetBytes: number;
  /**
   * activations one update micro-batch may hold. A setting, not derived from the host's memory,
   * so a retried update splits its batch the same way (hence the same bits) on every host.
   */
  microBatchBytes: number;
}

/** 256 MiB of update activations per micro-batch. */
export const DEFAULT_MICRO_BATCH_BYTES = 256 * 2 ** 20;

export interface GenerateRow {
  context: ArrayLike<number>;
  /** Philox key words from the sequence seed (philox.seedKey) */
  seedKey: [number, number];
  /** 0 = greedy */
  temperature: number;
  /** 0 = off */
  topK: number;
  /** 0 or ≥ 1 = off */
  topP: number;
  maxTokens: number;
  /** sorted, deduplicated ids; generation stops after emitting one */
  stopTokens: number[];
}

export type StopReason = 'stop_token' | 'max_tokens';

export interface GenerateRowResult {
  tokens: number[];
  /** log π(token | context) at temperature 1, the distribution Score/Update use */
  logprobs: number[];
  /** log-prob under the distribution actually sampled from (temperature/top-k/top-p); 0 for greedy */
  sampleLogprobs: number[];
  stopReason: StopReason;
}

export interface ScoreSequence {
  context: ArrayLike<number>;
  tokens: ArrayLike<number>;
}

export interface UpdateSample {
  context: ArrayLike<number>;
  tokens: ArrayLike<number>;
  lossMask: ArrayLike<number>;
  advantages: ArrayLike<number>;
  oldLogprobs: ArrayLike<number>;
  lossWeights: ArrayLike<number>;
  /** empty = no reference for this sample */
  refLogprobs: ArrayLike<number>;
}

export interface OptimState {
  theta: Float32Array;
  m: Float32Array;
  v: Float32Array;
  /** optimizer steps taken so far (AdamW's t) */
  step: number;
}

export interface UpdateSettings {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** +∞ disables clipping */
  maxGradNorm: number;
  clipLow: number;
  clipHigh: number;
  /** +∞ disables the dual clip */
  dualClip: number;
  klCoef: number;
  klType: 'k1' | 'low_var_kl';
  /** entropy bonus β_H: loss −= β_H·Σ w_t·H_t (0 = off) */
  entropyCoef: number;
  innerSteps: number;
}

/** Order of the per-step metrics vector every family's update graph emits ([K, 9]). */
export const STEP_METRICS = ['loss', 'pg_loss', 'kl_loss', 'entropy_sum', 'grad_norm', 'clip_fraction', 'dual_clip_fraction', 'approx_kl', 'entropy'] as const;

export type StepMetrics = Record<(typeof STEP_METRICS)[number], number>;

export interface UpdateOutput {
  state: OptimState;
  /** one entry per inner step */
  steps: StepMetrics[];
  /** trained tokens (loss mask 1) */
  tokens: number;
}

export interface RowPolicy {
  /** every run has at least this many rows (GEMM with M = 1 takes a different kernel) */
  minRows: number;
  /** score runs are split into chunks of at most this many rows (fixed-shape mode) */
  maxRows?: number;
}

/** The sessions of one spec (weights are inputs, so every model with the spec shares them). */
export interface ModelRuntime {
  readonly paramCount: number;
  /** Build all sessions now (so the first request does not pay graph compilation). */
  warm(): Promise<void>;
  /** One fused run over all rows (callers split batches larger than they want). */
  generate(theta: Float32Array, rows: GenerateRow[]): Promise<GenerateRowResult[]>;
  /** Log-prob and entropy of every given token; one array per sequence. */
  score(theta: Float32Array, seqs: ScoreSequence[]): Promise<{ logprobs: Float32Array[]; entropy: Float32Array[] }>;
  /** K = settings.innerSteps fused AdamW steps on the whole batch. */
  update(state: OptimState, samples: UpdateSample[], settings: UpdateSettings): Promise<UpdateOutput>;
  /**
   * The most rows one device run of Generate or Score holds for rows spanning `span` positions,
   * where the runtime splits larger batches by memory (absent: one run, whatever the batch).
   */
  largestRun?(span: number): number;
  /**
   * One Generate over rows whose weights differ by row (LoRA adapters over one base: transformer/lora-runtime.ts):
   * row i runs on thetas[ofRow[i]], each row's result as when it runs alone. Absent: a run holds one θ.
   */
  generateMixed?(thetas: Float32Array[], rows: GenerateRow[], ofRow: number[]): Promise<GenerateRowResult[]>;
}

/** Per-step metrics from the flat [K, STEP_METRICS] output of an update graph. */
export function stepMetrics(flat: Float32Array, K: number): StepMetrics[] {
  const M = STEP_METRICS.length;
  const steps: StepMetrics[] = [];
  for (let k = 0; k < K; k++) steps.push(Object.fromEntries(STEP_METRICS.map((name, j) => [name, flat[k * M + j]])) as StepMetrics);
  return steps;
}
