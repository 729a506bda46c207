/**
 * The engine API as Troupe's code speaks it (the in-process Engine, the gRPC client,
 * the pool activities); engines/protocol/wire.ts converts it to and from the messages
 * generated from engine.proto (proto.ts). Messages that mean the same here as on the
 * wire are the generated types themselves. The others differ where Troupe's meaning
 * differs from the wire's:
 * - versions, sizes and counters are numbers (uint64 travels as a decimal string);
 * - a model spec is the family's config object (ModelSpec), not family + config_json;
 * - request fields are optional where Troupe has a default (temperature 1, not the
 *   wire's 0 = greedy; the update settings' defaults below);
 * - stop reasons and KL types use the names of rl/ and the trajectory records
 *   ('stop_token', 'low_var_kl'), not the proto enums.
 * Everything here is plain JSON except bytes (Uint8Array).
 */
import type { ModelSpec, ModelSpecInput } from '../families/model-family';
import type * as P from './proto';

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

export type ScoreSequenceInput = P.ScoreSequence;

export interface ScoreRequest {
  modelKey: string;
  version: number;
  sequences: ScoreSequenceInput[];
}

export type ScoredSequence = P.ScoredSequence;

export interface ScoreResponse {
  version: number;
  sequences: ScoredSequence[];
}

/** One trajectory segment (engine.proto UpdateSample); refLogprobs absent = empty = no KL term. */
export type UpdateSampleInput = Omit<P.UpdateSample, 'refLogprobs'> & { refLogprobs?: number[] };

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

/** The most tokens one Generate samples per sequence (max_tokens); both bundled engines refuse more, and teams check agents' maxTokens against it. */
export const MAX_TOKENS_LIMIT = 4096;

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
export type UpdateMetrics = P.UpdateMetrics;

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

/** What an engine serves and promises. */
export type Capabilities = P.Capabilities;

export type UpdateProgress = P.UpdateProgress;

/** modelKey empty or absent = every model; requestIds empty or absent = every Generate of the model(s) */
export type AbortRequest = Partial<P.AbortRequest>;

export type AbortResponse = P.AbortResponse;

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
  /** generate runs whose rows used more than one LoRA adapter over one base */
  mixedAdapterRuns: number;
}
