/**
 * Temporal activities of the pool task queue: thin wrappers over the engine's
 * gRPC calls that heartbeat while waiting (so cancellation and dead workers are
 * noticed) and turn engine errors into ApplicationFailures with
 * `type` = the engine's ErrorReason (e.g. 'VERSION_NOT_LOADED').
 *
 * Inputs/outputs are JSON (Temporal payloads): seeds are numbers or decimal
 * strings, bytes are base64. Weights in payloads suit only small models (keep
 * them under Temporal's 2 MiB payload limit); store-aware activities should call
 * the EngineClient directly and move bytes via the store.
 *
 * Workflows: `import type { PoolActivities } from '../gpu-workers/activities'`.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { EngineClient, EngineError } from './client';
import { ErrorReason } from './errors';
import type {
  GenerateRequest,
  GenerateResponse,
  InitModelRequest,
  ScoreRequest,
  ScoreResponse,
  UpdateRequest,
  UpdateResponse,
  VersionInfo,
} from './types';

/** JSON-safe seed: a safe integer or a decimal uint64 string. */
export type JsonSeed = number | string;

export type EngineGenerateInput = Omit<GenerateRequest, 'sequences'> & {
  sequences: { context: number[]; seed: JsonSeed }[];
};
export type EngineGenerateOutput = GenerateResponse;
export type EngineScoreInput = ScoreRequest;
export type EngineScoreOutput = ScoreResponse;
export type EngineUpdateInput = UpdateRequest;
export type EngineUpdateOutput = UpdateResponse;
export type EngineInitModelInput = Omit<InitModelRequest, 'seed'> & { seed: JsonSeed };
export type EngineInitModelOutput = VersionInfo;

export interface EngineLoadVersionInput {
  modelKey: string;
  version: number;
  spec: InitModelRequest['spec'];
  weightsBase64: string;
  /** empty/absent = fresh optimizer */
  optimizerStateBase64?: string;
  weightsSha256?: string;
}
export type EngineLoadVersionOutput = VersionInfo;

export interface EngineExportVersionInput {
  modelKey: string;
  version: number;
}
export interface EngineExportVersionOutput {
  info: VersionInfo;
  weightsBase64: string;
  optimizerStateBase64: string;
}

/** Engine errors that a retry of the same activity cannot fix. */
const NON_RETRYABLE = new Set<string>([
  ErrorReason.INVALID_REQUEST,
  ErrorReason.MODEL_NOT_LOADED,
  ErrorReason.VERSION_NOT_LOADED,
  ErrorReason.STALE_BASE,
  ErrorReason.VERSION_CONFLICT,
  ErrorReason.REQUEST_ID_REUSED,
  ErrorReason.NON_FINITE_UPDATE,
]);

/**
 * ApplicationFailure for an engine error: type = reason, details = [{ reason, code, method }].
 * UNAVAILABLE / DEADLINE_EXCEEDED / INTERNAL stay retryable (engine restarting).
 */
export function toActivityFailure(err: unknown): unknown {
  if (!(err instanceof EngineError)) return err;
  const details = { reason: err.reason, code: err.code, method: err.method };
  return NON_RETRYABLE.has(err.reason)
    ? ApplicationFailure.nonRetryable(err.message, err.reason, details)
    : ApplicationFailure.retryable(err.message, err.reason, details);
}

export interface PoolActivityOptions {
  /** heartbeat period while waiting for the engine (default 2000 ms) */
  heartbeatEveryMs?: number;
}

/**
 * Runs one engine call with heartbeats every `everyMs`, aborting the gRPC call
 * when the activity is cancelled (cancellation reaches an activity only through
 * heartbeats, hence the timer).
 */
export async function heartbeating<T>(everyMs: number, call: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const ctx = Context.current();
  ctx.heartbeat();
  const timer = setInterval(() => ctx.heartbeat(), everyMs);
  try {
    return await call(ctx.cancellationSignal);
  } catch (e) {
    if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? e;
    throw toActivityFailure(e);
  } finally {
    clearInterval(timer);
  }
}

const b64 = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
const unb64 = (s: string | undefined) => (s ? new Uint8Array(Buffer.from(s, 'base64')) : new Uint8Array(0));

export function createPoolActivities(getClient: () => EngineClient, opts: PoolActivityOptions = {}) {
  const every = opts.heartbeatEveryMs ?? 2000;
  return {
    async engineGenerate(input: EngineGenerateInput): Promise<EngineGenerateOutput> {
      return heartbeating(every, (signal) => getClient().generate(input, { signal }));
    },
    async engineScore(input: EngineScoreInput): Promise<EngineScoreOutput> {
      return heartbeating(every, (signal) => getClient().score(input, { signal }));
    },
    async engineUpdate(input: EngineUpdateInput): Promise<EngineUpdateOutput> {
      return heartbeating(every, (signal) => getClient().update(input, { signal }));
    },
    async engineInitModel(input: EngineInitModelInput): Promise<EngineInitModelOutput> {
      return heartbeating(every, (signal) => getClient().initModel(input, { signal }));
    },
    async engineLoadVersion(input: EngineLoadVersionInput): Promise<EngineLoadVersionOutput> {
      return heartbeating(every, (signal) =>
        getClient().loadVersion(
          {
            modelKey: input.modelKey,
            version: input.version,
            spec: input.spec,
            weights: unb64(input.weightsBase64),
            optimizerState: unb64(input.optimizerStateBase64),
            weightsSha256: input.weightsSha256,
          },
          { signal },
        ),
      );
    },
    async engineExportVersion(input: EngineExportVersionInput): Promise<EngineExportVersionOutput> {
      return heartbeating(every, async (signal) => {
        const e = await getClient().exportVersion(input, { signal });
        return { info: e.info, weightsBase64: b64(e.weights), optimizerStateBase64: b64(e.optimizerState) };
      });
    },
  };
}

export type PoolActivities = ReturnType<typeof createPoolActivities>;
