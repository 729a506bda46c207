/**
 * Conversions between the TypeScript API (types.ts) and proto wire messages
 * (proto.ts). Used by the server (wire → request, response → wire) and by the
 * client (request → wire, wire → response).
 */
import { invalid } from './errors';
import type { ModelSpecInput } from '../families/model-family';
import type * as T from './types';
import type * as P from './proto';
import { CHUNK_BYTES } from './proto';

export function u64ToNumber(u: P.U64 | undefined | null): number {
  if (u === undefined || u === null || u === '') return 0;
  if (typeof u === 'number') return u;
  const b = BigInt(u);
  return b <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : Number.NaN;
}

const bytes = (b: Uint8Array | undefined | null) => (b ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : new Uint8Array(0));

// ---- spec ----

const isTinyLm = (family: string | undefined) => !family || family === 'tiny-lm';

/** v2: every family travels as family + vocab_size + config_json (tiny-lm's v1 fields 3-7 are only read). */
export function specToWire(s: ModelSpecInput): P.WireModelSpec {
  const { family, vocabSize, ...config } = s;
  return { family: family ?? 'tiny-lm', vocab_size: vocabSize ?? 0, config_json: JSON.stringify(config) };
}

export function specFromWire(w: P.WireModelSpec | null | undefined): T.ModelSpecInput | undefined {
  if (!w) return undefined;
  if (!isTinyLm(w.family) || w.config_json) {
    let config: unknown;
    try {
      config = JSON.parse(w.config_json || '{}');
    } catch {
      throw invalid('spec.config_json: not valid JSON');
    }
    if (typeof config !== 'object' || config === null || Array.isArray(config)) throw invalid('spec.config_json: must be a JSON object');
    return { ...(config as Record<string, unknown>), family: w.family, vocabSize: w.vocab_size ?? 0 };
  }
  const s: T.ModelSpecInput = { family: w.family || undefined, vocabSize: w.vocab_size ?? 0 };
  // zero = unset (defaults), as proto3 cannot tell them apart
  if (w.context_window) s.contextWindow = w.context_window;
  if (w.embed_dim) s.embedDim = w.embed_dim;
  if (w.hidden_dim) s.hiddenDim = w.hidden_dim;
  if (w.layers) s.layers = w.layers;
  if (w.activation) s.activation = w.activation;
  return s;
}

/** A normalized spec in a response (the engine always sends every field). */
function fullSpecFromWire(w: P.WireModelSpec | null | undefined): T.ModelSpec {
  const s = specFromWire(w);
  if (!s) throw new Error('engine response is missing the model spec');
  return { ...s, family: s.family ?? 'tiny-lm' } as T.ModelSpec;
}

// ---- version info ----

export function versionInfoToWire(v: T.VersionInfo): P.WireVersionInfo {
  return {
    model_key: v.modelKey,
    version: String(v.version),
    spec: specToWire(v.spec),
    weights_sha256: v.weightsSha256,
    optimizer_sha256: v.optimizerSha256,
    param_count: v.paramCount,
    optimizer_step: v.optimizerStep,
  };
}

export function versionInfoFromWire(w: P.WireVersionInfo | null): T.VersionInfo {
  if (!w) throw new Error('engine response is missing version info');
  return {
    modelKey: w.model_key,
    version: u64ToNumber(w.version),
    spec: fullSpecFromWire(w.spec),
    weightsSha256: w.weights_sha256,
    optimizerSha256: w.optimizer_sha256,
    paramCount: w.param_count,
    optimizerStep: w.optimizer_step,
  };
}

// ---- init / load / export ----

export const initModelToWire = (r: T.InitModelRequest): P.WireInitModelRequest => ({
  model_key: r.modelKey,
  spec: specToWire(r.spec),
  seed: String(r.seed),
});

export const initModelFromWire = (w: P.WireInitModelRequest): T.InitModelRequest => ({
  modelKey: w.model_key,
  spec: specFromWire(w.spec) as T.ModelSpecInput,
  seed: w.seed,
});

const blobRefToWire = (r: T.BlobReference | undefined): P.WireBlobReference | null => (r ? { uri: r.uri, size: String(r.size), sha256: r.sha256 } : null);
const blobRefFromWire = (w: P.WireBlobReference | null): T.BlobReference | undefined => (w?.uri ? { uri: w.uri, size: u64ToNumber(w.size), sha256: w.sha256 } : undefined);

