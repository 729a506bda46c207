/**
 * Conversions between Troupe's engine API (types.ts) and the messages generated
 * from engine.proto (proto.ts), where the two differ (types.ts says how). Used
 * by the server (wire → request, response → wire) and by the client (request →
 * wire, wire → response).
 */
import { invalid } from './errors';
import type { ModelSpecInput } from '../families/model-family';
import type * as T from './types';
import * as P from './proto';

export function u64ToNumber(u: string | number | undefined | null): number {
  if (u === undefined || u === null || u === '') return 0;
  if (typeof u === 'number') return u;
  const b = BigInt(u);
  return b <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : Number.NaN;
}

/** A domain number or seed as a uint64 field. */
const u64 = (n: number | bigint | string): string => String(n);

// ---- spec ----

const isTinyLm = (family: string | undefined) => !family || family === 'tiny-lm';

/** v2: every family travels as family + vocab_size + config_json (tiny-lm's v1 fields 3-7 are only read). */
export function specToWire(s: ModelSpecInput): P.ModelSpec {
  const { family, vocabSize, ...config } = s;
  return P.ModelSpec.fromPartial({ family: family ?? 'tiny-lm', vocabSize: vocabSize ?? 0, configJson: JSON.stringify(config) });
}

export function specFromWire(w: P.ModelSpec | undefined): T.ModelSpecInput | undefined {
  if (!w) return undefined;
  if (!isTinyLm(w.family) || w.configJson) {
    let config: unknown;
    try {
      config = JSON.parse(w.configJson || '{}');
    } catch {
      throw invalid('spec.config_json: not valid JSON');
    }
    if (typeof config !== 'object' || config === null || Array.isArray(config)) throw invalid('spec.config_json: must be a JSON object');
    return { ...(config as Record<string, unknown>), family: w.family, vocabSize: w.vocabSize };
  }
  const s: T.ModelSpecInput = { family: w.family || undefined, vocabSize: w.vocabSize };
  // zero = unset (defaults), as proto3 cannot tell them apart
  if (w.contextWindow) s.contextWindow = w.contextWindow;
  if (w.embedDim) s.embedDim = w.embedDim;
  if (w.hiddenDim) s.hiddenDim = w.hiddenDim;
  if (w.layers) s.layers = w.layers;
  if (w.activation) s.activation = w.activation;
  return s;
}

/** A normalized spec in a response (the engine always sends every field). */
function fullSpecFromWire(w: P.ModelSpec | undefined): T.ModelSpec {
  const s = specFromWire(w);
  if (!s) throw new Error('engine response is missing the model spec');
  return { ...s, family: s.family ?? 'tiny-lm' } as T.ModelSpec;
}

// ---- version info ----

export const versionInfoToWire = (v: T.VersionInfo): P.VersionInfo => ({ ...v, version: u64(v.version), spec: specToWire(v.spec) });

export function versionInfoFromWire(w: P.VersionInfo | undefined): T.VersionInfo {
  if (!w) throw new Error('engine response is missing version info');
  return { ...w, version: u64ToNumber(w.version), spec: fullSpecFromWire(w.spec) };
}

// ---- init / load / export ----

export const initModelToWire = (r: T.InitModelRequest): P.InitModelRequest => ({ modelKey: r.modelKey, spec: specToWire(r.spec), seed: u64(r.seed) });

export const initModelFromWire = (w: P.InitModelRequest): T.InitModelRequest => ({
  modelKey: w.modelKey,
  spec: specFromWire(w.spec) as T.ModelSpecInput,
  seed: w.seed,
});

const blobRefToWire = (r: T.BlobReference | undefined): P.BlobReference | undefined => (r ? { ...r, size: u64(r.size) } : undefined);
const blobRefFromWire = (w: P.BlobReference | undefined): T.BlobReference | undefined => (w?.uri ? { ...w, size: u64ToNumber(w.size) } : undefined);

export const loadVersionToWire = (r: T.LoadVersionRequest): P.LoadVersionRequest => ({
  modelKey: r.modelKey,
  version: u64(r.version),
  spec: specToWire(r.spec),
  weights: r.weights ?? new Uint8Array(0),
  optimizerState: r.optimizerState ?? new Uint8Array(0),
  weightsSha256: r.weightsSha256 ?? '',
  weightsRef: blobRefToWire(r.weightsRef),
  optimizerStateRef: blobRefToWire(r.optimizerStateRef),
});

export const loadVersionFromWire = (w: P.LoadVersionRequest): T.LoadVersionRequest => ({
  modelKey: w.modelKey,
  version: u64ToNumber(w.version),
  spec: specFromWire(w.spec) as T.ModelSpecInput,
  weights: w.weights,
  optimizerState: w.optimizerState,
  weightsSha256: w.weightsSha256 || undefined,
  weightsRef: blobRefFromWire(w.weightsRef),
  optimizerStateRef: blobRefFromWire(w.optimizerStateRef),
});

