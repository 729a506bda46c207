/**
 * The engine API as Troupe's code speaks it (the in-process Engine, the gRPC client,
 * the pool activities); engines/protocol/wire.ts converts it to and from the messages
 * generated from engine.proto (proto.ts). Every type here is a generated message
 * (P.*) with only the fields where Troupe's meaning differs from the wire's written
 * out by hand:
 * - versions, sizes and counters are numbers (uint64 travels as a decimal string);
 * - a model spec is the family's config object (ModelSpec), not family + config_json;
 * - request fields are optional where Troupe has a default (temperature 1, not the
 *   wire's 0 = greedy; the update settings' defaults, contract.json) and nested
 *   messages the wire may leave unset are required in responses;
 * - stop reasons and KL types use the names of rl/ and the trajectory records
 *   ('stop_token', 'low_var_kl'), not the proto enums.
 * Everything here is plain JSON except bytes (Uint8Array).
 */
import type { ModelSpec, ModelSpecInput } from '../families/model-family';
import contract from './contract.json';
import type * as P from './proto';

/** A spec as callers may send it: family (default tiny-lm), vocabSize and the family's fields (defaults fill the rest). */
export type { ModelSpec, ModelSpecInput } from '../families/model-family';

/** Message T with fields K replaced by R (the fields whose meaning differs from the wire's). */
type Differs<T, K extends keyof T, R extends { [F in K]?: unknown }> = Omit<T, K> & R;
/** uint64 fields K, as numbers. */
type U64<K extends PropertyKey> = { [F in K]: number };

/** uint64 seed: a safe integer, a bigint or a decimal string. */
export type Seed = number | bigint | string;

export type VersionInfo = Differs<P.VersionInfo, 'version' | 'spec', U64<'version'> & { spec: ModelSpec }>;

export type InitModelRequest = Differs<P.InitModelRequest, 'spec' | 'seed', { spec: ModelSpecInput; seed: Seed }>;

/** Bytes by reference: a file:// URI the engine reads, checked against size and sha256. */
export type BlobReference = Differs<P.BlobReference, 'size', U64<'size'>>;

/** Bytes or references ({@link BlobReference}) for a version's weights and optimizer state, each optional. */
type VersionBytes = Partial<Pick<P.LoadVersionRequest, 'weights' | 'optimizerState'>> & { weightsRef?: BlobReference; optimizerStateRef?: BlobReference };

export type LoadVersionRequest = Differs<
  P.LoadVersionRequest,
  'version' | 'spec' | 'weights' | 'optimizerState' | 'weightsSha256' | 'weightsRef' | 'optimizerStateRef',
  U64<'version'> & {
    spec: ModelSpecInput;
    /** verified when given */
    weightsSha256?: string;
  } & VersionBytes
>;

export type ExportVersionRequest = Differs<
  P.ExportVersionRequest,
  'version' | 'destinationUri',
  U64<'version'> & {
    /** file:///abs/dir: the engine writes the bytes there as files and answers with references instead */
    destinationUri?: string;
  }
>;

export type ExportedVersion = Differs<
  P.ExportVersionResponse,
  'info' | 'weightsRef' | 'optimizerStateRef',
  { info: VersionInfo } & Pick<VersionBytes, 'weightsRef' | 'optimizerStateRef'>
>;

/** maxTokens required; the rest optional: temperature default 1 (the wire's 0 is greedy), topK / topP 0 = off. */
export type SamplingParams = Pick<P.SamplingParams, 'maxTokens'> & Partial<Omit<P.SamplingParams, 'maxTokens'>>;

export type GenerateSequenceInput = Differs<
  P.GenerateSequence,
  'seed' | 'sampling',
  {
    seed: Seed;
    /** overrides the request's sampling for this sequence (lets clients merge calls) */
    sampling?: SamplingParams;
  }
>;

export type GenerateRequest = Differs<
  P.GenerateRequest,
  'version' | 'sequences' | 'sampling' | 'requestId',
  U64<'version'> & {
    sequences: GenerateSequenceInput[];
    /** applies to every sequence without its own `sampling` (required unless all have one) */
    sampling?: SamplingParams;
    /** names the call for Abort */
    requestId?: string;
  }
>;

export type StopReason = 'stop_token' | 'max_tokens' | 'context_full' | 'aborted';

export type GeneratedSequence = Differs<P.GeneratedSequence, 'stopReason' | 'version', U64<'version'> & { stopReason: StopReason }>;