export const loadVersionToWire = (r: T.LoadVersionRequest): P.WireLoadVersionRequest => ({
  model_key: r.modelKey,
  version: String(r.version),
  spec: specToWire(r.spec),
  weights: r.weights ?? new Uint8Array(0),
  optimizer_state: r.optimizerState ?? new Uint8Array(0),
  weights_sha256: r.weightsSha256 ?? '',
  weights_ref: blobRefToWire(r.weightsRef),
  optimizer_state_ref: blobRefToWire(r.optimizerStateRef),
});

export const loadVersionFromWire = (w: P.WireLoadVersionRequest): T.LoadVersionRequest => ({
  modelKey: w.model_key,
  version: u64ToNumber(w.version),
  spec: specFromWire(w.spec) as T.ModelSpecInput,
  weights: bytes(w.weights),
  optimizerState: bytes(w.optimizer_state),
  weightsSha256: w.weights_sha256 || undefined,
  weightsRef: blobRefFromWire(w.weights_ref),
  optimizerStateRef: blobRefFromWire(w.optimizer_state_ref),
});

export const exportVersionToWire = (r: T.ExportVersionRequest): P.WireExportVersionRequest => ({
  model_key: r.modelKey,
  version: String(r.version),
  destination_uri: r.destinationUri ?? '',
});

export const exportVersionFromWire = (w: P.WireExportVersionRequest): T.ExportVersionRequest => ({
  modelKey: w.model_key,
  version: u64ToNumber(w.version),
  ...(w.destination_uri ? { destinationUri: w.destination_uri } : {}),
});

export const exportedToWire = (e: T.ExportedVersion): P.WireExportVersionResponse => ({
  info: versionInfoToWire(e.info),
  weights: e.weights,
  optimizer_state: e.optimizerState,
  weights_ref: blobRefToWire(e.weightsRef),
  optimizer_state_ref: blobRefToWire(e.optimizerStateRef),
});

export const exportedFromWire = (w: P.WireExportVersionResponse): T.ExportedVersion => {
  const weightsRef = blobRefFromWire(w.weights_ref ?? null);
  const optimizerStateRef = blobRefFromWire(w.optimizer_state_ref ?? null);
  return {
    info: versionInfoFromWire(w.info),
    weights: bytes(w.weights),
    optimizerState: bytes(w.optimizer_state),
    ...(weightsRef ? { weightsRef } : {}),
    ...(optimizerStateRef ? { optimizerStateRef } : {}),
  };
};

// ---- chunked load / export (LoadVersionChunks, ExportVersionChunks) ----

type ChunkBytes = { weights: Uint8Array; optimizer_state: Uint8Array };
const EMPTY = new Uint8Array(0);

/** A version's bytes as chunk messages of at most `size` bytes each (at least one message). */
export function byteChunks(weights: Uint8Array, optimizerState: Uint8Array, size = CHUNK_BYTES): ChunkBytes[] {
  const out: ChunkBytes[] = [];
  for (let o = 0; o < weights.length; o += size) out.push({ weights: weights.subarray(o, o + size), optimizer_state: EMPTY });
  for (let o = 0; o < optimizerState.length; o += size) out.push({ weights: EMPTY, optimizer_state: optimizerState.subarray(o, o + size) });
  return out.length ? out : [{ weights: EMPTY, optimizer_state: EMPTY }];
}

/** The bytes of chunk messages joined back, in order. */
export function joinChunks(chunks: readonly ChunkBytes[]): { weights: Uint8Array; optimizerState: Uint8Array } {
  const join = (parts: Uint8Array[]) => {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) out.set(p, (o += p.length) - p.length);
    return out;
  };
  return { weights: join(chunks.map((c) => bytes(c.weights))), optimizerState: join(chunks.map((c) => bytes(c.optimizer_state))) };
}

// ---- generate / score ----

const STOP_TO_WIRE: Record<T.StopReason, P.WireStopReason> = {
  stop_token: 'STOP_TOKEN',
  max_tokens: 'MAX_TOKENS',
  context_full: 'CONTEXT_FULL',
  aborted: 'ABORTED',
};
const STOP_FROM_WIRE: Record<P.WireStopReason, T.StopReason> = {
  STOP_REASON_UNSPECIFIED: 'max_tokens',
  STOP_TOKEN: 'stop_token',
  MAX_TOKENS: 'max_tokens',
  CONTEXT_FULL: 'context_full',
  ABORTED: 'aborted',
};

