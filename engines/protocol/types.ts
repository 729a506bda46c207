/**
 * TypeScript shapes of the engine API (camelCase mirrors of engine.proto).
 * The in-process Engine, the gRPC client and the pool activities all speak
 * these; engines/protocol/wire.ts converts them to and from proto messages.
 * Everything here is plain JSON except bytes (Uint8Array).
 */
import type { ModelSpec, ModelSpecInput } from '../families/model-family';

/** A spec as callers may send it: family (default tiny-lm), vocabSize and the family's fields (defaults fill the rest). */
export type { ModelSpec, ModelSpecInput } from '../families/model-family';

/** uint64 seed: a safe integer, a bigint or a decimal string. */
export type Seed = number | bigint | string;

export interface VersionInfo {
  modelKey: string;
  version: number;
  spec: ModelSpec;
  weightsSha256: string;
  optimizerSha256: string;
  paramCount: number;
  optimizerStep: number;
}

export interface InitModelRequest {
  modelKey: string;
  spec: ModelSpecInput;
  seed: Seed;
}

/** Bytes by reference: a file:// URI the engine reads, checked against size and sha256. */
export interface BlobReference {
  uri: string;
  size: number;
  sha256: string;
}

export interface LoadVersionRequest {
  modelKey: string;
  version: number;
  spec: ModelSpecInput;
  /** required unless weightsRef is given */
  weights?: Uint8Array;
  /** empty = fresh optimizer */
  optimizerState?: Uint8Array;
  /** verified when given */
  weightsSha256?: string;
  /** instead of weights / optimizerState: files the engine shares with the checkpoint store */
  weightsRef?: BlobReference;
  optimizerStateRef?: BlobReference;
}

export interface ExportVersionRequest {
  modelKey: string;
  version: number;
  /** file:///abs/dir: the engine writes the bytes there as files and answers with references instead */
  destinationUri?: string;
}

export interface ExportedVersion {
  info: VersionInfo;
  /** empty when exported by reference */
  weights: Uint8Array;
  optimizerState: Uint8Array;
  /** set when exported to a destinationUri */
  weightsRef?: BlobReference;
  optimizerStateRef?: BlobReference;
}

export interface SamplingParams {
  /** 0 = greedy; default 1 */
  temperature?: number;
  /** 0 = off (default) */
  topK?: number;
  /** 0 or ≥ 1 = off (default) */
  topP?: number;
  maxTokens: number;
  stopTokens?: number[];
}

export interface GenerateSequenceInput {
  context: number[];
  seed: Seed;
  /** overrides the request's sampling for this sequence (lets clients merge calls) */
  sampling?: SamplingParams;
}

export interface GenerateRequest {
  modelKey: string;
  version: number;
  sequences: GenerateSequenceInput[];
  /** applies to every sequence without its own `sampling` (required unless all have one) */
  sampling?: SamplingParams;
  /** names the call for Abort */
  requestId?: string;
}

export type StopReason = 'stop_token' | 'max_tokens' | 'context_full' | 'aborted';

export interface GeneratedSequence {
  tokens: number[];
  /** log π(token | context) at temperature 1, no top-k/top-p (= Score = Update's ratio input) */
  logprobs: number[];
  /** log-prob under the distribution actually sampled from; 0 for greedy */
  sampleLogprobs: number[];
  stopReason: StopReason;
  /** the weight version that produced every token of it */
  version: number;
}

export interface GenerateResponse {
  version: number;
  sequences: GeneratedSequence[];
}

export interface ScoreSequenceInput {
  context: number[];
  tokens: number[];
}

export interface ScoreRequest {
  modelKey: string;
  version: number;
  sequences: ScoreSequenceInput[];
}

export interface ScoredSequence {
  logprobs: number[];
  entropy: number[];
}

export interface ScoreResponse {
  version: number;
  sequences: ScoredSequence[];
}

export interface UpdateSampleInput {
  context: number[];
  tokens: number[];
  /** 1 = trained, 0 = context only; one per token */
  lossMask: number[];
  advantages: number[];
  oldLogprobs: number[];
  /** w_t ≥ 0, loss = Σ w_t·L_t */
  lossWeights: number[];
  /** optional reference log-probs, one per token (or absent/empty) */
  refLogprobs?: number[];
}

export type KlType = 'k1' | 'low_var_kl';