export const exportVersionToWire = (r: T.ExportVersionRequest): P.ExportVersionRequest => ({
  modelKey: r.modelKey,
  version: u64(r.version),
  destinationUri: r.destinationUri ?? '',
});

export const exportVersionFromWire = (w: P.ExportVersionRequest): T.ExportVersionRequest => ({
  modelKey: w.modelKey,
  version: u64ToNumber(w.version),
  ...(w.destinationUri ? { destinationUri: w.destinationUri } : {}),
});

export const exportedToWire = (e: T.ExportedVersion): P.ExportVersionResponse => ({
  info: versionInfoToWire(e.info),
  weights: e.weights,
  optimizerState: e.optimizerState,
  weightsRef: blobRefToWire(e.weightsRef),
  optimizerStateRef: blobRefToWire(e.optimizerStateRef),
});

export const exportedFromWire = (w: P.ExportVersionResponse): T.ExportedVersion => {
  const weightsRef = blobRefFromWire(w.weightsRef);
  const optimizerStateRef = blobRefFromWire(w.optimizerStateRef);
  return {
    info: versionInfoFromWire(w.info),
    weights: w.weights,
    optimizerState: w.optimizerState,
    ...(weightsRef ? { weightsRef } : {}),
    ...(optimizerStateRef ? { optimizerStateRef } : {}),
  };
};

// ---- chunked load / export (LoadVersionChunks, ExportVersionChunks) ----

type ChunkBytes = Pick<P.LoadVersionChunk, 'weights' | 'optimizerState'>;
const EMPTY = new Uint8Array(0);

/** A version's bytes as chunk messages of at most `size` bytes each (at least one message). */
export function byteChunks(weights: Uint8Array, optimizerState: Uint8Array, size = P.CHUNK_BYTES): ChunkBytes[] {
  const out: ChunkBytes[] = [];
  for (let o = 0; o < weights.length; o += size) out.push({ weights: weights.subarray(o, o + size), optimizerState: EMPTY });
  for (let o = 0; o < optimizerState.length; o += size) out.push({ weights: EMPTY, optimizerState: optimizerState.subarray(o, o + size) });
  return out.length ? out : [{ weights: EMPTY, optimizerState: EMPTY }];
}

/** The bytes of chunk messages joined back, in order. */
export function joinChunks(chunks: readonly ChunkBytes[]): { weights: Uint8Array; optimizerState: Uint8Array } {
  const join = (parts: Uint8Array[]) => {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) out.set(p, (o += p.length) - p.length);
    return out;
  };
  return { weights: join(chunks.map((c) => c.weights)), optimizerState: join(chunks.map((c) => c.optimizerState)) };
}

// ---- generate / score ----

const STOP_TO_WIRE: Record<T.StopReason, P.StopReason> = {
  stop_token: P.StopReason.STOP_TOKEN,
  max_tokens: P.StopReason.MAX_TOKENS,
  context_full: P.StopReason.CONTEXT_FULL,
  aborted: P.StopReason.ABORTED,
};
/** Unset or unknown (a newer engine's) reasons read as max_tokens: the sequence ended without a stop token. */
const stopFromWire = (r: P.StopReason): T.StopReason =>
  r === P.StopReason.STOP_TOKEN ? 'stop_token' : r === P.StopReason.CONTEXT_FULL ? 'context_full' : r === P.StopReason.ABORTED ? 'aborted' : 'max_tokens';

const samplingToWire = (p: T.SamplingParams): P.SamplingParams => ({
  temperature: p.temperature ?? 1,
  topK: p.topK ?? 0,
  topP: p.topP ?? 0,
  maxTokens: p.maxTokens,
  stopTokens: p.stopTokens ?? [],
});

export const generateToWire = (r: T.GenerateRequest): P.GenerateRequest => ({
  modelKey: r.modelKey,
  version: u64(r.version),
  sequences: r.sequences.map((s) => ({ context: s.context, seed: u64(s.seed), sampling: s.sampling && samplingToWire(s.sampling) })),
  sampling: r.sampling && samplingToWire(r.sampling),
  requestId: r.requestId ?? '',
});

export const generateFromWire = (w: P.GenerateRequest): T.GenerateRequest => ({
  modelKey: w.modelKey,
  version: u64ToNumber(w.version),
  sequences: w.sequences.map((s) => ({ context: s.context, seed: s.seed, ...(s.sampling ? { sampling: s.sampling } : {}) })),
  sampling: w.sampling,
  ...(w.requestId ? { requestId: w.requestId } : {}),
});

export const generateResponseToWire = (r: T.GenerateResponse): P.GenerateResponse => ({
  version: u64(r.version),
  sequences: r.sequences.map((s) => ({ ...s, stopReason: STOP_TO_WIRE[s.stopReason], version: u64(s.version) })),
});

export const generateResponseFromWire = (w: P.GenerateResponse): T.GenerateResponse => ({
  version: u64ToNumber(w.version),
  sequences: w.sequences.map((s) => ({
    ...s,
    stopReason: stopFromWire(s.stopReason),
    // an engine that leaves it unset produced the requested version
    version: u64ToNumber(s.version !== '0' ? s.version : w.version),
  })),
});

