/**
 * The versions a pool's engine holds. The engine is a cache of versions;
 * Postgres is the truth. Any call that finds its version missing (engine
 * restarted, another host) loads it from the store and retries, so a pool
 * worker or engine can die at any moment.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { GenerateCall, GenerateReply } from '../../agents/episode';
import type {
  GenerateRequest,
  GenerateResponse,
  ExportedVersion,
  InitModelRequest,
  LoadVersionRequest,
  ScoreRequest,
  ScoreResponse,
  UpdateRequest,
  UpdateProgress,
  UpdateResponse,
  VersionInfo,
} from '../../engines/protocol/types';
import type { Sql } from '../../infra/db';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import { locateVersion, readVersionBytes } from '../store/versions';
import type { UpdateSequence } from './batch';
import { InvalidRequestError } from '../../engines/protocol/client';
import { modelKey, scoreRequest } from './update-step';

/** The engine calls these activities need (engines/protocol/client.ts provides them over gRPC). */
export interface EngineApi {
  initModel(req: InitModelRequest): Promise<VersionInfo>;
  loadVersion(req: LoadVersionRequest): Promise<VersionInfo>;
  exportVersion(req: { modelKey: string; version: number }): Promise<ExportedVersion>;
  generate(req: GenerateRequest): Promise<GenerateResponse>;
  score(req: ScoreRequest): Promise<ScoreResponse>;
  update(req: UpdateRequest): Promise<UpdateResponse>;
  /** Update with progress events (EngineClient: UpdateStream), where the engine API has it. */
  updateStream?(req: UpdateRequest, onProgress: (p: UpdateProgress) => void): Promise<UpdateResponse>;
}

/** One agent turn's generation: a batch of one sequence on the engine. */
export async function generateOne(engine: Pick<EngineApi, 'generate'>, runId: string, call: GenerateCall): Promise<GenerateReply> {
  let res: GenerateResponse;
  try {
    res = await engine.generate({
      modelKey: modelKey(runId, call.model),
      version: call.version,
      sequences: [{ context: call.context, seed: call.seed }],
      sampling: {
        temperature: call.sampling.temperature,
        topK: call.sampling.topK,
        topP: call.sampling.topP,
        maxTokens: call.maxTokens,
        stopTokens: call.stopTokens,
      },
    });
  } catch (e) {
    // the engine names the request's field; the team's fields are the turn's model and lengths
    if (e instanceof InvalidRequestError)
      throw new InvalidRequestError(
        `${e.message} (a turn of models.${call.model}: context ${call.context.length} tokens, maxTokens ${call.maxTokens} left)`,
        e.code,
        e.reason,
        e.method,
      );
    throw e;
  }
  const s = res.sequences[0]!;
  // Troupe never aborts its own calls; an operator's Abort leaves a partial turn, which is not a sample: retry it.
  if (s.stopReason === 'aborted')
    throw ApplicationFailure.retryable(`generation of ${call.model} v${call.version} was aborted on the engine; retrying the turn`, 'GenerateAborted');
  return { tokens: s.tokens, logprobs: s.logprobs, stopReason: s.stopReason === 'stop_token' ? 'stop_token' : 'max_tokens' };
}

export const reasonOf = (e: unknown) => (e as { reason?: string })?.reason;

/** A pool's engine, reached through the versions it holds. */
export interface EngineVersions {
  /** Runs `fn`; if the engine lacks the version, loads it from the store and runs it again. */
  withVersion<T>(runId: string, model: string, version: number, fn: () => Promise<T>): Promise<T>;
  /** One agent turn's generation (generateOne), its version loaded when missing. */
  generate(runId: string, call: GenerateCall): Promise<GenerateReply>;
  /** The log-probs of the sequences' tokens under a version of the model (engine Score). */
  score(runId: string, model: string, version: number, sequences: UpdateSequence[]): Promise<number[][]>;
}

export interface EngineVersionsDeps {
  sql: Sql;
  engine: () => EngineApi;
  /** Where versions above the inline limit keep their bytes. */
  checkpoints: CheckpointStore;
}

export function engineVersions({ sql, engine, checkpoints }: EngineVersionsDeps): EngineVersions {
  /**
   * Puts a stored version into the engine: by reference when its bytes are
   * files (the engine reads and checks them where it shares the path), else,
   * or when the engine cannot read the reference, by sending the bytes.
   */
  async function loadFromStore(runId: string, model: string, version: number): Promise<void> {
    const stored = await locateVersion(sql, runId, model, version);
    if (!stored) throw ApplicationFailure.nonRetryable(`version ${version} of ${model} in run ${runId} is not in the store`, 'MissingVersion');
    const req = { modelKey: modelKey(runId, model), version, spec: stored.spec as LoadVersionRequest['spec'], weightsSha256: stored.sha256 };
    const b = stored.bytes;
    if (b.kind === 'files') {
      try {
        await engine().loadVersion({
          ...req,
          weightsRef: { uri: checkpoints.uri(b.weights.file), size: b.weights.size, sha256: b.weights.sha256 },
          optimizerStateRef: { uri: checkpoints.uri(b.optimizer.file), size: b.optimizer.size, sha256: b.optimizer.sha256 },
        });
        return;
      } catch (e) {
        if (reasonOf(e) !== 'REFERENCE_UNREADABLE') throw e;
      }
    }
    await engine().loadVersion({ ...req, ...(await readVersionBytes(checkpoints, stored)) });
  }

  /**
   * Loads in progress, by version: the many turns of a batched rollout that find a new
   * version missing at once (a trainer on another pool made it, or the engine restarted)
   * share one load instead of sending the version once each.
   */
  const loading = new Map<string, Promise<void>>();
  function loadOnce(runId: string, model: string, version: number): Promise<void> {
    const key = `${runId}\u0000${model}\u0000${version}`;
    let p = loading.get(key);
    if (!p) {
      p = loadFromStore(runId, model, version).finally(() => loading.delete(key));
      loading.set(key, p);
    }
    return p;
  }

  /** Runs `fn`; if the engine lacks the version, loads it from the store and runs it again. */
  async function withVersion<T>(runId: string, model: string, version: number, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      const reason = reasonOf(e);
      if (reason !== 'VERSION_NOT_LOADED' && reason !== 'MODEL_NOT_LOADED') throw e;
      await loadOnce(runId, model, version);
      return fn();
    }
  }

  return {
    withVersion,
    generate: (runId, call) => withVersion(runId, call.model, call.version, () => generateOne(engine(), runId, call)),
    async score(runId, model, version, sequences) {
      const res = await withVersion(runId, model, version, () => engine().score(scoreRequest(modelKey(runId, model), version, sequences)));
      return res.sequences.map((q) => q.logprobs);
    },
  };
}