export interface UpdateSettingsInput {
  lr?: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
  /** 0 = no clipping */
  maxGradNorm?: number;
  clipEpsLow?: number;
  clipEpsHigh?: number;
  /** 0 = no dual clip */
  dualClipC?: number;
  klCoef?: number;
  klType?: KlType;
  /** entropy bonus β_H: loss −= β_H·Σ w_t·H_t (default 0 = off) */
  entropyCoef?: number;
  innerSteps?: number;
}

export const DEFAULT_UPDATE_SETTINGS: Required<UpdateSettingsInput> = {
  lr: 1e-3,
  beta1: 0.9,
  beta2: 0.999,
  eps: 1e-8,
  weightDecay: 0,
  maxGradNorm: 1,
  clipEpsLow: 0.2,
  clipEpsHigh: 0.2,
  dualClipC: 3,
  klCoef: 0.001,
  klType: 'low_var_kl',
  entropyCoef: 0,
  innerSteps: 1,
};

export interface UpdateRequest {
  modelKey: string;
  baseVersion: number;
  requestId: string;
  allowStaleBase?: boolean;
  samples: UpdateSampleInput[];
  settings?: UpdateSettingsInput;
}

/** Sums are over trained tokens; means over trained tokens with w_t ≠ 0 (as rl/loss.ts diagnostics). */
export interface UpdateMetrics {
  /** Σ w·L_pg + kl_coef·Σ w·KL − entropy_coef·Σ w·H */
  loss: number;
  /** Σ w·L_pg */
  pgLoss: number;
  /** Σ w·KL (before kl_coef; 0 without reference log-probs) */
  klLoss: number;
  /** Σ w·H (before entropy_coef) */
  entropySum: number;
  /** global gradient norm before clipping */
  gradNorm: number;
  /** fraction where the PPO clip binds strictly */
  clipFraction: number;
  /** fraction where the dual clip binds strictly */
  dualClipFraction: number;
  /** mean of ratio − 1 − log ratio (k3 estimate of KL(old‖new)) */
  approxKl: number;
  /** mean entropy of the next-token distribution */
  entropy: number;
}

export interface UpdateResponse {
  info: VersionInfo;
  baseVersion: number;
  /** mean over the inner steps */
  metrics: UpdateMetrics;
  stepMetrics: UpdateMetrics[];
  tokens: number;
  samples: number;
  /** true when this is the stored result of an earlier call with the same requestId */
  replayed: boolean;
  durationMs: number;
  /** rollout–training mismatch: |oldLogprobs − Score of the base version| over trained tokens */
  logprobGap: { mean: number; max: number };
}

export interface HealthResponse {
  status: string;
  device: string;
  requestedDevice: string;
  fellBack: boolean;
  fallbackReason: string;
  uptimeS: number;
  /** device runs finished since the engine started */
  deviceRuns: number;
  /** requests queued or running on the device */
  queueDepth: number;
  capabilities: Capabilities;
}

/** What an engine serves and promises (engine.proto Capabilities). */
export interface Capabilities {
  protocolVersion: number;
  engine: string;
  rpcs: string[];
  families: string[];
  deterministic: boolean;
  scoreMatchesGenerate: 'bit-identical' | 'tolerance' | string;
  scoreTolerance: number;
  maxBatch: number;
  weightsByReference: boolean;
}

/** UpdateStream progress (engine.proto UpdateProgress). */
export interface UpdateProgress {
  phase: string;
  queuePosition: number;
  innerStep: number;
  innerSteps: number;
  microBatches: number;
  elapsedMs: number;
}

export interface AbortRequest {
  /** empty = every model */
  modelKey?: string;
  /** empty = every Generate of the model(s) */
  requestIds?: string[];
}

export interface AbortResponse {
  abortedRequests: number;
}

export interface ModelStats {
  modelKey: string;
  spec: ModelSpec;
  versions: number[];
  latestVersion: number;
}

export interface StatsResponse {
  device: string;
  requestedDevice: string;
  fellBack: boolean;
  fallbackReason: string;
  models: ModelStats[];
  queueDepth: number;
  tokensPerSecond: number;
  tokensGenerated: number;
  generateBatches: number;
  meanBatchSize: number;
  meanRequestsPerBatch: number;
  scoreRuns: number;
  updateRuns: number;
  intraOpThreads: number;
  batchWindowMs: number;
  maxBatch: number;
  batchInvariance: string;
  uptimeS: number;
}