const samplingToWire = (p: T.SamplingParams): P.WireSamplingParams => ({
  temperature: p.temperature ?? 1,
  top_k: p.topK ?? 0,
  top_p: p.topP ?? 0,
  max_tokens: p.maxTokens,
  stop_tokens: p.stopTokens ?? [],
});

const samplingFromWire = (w: P.WireSamplingParams): T.SamplingParams => ({
  temperature: w.temperature ?? 1,
  topK: w.top_k ?? 0,
  topP: w.top_p ?? 0,
  maxTokens: w.max_tokens ?? 0,
  stopTokens: w.stop_tokens ?? [],
});

export const generateToWire = (r: T.GenerateRequest): P.WireGenerateRequest => ({
  model_key: r.modelKey,
  version: String(r.version),
  sequences: r.sequences.map((s) => ({
    context: s.context,
    seed: String(s.seed),
    ...(s.sampling ? { sampling: samplingToWire(s.sampling) } : {}),
  })),
  sampling: r.sampling ? samplingToWire(r.sampling) : null,
  request_id: r.requestId ?? '',
});

export const generateFromWire = (w: P.WireGenerateRequest): T.GenerateRequest => ({
  modelKey: w.model_key,
  version: u64ToNumber(w.version),
  sequences: w.sequences.map((s) => ({
    context: s.context,
    seed: s.seed,
    ...(s.sampling ? { sampling: samplingFromWire(s.sampling) } : {}),
  })),
  sampling: w.sampling ? samplingFromWire(w.sampling) : undefined,
  ...(w.request_id ? { requestId: w.request_id } : {}),
});

export const generateResponseToWire = (r: T.GenerateResponse): P.WireGenerateResponse => ({
  version: String(r.version),
  sequences: r.sequences.map((s) => ({
    tokens: s.tokens,
    logprobs: s.logprobs,
    sample_logprobs: s.sampleLogprobs,
    stop_reason: STOP_TO_WIRE[s.stopReason],
    version: String(s.version),
  })),
});

export const generateResponseFromWire = (w: P.WireGenerateResponse): T.GenerateResponse => ({
  version: u64ToNumber(w.version),
  sequences: w.sequences.map((s) => ({
    tokens: s.tokens,
    logprobs: s.logprobs,
    sampleLogprobs: s.sample_logprobs,
    stopReason: STOP_FROM_WIRE[s.stop_reason] ?? 'max_tokens',
    // an engine that leaves it unset produced the requested version
    version: s.version !== undefined && String(s.version) !== '0' ? u64ToNumber(s.version) : u64ToNumber(w.version),
  })),
});

export const scoreToWire = (r: T.ScoreRequest): P.WireScoreRequest => ({
  model_key: r.modelKey,
  version: String(r.version),
  sequences: r.sequences.map((s) => ({ context: s.context, tokens: s.tokens })),
});

export const scoreFromWire = (w: P.WireScoreRequest): T.ScoreRequest => ({
  modelKey: w.model_key,
  version: u64ToNumber(w.version),
  sequences: w.sequences.map((s) => ({ context: s.context, tokens: s.tokens })),
});

export const scoreResponseToWire = (r: T.ScoreResponse): P.WireScoreResponse => ({
  version: String(r.version),
  sequences: r.sequences,
});

export const scoreResponseFromWire = (w: P.WireScoreResponse): T.ScoreResponse => ({
  version: u64ToNumber(w.version),
  sequences: w.sequences.map((s) => ({ logprobs: s.logprobs, entropy: s.entropy })),
});

// ---- update ----

const KL_TO_WIRE: Record<T.KlType, P.WireKlType> = { k1: 'K1', low_var_kl: 'LOW_VAR_KL' };

export function updateToWire(r: T.UpdateRequest): P.WireUpdateRequest {
  const s = r.settings ?? {};
  const settings: P.WireUpdateSettings = {};
  const put = <K extends keyof P.WireUpdateSettings>(k: K, v: P.WireUpdateSettings[K] | undefined) => {
    if (v !== undefined) settings[k] = v;
  };
  put('lr', s.lr);
  put('beta1', s.beta1);
  put('beta2', s.beta2);
  put('eps', s.eps);
  put('weight_decay', s.weightDecay);
  put('max_grad_norm', s.maxGradNorm);
  put('clip_eps_low', s.clipEpsLow);
  put('clip_eps_high', s.clipEpsHigh);
  put('dual_clip_c', s.dualClipC);
  put('kl_coef', s.klCoef);
  put('kl_type', s.klType ? KL_TO_WIRE[s.klType] : undefined);
  put('entropy_coef', s.entropyCoef);
  put('inner_steps', s.innerSteps);
  return {
    model_key: r.modelKey,
    base_version: String(r.baseVersion),
    request_id: r.requestId,
    allow_stale_base: !!r.allowStaleBase,
    samples: r.samples.map((x) => ({
      context: x.context,
      tokens: x.tokens,
      loss_mask: x.lossMask,
      advantages: x.advantages,
      old_logprobs: x.oldLogprobs,
      loss_weights: x.lossWeights,
      ref_logprobs: x.refLogprobs ?? [],
    })),
    settings,
  };
}

