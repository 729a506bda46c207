/**
 * Loads engine.proto with @grpc/proto-loader and declares the wire shapes
 * (snake_case, uint64 as decimal strings, enums as names, bytes as Buffer).
 */
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

export const PROTO_PATH = path.join(__dirname, 'engine.proto');
export const SERVICE_NAME = 'troupe.engine.v2.Engine';

export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

/** gRPC message size limit on both ends (Update batches and exported weights can be large). */
export const MAX_MESSAGE_BYTES = 256 * 1024 * 1024;

/**
 * Bytes per message of LoadVersionChunks / ExportVersionChunks: 4 MiB less room for the
 * message's framing and header, so every chunk message fits gRPC's default 4 MiB receive
 * limit (an engine or client built with default settings accepts it).
 */
export const CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024;

let cached: grpc.ServiceDefinition | undefined;

export function engineServiceDefinition(): grpc.ServiceDefinition {
  if (!cached) {
    const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      troupe: { engine: { v2: { Engine: grpc.ServiceClientConstructor } } };
    };
    cached = pkg.troupe.engine.v2.Engine.service;
  }
  return cached;
}

export type U64 = string | number;

export interface WireModelSpec {
  family?: string;
  vocab_size?: number;
  context_window?: number;
  embed_dim?: number;
  hidden_dim?: number;
  layers?: number;
  activation?: string;
  config_json?: string;
}

export interface WireVersionInfo {
  model_key: string;
  version: U64;
  spec: WireModelSpec | null;
  weights_sha256: string;
  optimizer_sha256: string;
  param_count: number;
  optimizer_step: number;
}

export interface WireInitModelRequest {
  model_key: string;
  spec: WireModelSpec | null;
  seed: U64;
}

export interface WireLoadVersionRequest {
  model_key: string;
  version: U64;
  spec: WireModelSpec | null;
  weights: Uint8Array;
  optimizer_state: Uint8Array;
  weights_sha256: string;
  weights_ref: WireBlobReference | null;
  optimizer_state_ref: WireBlobReference | null;
}

export interface WireBlobReference {
  uri: string;
  size: U64;
  sha256: string;
}

export interface WireLoadVersionChunk {
  header: WireLoadVersionRequest | null;
  weights: Uint8Array;
  optimizer_state: Uint8Array;
}

export interface WireExportVersionChunk {
  info: WireVersionInfo | null;
  weights: Uint8Array;
  optimizer_state: Uint8Array;
}

export interface WireExportVersionRequest {
  model_key: string;
  version: U64;
  destination_uri?: string;
}

export interface WireExportVersionResponse {
  info: WireVersionInfo | null;
  weights: Uint8Array;
  optimizer_state: Uint8Array;
  weights_ref?: WireBlobReference | null;
  optimizer_state_ref?: WireBlobReference | null;
}

export interface WireSamplingParams {
  temperature?: number;
  top_k?: number;
  top_p?: number;
  max_tokens?: number;
  stop_tokens?: number[];
}

export interface WireGenerateRequest {
  model_key: string;
  version: U64;
  sequences: { context: number[]; seed: U64; sampling?: WireSamplingParams | null }[];
  sampling: WireSamplingParams | null;
  request_id?: string;
}

export type WireStopReason = 'STOP_REASON_UNSPECIFIED' | 'STOP_TOKEN' | 'MAX_TOKENS' | 'CONTEXT_FULL' | 'ABORTED';

export interface WireGeneratedSequence {
  tokens: number[];
  logprobs: number[];
  sample_logprobs: number[];
  stop_reason: WireStopReason;
  version: U64;
}

export interface WireGenerateResponse {
  version: U64;
  sequences: WireGeneratedSequence[];
}

export interface WireScoreRequest {
  model_key: string;
  version: U64;
  sequences: { context: number[]; tokens: number[] }[];
}

export interface WireScoreResponse {
  version: U64;
  sequences: { logprobs: number[]; entropy: number[] }[];
}

export interface WireUpdateSample {
  context: number[];
  tokens: number[];
  loss_mask: number[];
  advantages: number[];
  old_logprobs: number[];
  loss_weights: number[];
  ref_logprobs: number[];
}

export type WireKlType = 'KL_TYPE_UNSPECIFIED' | 'K1' | 'LOW_VAR_KL';

export interface WireUpdateSettings {
  lr?: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weight_decay?: number;
  max_grad_norm?: number;
  clip_eps_low?: number;
  clip_eps_high?: number;
  dual_clip_c?: number;
  kl_coef?: number;
  kl_type?: WireKlType;
  entropy_coef?: number;
  inner_steps?: number;
}

export interface WireUpdateRequest {
  model_key: string;
  base_version: U64;
  request_id: string;
  allow_stale_base: boolean;
  samples: WireUpdateSample[];
  settings: WireUpdateSettings | null;
}

export interface WireUpdateMetrics {
  loss: number;
  pg_loss: number;
  kl_loss: number;
  entropy_sum: number;
  grad_norm: number;
  clip_fraction: number;
  dual_clip_fraction: number;
  approx_kl: number;
  entropy: number;
}

export interface WireUpdateResponse {
  info: WireVersionInfo | null;
  base_version: U64;
  metrics: WireUpdateMetrics | null;
  step_metrics: WireUpdateMetrics[];
  tokens: number;
  samples: number;
  replayed: boolean;
  duration_ms: number;
  logprob_gap_mean: number;
  logprob_gap_max: number;
}

export interface WireUpdateProgress {
  phase: string;
  queue_position: number;
  inner_step: number;
  inner_steps: number;
  micro_batches: number;
  elapsed_ms: number;
}

/** UpdateStream's messages (oneof `event`: with oneofs: true the loader also sets `event` to the field's name). */
export interface WireUpdateEvent {
  progress?: WireUpdateProgress | null;
  result?: WireUpdateResponse | null;
  event?: 'progress' | 'result';
}

export interface WireAbortRequest {
  model_key: string;
  request_ids: string[];
}

export interface WireAbortResponse {
  aborted_requests: number;
}

export interface WireCapabilities {
  protocol_version: number;
  engine: string;
  rpcs: string[];
  families: string[];
  deterministic: boolean;
  score_matches_generate: string;
  score_tolerance: number;
  max_batch: number;
  weights_by_reference: boolean;
}

export interface WireHealthResponse {
  status: string;
  device: string;
  requested_device: string;
  fell_back: boolean;
  fallback_reason: string;
  uptime_s: number;
  device_runs: string | number;
  queue_depth: number;
  capabilities: WireCapabilities | null;
}

export interface WireStatsResponse {
  device: string;
  requested_device: string;
  fell_back: boolean;
  fallback_reason: string;
  models: { model_key: string; spec: WireModelSpec | null; versions: U64[]; latest_version: U64 }[];
  queue_depth: number;
  tokens_per_second: number;
  tokens_generated: U64;
  generate_batches: U64;
  mean_batch_size: number;
  mean_requests_per_batch: number;
  score_runs: U64;
  update_runs: U64;
  intra_op_threads: number;
  batch_window_ms: number;
  max_batch: number;
  batch_invariance: string;
  uptime_s: number;
}