export type GenerateResponse = Differs<P.GenerateResponse, 'version' | 'sequences', U64<'version'> & { sequences: GeneratedSequence[] }>;

export type ScoreSequenceInput = P.ScoreSequence;
export type ScoreRequest = Differs<P.ScoreRequest, 'version', U64<'version'>>;
export type ScoredSequence = P.ScoredSequence;
export type ScoreResponse = Differs<P.ScoreResponse, 'version', U64<'version'>>;

/** One trajectory segment (engine.proto UpdateSample); refLogprobs absent = empty = no KL term. */
export type UpdateSampleInput = Differs<P.UpdateSample, 'refLogprobs', { refLogprobs?: number[] }>;

export type KlType = 'k1' | 'low_var_kl';

/**
 * engine.proto UpdateSettings: every field optional (absent = DEFAULT_UPDATE_SETTINGS), under the
 * run config's names (clipLow, clipHigh, dualClip, entropyCoef, ...); 0 turns maxGradNorm and dualClip off.
 */
export type UpdateSettingsInput = Differs<P.UpdateSettings, 'klType', { klType?: KlType }>;

/** The engine contract's limits (contract.json), read by the Python engine too. */
export const ENGINE_LIMITS: Readonly<typeof contract.limits> = Object.freeze({ ...contract.limits });

/** The most tokens one Generate samples per sequence (max_tokens); both bundled engines refuse more, and teams check agents' maxTokens against it. */
export const MAX_TOKENS_LIMIT = ENGINE_LIMITS.maxTokens;

const isKlType = (k: string): k is KlType => k === 'k1' || k === 'low_var_kl';
const klDefault = contract.updateDefaults.klType;
if (!isKlType(klDefault)) throw new Error(`engines/protocol/contract.json: updateDefaults.klType ${klDefault} is not a KL type`);

/** What an engine applies to the settings an Update leaves out (contract.json, shared with the Python engine). */
export const DEFAULT_UPDATE_SETTINGS: Readonly<Required<UpdateSettingsInput>> = Object.freeze({ ...contract.updateDefaults, klType: klDefault });

export type UpdateRequest = Differs<
  P.UpdateRequest,
  'baseVersion' | 'allowStaleBase' | 'samples' | 'settings',
  U64<'baseVersion'> & { allowStaleBase?: boolean; samples: UpdateSampleInput[]; settings?: UpdateSettingsInput }
>;

/** Sums are over trained tokens; means over trained tokens with w_t ≠ 0 (as rl/loss-reference.ts diagnostics). */
export type UpdateMetrics = P.UpdateMetrics;

export type UpdateResponse = Differs<
  P.UpdateResponse,
  'info' | 'baseVersion' | 'metrics' | 'logprobGapMean' | 'logprobGapMax',
  U64<'baseVersion'> & {
    info: VersionInfo;
    /** mean over the inner steps */
    metrics: UpdateMetrics;
    /** rollout–training mismatch: |oldLogprobs − Score of the base version| over trained tokens */
    logprobGap: { mean: number; max: number };
  }
>;

/** What an engine serves and promises. */
export type Capabilities = P.Capabilities;

export type HealthResponse = Differs<P.HealthResponse, 'deviceRuns' | 'capabilities', U64<'deviceRuns'> & { capabilities: Capabilities }>;

export type UpdateProgress = P.UpdateProgress;

/** modelKey empty or absent = every model; requestIds empty or absent = every Generate of the model(s) */
export type AbortRequest = Partial<P.AbortRequest>;

export type AbortResponse = P.AbortResponse;

export type ModelStats = Differs<P.ModelStats, 'spec' | 'versions' | 'latestVersion', U64<'latestVersion'> & { spec: ModelSpec; versions: number[] }>;

export type StatsResponse = Differs<
  P.StatsResponse,
  | 'models'
  | 'tokensGenerated'
  | 'generateBatches'
  | 'scoreRuns'
  | 'updateRuns'
  | 'mixedAdapterRuns'
  | 'prefillRowsShared'
  | 'prefixRowsReused'
  | 'prefixCacheBytes',
  U64<
    'tokensGenerated' | 'generateBatches' | 'scoreRuns' | 'updateRuns' | 'mixedAdapterRuns' | 'prefillRowsShared' | 'prefixRowsReused' | 'prefixCacheBytes'
  > & {
    models: ModelStats[];
  }
>;