export function updateFromWire(w: P.WireUpdateRequest): T.UpdateRequest {
  const s = w.settings ?? {};
  const kl = s.kl_type === 'K1' ? 'k1' : s.kl_type === 'LOW_VAR_KL' ? 'low_var_kl' : undefined;
  return {
    modelKey: w.model_key,
    baseVersion: u64ToNumber(w.base_version),
    requestId: w.request_id,
    allowStaleBase: w.allow_stale_base,
    samples: w.samples.map((x) => ({
      context: x.context,
      tokens: x.tokens,
      lossMask: x.loss_mask,
      advantages: x.advantages,
      oldLogprobs: x.old_logprobs,
      lossWeights: x.loss_weights,
      refLogprobs: x.ref_logprobs,
    })),
    settings: {
      lr: s.lr,
      beta1: s.beta1,
      beta2: s.beta2,
      eps: s.eps,
      weightDecay: s.weight_decay,
      maxGradNorm: s.max_grad_norm,
      clipEpsLow: s.clip_eps_low,
      clipEpsHigh: s.clip_eps_high,
      dualClipC: s.dual_clip_c,
      klCoef: s.kl_coef,
      klType: kl,
      entropyCoef: s.entropy_coef,
      innerSteps: s.inner_steps,
    },
  };
}

const metricsToWire = (m: T.UpdateMetrics): P.WireUpdateMetrics => ({
  loss: m.loss,
  pg_loss: m.pgLoss,
  kl_loss: m.klLoss,
  entropy_sum: m.entropySum,
  grad_norm: m.gradNorm,
  clip_fraction: m.clipFraction,
  dual_clip_fraction: m.dualClipFraction,
  approx_kl: m.approxKl,
  entropy: m.entropy,
});

const metricsFromWire = (m: P.WireUpdateMetrics | null): T.UpdateMetrics => ({
  loss: m?.loss ?? 0,
  pgLoss: m?.pg_loss ?? 0,
  klLoss: m?.kl_loss ?? 0,
  entropySum: m?.entropy_sum ?? 0,
  gradNorm: m?.grad_norm ?? 0,
  clipFraction: m?.clip_fraction ?? 0,
  dualClipFraction: m?.dual_clip_fraction ?? 0,
  approxKl: m?.approx_kl ?? 0,
  entropy: m?.entropy ?? 0,
});

export const updateResponseToWire = (r: T.UpdateResponse): P.WireUpdateResponse => ({
  info: versionInfoToWire(r.info),
  base_version: String(r.baseVersion),
  metrics: metricsToWire(r.metrics),
  step_metrics: r.stepMetrics.map(metricsToWire),
  tokens: r.tokens,
  samples: r.samples,
  replayed: r.replayed,
  duration_ms: r.durationMs,
  logprob_gap_mean: r.logprobGap.mean,
  logprob_gap_max: r.logprobGap.max,
});

export const updateResponseFromWire = (w: P.WireUpdateResponse): T.UpdateResponse => ({
  info: versionInfoFromWire(w.info),
  baseVersion: u64ToNumber(w.base_version),
  metrics: metricsFromWire(w.metrics),
  stepMetrics: w.step_metrics.map(metricsFromWire),
  tokens: w.tokens,
  samples: w.samples,
  replayed: w.replayed,
  durationMs: w.duration_ms,
  logprobGap: { mean: w.logprob_gap_mean ?? 0, max: w.logprob_gap_max ?? 0 },
});

// ---- health / stats ----