export const scoreToWire = (r: T.ScoreRequest): P.ScoreRequest => ({ ...r, version: u64(r.version) });
export const scoreFromWire = (w: P.ScoreRequest): T.ScoreRequest => ({ ...w, version: u64ToNumber(w.version) });
export const scoreResponseToWire = (r: T.ScoreResponse): P.ScoreResponse => ({ ...r, version: u64(r.version) });
export const scoreResponseFromWire = (w: P.ScoreResponse): T.ScoreResponse => ({ ...w, version: u64ToNumber(w.version) });

// ---- update ----

const KL_TO_WIRE: Record<T.KlType, P.KlType> = { k1: P.KlType.K1, low_var_kl: P.KlType.LOW_VAR_KL };
const klFromWire = (k: P.KlType): T.KlType | undefined => (k === P.KlType.K1 ? 'k1' : k === P.KlType.LOW_VAR_KL ? 'low_var_kl' : undefined);

export function updateToWire(r: T.UpdateRequest): P.UpdateRequest {
  const { klType, ...settings } = r.settings ?? {};
  return {
    modelKey: r.modelKey,
    baseVersion: u64(r.baseVersion),
    requestId: r.requestId,
    allowStaleBase: !!r.allowStaleBase,
    samples: r.samples.map((x) => ({ ...x, refLogprobs: x.refLogprobs ?? [] })),
    settings: { ...settings, klType: klType ? KL_TO_WIRE[klType] : P.KlType.KL_TYPE_UNSPECIFIED },
  };
}

export function updateFromWire(w: P.UpdateRequest): T.UpdateRequest {
  const { klType, ...settings } = w.settings ?? P.UpdateSettings.create();
  return {
    modelKey: w.modelKey,
    baseVersion: u64ToNumber(w.baseVersion),
    requestId: w.requestId,
    allowStaleBase: w.allowStaleBase,
    samples: w.samples,
    settings: { ...settings, klType: klFromWire(klType) },
  };
}

export const updateResponseToWire = ({ logprobGap, ...r }: T.UpdateResponse): P.UpdateResponse => ({
  ...r,
  info: versionInfoToWire(r.info),
  baseVersion: u64(r.baseVersion),
  logprobGapMean: logprobGap.mean,
  logprobGapMax: logprobGap.max,
});

export const updateResponseFromWire = ({ logprobGapMean, logprobGapMax, ...w }: P.UpdateResponse): T.UpdateResponse => ({
  ...w,
  info: versionInfoFromWire(w.info),
  baseVersion: u64ToNumber(w.baseVersion),
  metrics: w.metrics ?? P.UpdateMetrics.create(),
  logprobGap: { mean: logprobGapMean, max: logprobGapMax },
});

// ---- health / stats ----

export const healthToWire = (h: T.HealthResponse): P.HealthResponse => ({ ...h, deviceRuns: u64(h.deviceRuns) });

/** An engine that sends no capabilities (not v2) promises nothing. */
export const healthFromWire = (w: P.HealthResponse): T.HealthResponse => ({
  ...w,
  deviceRuns: u64ToNumber(w.deviceRuns),
  capabilities: w.capabilities ?? P.Capabilities.create(),
});

export const statsToWire = (s: T.StatsResponse): P.StatsResponse => ({
  ...s,
  models: s.models.map((m) => ({ modelKey: m.modelKey, spec: specToWire(m.spec), versions: m.versions.map(u64), latestVersion: u64(m.latestVersion) })),
  tokensGenerated: u64(s.tokensGenerated),
  generateBatches: u64(s.generateBatches),
  scoreRuns: u64(s.scoreRuns),
  updateRuns: u64(s.updateRuns),
  mixedAdapterRuns: u64(s.mixedAdapterRuns),
  prefillRowsShared: u64(s.prefillRowsShared),
  prefixRowsReused: u64(s.prefixRowsReused),
  prefixCacheBytes: u64(s.prefixCacheBytes),
});

export const statsFromWire = (w: P.StatsResponse): T.StatsResponse => ({
  ...w,
  models: w.models.map((m) => ({
    modelKey: m.modelKey,
    spec: fullSpecFromWire(m.spec),
    versions: m.versions.map(u64ToNumber),
    latestVersion: u64ToNumber(m.latestVersion),
  })),
  tokensGenerated: u64ToNumber(w.tokensGenerated),
  generateBatches: u64ToNumber(w.generateBatches),
  scoreRuns: u64ToNumber(w.scoreRuns),
  updateRuns: u64ToNumber(w.updateRuns),
  mixedAdapterRuns: u64ToNumber(w.mixedAdapterRuns),
  prefillRowsShared: u64ToNumber(w.prefillRowsShared),
  prefixRowsReused: u64ToNumber(w.prefixRowsReused),
  prefixCacheBytes: u64ToNumber(w.prefixCacheBytes),
});