export const healthToWire = (h: T.HealthResponse): P.WireHealthResponse => ({
  status: h.status,
  device: h.device,
  requested_device: h.requestedDevice,
  fell_back: h.fellBack,
  fallback_reason: h.fallbackReason,
  uptime_s: h.uptimeS,
  device_runs: h.deviceRuns,
  queue_depth: h.queueDepth,
  capabilities: {
    protocol_version: h.capabilities.protocolVersion,
    engine: h.capabilities.engine,
    rpcs: h.capabilities.rpcs,
    families: h.capabilities.families,
    deterministic: h.capabilities.deterministic,
    score_matches_generate: h.capabilities.scoreMatchesGenerate,
    score_tolerance: h.capabilities.scoreTolerance,
    max_batch: h.capabilities.maxBatch,
    weights_by_reference: h.capabilities.weightsByReference,
  },
});

export const healthFromWire = (w: P.WireHealthResponse): T.HealthResponse => ({
  status: w.status,
  device: w.device,
  requestedDevice: w.requested_device,
  fellBack: w.fell_back,
  fallbackReason: w.fallback_reason,
  uptimeS: w.uptime_s,
  deviceRuns: Number(w.device_runs ?? 0),
  queueDepth: w.queue_depth ?? 0,
  capabilities: capabilitiesFromWire(w.capabilities),
});

/** An engine that sends none (not v2) promises nothing. */
const capabilitiesFromWire = (c: P.WireCapabilities | null): T.Capabilities => ({
  protocolVersion: c?.protocol_version ?? 0,
  engine: c?.engine ?? '',
  rpcs: c?.rpcs ?? [],
  families: c?.families ?? [],
  deterministic: c?.deterministic ?? false,
  scoreMatchesGenerate: c?.score_matches_generate ?? '',
  scoreTolerance: c?.score_tolerance ?? 0,
  maxBatch: c?.max_batch ?? 0,
  weightsByReference: c?.weights_by_reference ?? false,
});

export const updateProgressFromWire = (p: P.WireUpdateProgress): T.UpdateProgress => ({
  phase: p.phase,
  queuePosition: p.queue_position,
  innerStep: p.inner_step,
  innerSteps: p.inner_steps,
  microBatches: p.micro_batches,
  elapsedMs: p.elapsed_ms,
});

export const updateProgressToWire = (p: T.UpdateProgress): P.WireUpdateProgress => ({
  phase: p.phase,
  queue_position: p.queuePosition,
  inner_step: p.innerStep,
  inner_steps: p.innerSteps,
  micro_batches: p.microBatches,
  elapsed_ms: p.elapsedMs,
});

export const statsToWire = (s: T.StatsResponse): P.WireStatsResponse => ({
  device: s.device,
  requested_device: s.requestedDevice,
  fell_back: s.fellBack,
  fallback_reason: s.fallbackReason,
  models: s.models.map((m) => ({
    model_key: m.modelKey,
    spec: specToWire(m.spec),
    versions: m.versions.map(String),
    latest_version: String(m.latestVersion),
  })),
  queue_depth: s.queueDepth,
  tokens_per_second: s.tokensPerSecond,
  tokens_generated: String(s.tokensGenerated),
  generate_batches: String(s.generateBatches),
  mean_batch_size: s.meanBatchSize,
  mean_requests_per_batch: s.meanRequestsPerBatch,
  score_runs: String(s.scoreRuns),
  update_runs: String(s.updateRuns),
  intra_op_threads: s.intraOpThreads,
  batch_window_ms: s.batchWindowMs,
  max_batch: s.maxBatch,
  batch_invariance: s.batchInvariance,
  uptime_s: s.uptimeS,
});

export const statsFromWire = (w: P.WireStatsResponse): T.StatsResponse => ({
  device: w.device,
  requestedDevice: w.requested_device,
  fellBack: w.fell_back,
  fallbackReason: w.fallback_reason,
  models: w.models.map((m) => ({
    modelKey: m.model_key,
    spec: fullSpecFromWire(m.spec),
    versions: m.versions.map(u64ToNumber),
    latestVersion: u64ToNumber(m.latest_version),
  })),
  queueDepth: w.queue_depth,
  tokensPerSecond: w.tokens_per_second,
  tokensGenerated: u64ToNumber(w.tokens_generated),
  generateBatches: u64ToNumber(w.generate_batches),
  meanBatchSize: w.mean_batch_size,
  meanRequestsPerBatch: w.mean_requests_per_batch,
  scoreRuns: u64ToNumber(w.score_runs),
  updateRuns: u64ToNumber(w.update_runs),
  intraOpThreads: w.intra_op_threads,
  batchWindowMs: w.batch_window_ms,
  maxBatch: w.max_batch,
  batchInvariance: w.batch_invariance,
  uptimeS: w.uptime_s,
});
