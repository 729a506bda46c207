/**
 * Pool-queue activities of a training run, served next to an engine: turns of
 * durable episodes, batched rollouts, version 0, and the exactly-once update.
 *
 * The engine is a cache of versions; Postgres is the truth. Any call that
 * finds its version missing (engine restarted, another host) loads it from
 * the store and retries, so a pool worker or engine can die at any moment.
 */
import { setMaxListeners } from 'node:events';
import { Context, heartbeat } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { CallJournal, GenerateCall, GenerateReply } from '../../agents/episode';
import { runBatchedEpisode } from './episode-sandbox';
import type { EpisodeThreads, ThreadEpisode } from './episode-threads';
import { checkpointOf, engineSpec, type ModelSpec } from '../../agents/model';
import type { ModelSpecInput } from '../../engines/families/model-family';
import { pretrainedVersion, readCheckpointTokenizers } from './pretrained';
import type { Sampling } from '../../agents/agent';
import { deriveSeed } from '../../agents/seed';
import type { Split } from '../../agents/tasks';
import { loadTeam } from '../../agents/team-registry';
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
import type { OffPolicySetting, ResolvedTraining } from '../../schema/run-config';
import { writeMetrics } from '../store/metrics';
import { recordEvent } from '../store/runs';
import { commitUpdate, locateVersion, readVersionBytes, saveInitialVersion, versionOfStep } from '../store/versions';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import { gatewayJournal } from '../store/gateway-journal';
import { loadStepEpisodes, saveEpisodes, storedEpisodeIds, type StoredEpisode } from '../store/trajectories';
import { executeTool } from '../tools';
import { buildStepBatch, type UpdateSequence } from './batch';
import { heartbeating, withEngineFailures } from './engine-work';
import { InvalidRequestError } from '../../engines/protocol/client';
import { offPolicyCorrection } from './off-policy';
import {
  FIRST_ATTEMPT,
  REDUCED_LR,
  agentRows,
  agentsOfModel,
  modelKey,
  needsReference,
  scoreRequest,
  skipReason,
  updateMetrics,
  updateRequest,
  updateRows,
  updateSamples,
  type UpdateAttempt,
} from './update-step';
import { scoredEpisode, type TeamRef } from './control';
import { episodesOf, planTrainEpisodes, type RolloutEpisodes } from './plan';
import { CarriedOver, continuing, groupKey, heldGroups, Lockstep, type Generation } from './partial';
import { commitPartialRollout, loadCarried, partialRolloutOf, type CarriedEpisode, type PartialRolloutResult } from '../store/carried';
import { loadTasks } from '../tasks';
import { openGatewaySessions } from '../../gateway';

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

export interface PoolDeps {
  sql: Sql;
  engine: () => EngineApi;
  /** Where versions above the inline limit keep their bytes. */
  checkpoints: CheckpointStore;
  /** Threads for batched episodes (a pool worker's); without them episodes run on the calling thread. */
  episodes?: EpisodeThreads;
}

export interface UpdateResult {
  version: number;
  /** false when an earlier attempt had already committed this step. */
  committed: boolean;
  skipped?: string;
  metrics: Record<string, number>;
  rewards: Record<string, Record<string, number>>;
}

/** Finished episodes per store transaction in a batched rollout: few round trips, early progress. */
const ROLLOUT_FLUSH = 32;

/**
 * A model's InitModel spec. A LoRA model's names its base's version 0 by the seed the base's own
 * InitModel draws it from (over a checkpoint, the engine names the directory), so the spec alone
 * (stored with every version) rebuilds the frozen base.
 */
function initSpec(spec: ModelSpec, runSeed: number): ModelSpecInput {
  const s = engineSpec(spec);
  if (spec.base === undefined) return s;
  // over a checkpoint: the directory's vocabulary, which may be padded past the tokenizer's ids (the base's initModel checks they fit)
  if (checkpointOf(spec) !== undefined) return { ...s, vocabSize: 0 };
  return { ...s, lora: { ...(s.lora as object), baseSeed: deriveSeed(runSeed, 'init', spec.base) } };
}

const reasonOf = (e: unknown) => (e as { reason?: string })?.reason;

export function createTrainingPoolActivities({ sql, engine, checkpoints, episodes }: PoolDeps) {
  readCheckpointTokenizers();
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

  async function generateDirect(runId: string, call: GenerateCall): Promise<GenerateReply> {
    return withVersion(runId, call.model, call.version, () => generateOne(engine(), runId, call));
  }

  /** One batched episode, scored: on episode threads where the worker has them (a runaway episode cannot block the others), else here (activities called directly, as some tests do). */
  function runOne(
    team: ReturnType<typeof loadTeam>,
    signal: AbortSignal,
    generate: (call: GenerateCall) => Promise<GenerateReply>,
    episode: ThreadEpisode,
    journal?: CallJournal,
  ): Promise<StoredEpisode> {
    return episodes
      ? episodes.run(episode, { cpuMs: team.limits.cpuMs, generate, journal, stopped: (trajectory) => scoredEpisode(team, episode.meta, trajectory), signal })
      : runBatchedEpisode(team, episode.input, {
          generate,
          callTool: (req) => executeTool(team, req, signal),
          now: () => Date.now(),
          openSessions: openGatewaySessions,
          journal,
        }).then((trajectory) => scoredEpisode(team, episode.meta, trajectory));
  }

  return withEngineFailures({
    /** One generation segment of a durable episode's turn. */
    async generateTurn(input: TeamRef & { runId: string; call: GenerateCall }): Promise<GenerateReply> {
      return generateDirect(input.runId, input.call);
    },

    /** Version 0 of a model, from its checkpoint or else the run seed; stored once, a repeat is a no-op. */
    async initModel(input: TeamRef & { runId: string; model: string; seed: number }): Promise<{ version: 0 }> {
      if (await versionOfStep(sql, input.runId, input.model, -1)) return { version: 0 };
      const team = loadTeam(input.team, input.teamOptions);
      const spec = team.models[input.model];
      if (!spec) throw ApplicationFailure.nonRetryable(`team ${team.name} has no model ${input.model}`);
      if (checkpointOf(spec) !== undefined && spec.base === undefined) {
        // stored as is: engines load it from the store on first use (withVersion)
        await saveInitialVersion(sql, checkpoints, { runId: input.runId, model: input.model, ...pretrainedVersion(spec, input.model) });
        return { version: 0 };
      }
      const key = modelKey(input.runId, input.model);
      // A cold engine builds (and probes) its sessions for a new spec first: heartbeat meanwhile.
      const v = await heartbeating(
        () => ({ phase: 'init' }),
        async () => {
          await engine().initModel({ modelKey: key, spec: initSpec(spec, input.seed), seed: deriveSeed(input.seed, 'init', input.model) });
          return engine().exportVersion({ modelKey: key, version: 0 });
        },
      );
      await saveInitialVersion(sql, checkpoints, {
        runId: input.runId,
        model: input.model,
        spec: v.info.spec,
        weights: v.weights,
        optimizerState: v.optimizerState,
        sha256: v.info.weightsSha256,
      });
      return { version: 0 };
    },

    /**
     * Runs many episodes in this process against the engine (batched mode).
     * Finished episodes are scored at once and stored in flushes of
     * ROLLOUT_FLUSH (one transaction each, overlapping the episodes still
     * generating). Episodes already stored are skipped, so a retry only does
     * what is left; progress is heartbeated as the ids stored so far.
     */
    async rolloutBatch(
      input: TeamRef & { runId: string; step: number; split: Split; versions: Record<string, number>; sampling?: Partial<Sampling> } & RolloutEpisodes,
    ): Promise<{ episodes: number; skipped: number; failed: number }> {
      const team = loadTeam(input.team, input.teamOptions);
      const ctx = Context.current();
      // Episodes by reference (a plan and a slice), or listed (workflows started before plans were references).
      const specs = 'plan' in input ? episodesOf(loadTasks(team), input.plan, input.from, input.to) : input.specs;
      const previously = new Set<string>((ctx.info.heartbeatDetails as { finished?: string[] } | undefined)?.finished ?? []);
      const stored = await storedEpisodeIds(
        sql,
        specs.map((s) => s.episodeId),
      );
      const finished: string[] = [...stored];
      const todo = specs.filter((s) => !stored.has(s.episodeId) && !previously.has(s.episodeId));
      let failed = 0;
      let pending: StoredEpisode[] = [];
      let writing: Promise<unknown> = Promise.resolve();
      // One flush after another on one connection; the ids count as finished once committed.
      const flush = () => {
        const batch = pending;
        pending = [];
        if (batch.length > 0) {
          writing = writing.then(async () => {
            await saveEpisodes(sql, batch);
            for (const e of batch) finished.push(e.meta.episodeId);
          });
          writing.catch(() => undefined); // surfaced by the final await, not as an unhandled rejection
        }
        return writing;
      };
      // Every concurrent tool call listens on the activity's cancellation signal.
      setMaxListeners(0, ctx.cancellationSignal);
      await heartbeating(
        () => ({ finished }),
        async () => {
          const generate = (call: GenerateCall) => generateDirect(input.runId, call);
          // gateway calls are journaled: a retry of this rollout answers them again without sampling
          const journal = gatewayJournal(sql, input.runId);
          // All episodes in flight at once: the engine coalesces their turns into batched runs.
          await Promise.all(
            todo.map(async (spec) => {
              const episode = await runOne(
                team,
                ctx.cancellationSignal,
                generate,
                {
                  team: { team: input.team, teamOptions: input.teamOptions },
                  input: { episodeId: spec.episodeId, seed: spec.seed, task: spec.task, versions: input.versions, sampling: input.sampling },
                  meta: { ...spec, runId: input.runId, step: input.step, split: input.split, mode: 'batched' },
                },
                journal,
              );
              if (episode.trajectory.status === 'failed') failed++;
              pending.push(episode);
              if (pending.length >= ROLLOUT_FLUSH) void flush();
            }),
          );
          await flush();
        },
      );
      heartbeat({ finished });
      return { episodes: specs.length, skipped: specs.length - todo.length, failed };
    },

    /**
     * A step's partial rollout (batched mode; partial.ts): the groups carried into this step
     * and new ones up to `inFlight` groups run in lockstep rounds until `minFinished` whole
     * groups finished (and every group carried `maxCarrySteps` times, when set); the whole
     * groups are stored for this step's update, the rest carried into the next step, all in
     * one transaction. A retry redoes the rollout from the same stored inputs (same cut, same
     * episodes), or returns the committed result.
     */
    async rolloutPartial(
      input: TeamRef & {
        runId: string;
        step: number;
        seed: number;
        groupSize: number;
        inFlight: number;
        minFinished: number;
        maxCarrySteps?: number;
        versions: Record<string, number>;
      },
    ): Promise<PartialRolloutResult> {
      const { runId, step } = input;
      const committed = await partialRolloutOf(sql, runId, step);
      if (committed) return committed;
      const team = loadTeam(input.team, input.teamOptions);
      const ctx = Context.current();
      const carriedIn = await loadCarried(sql, runId, step);
      const carriedGroups = new Set(carriedIn.map((c) => groupKey(c.fromStep, c.spec.groupIndex)));
      const fresh = Math.max(0, input.inFlight - carriedGroups.size);
      const planned: CarriedEpisode[] =
        fresh === 0
          ? []
          : planTrainEpisodes(loadTasks(team), { runId, step, seed: input.seed, groupsPerStep: fresh, groupSize: input.groupSize }).map((spec) => ({
              spec,
              fromStep: step,
              carries: 0,
              generations: [],
            }));
      const all = [...carriedIn, ...planned];
      // groups carried maxCarrySteps times are finished here: decided from the stored carried rows alone
      const held = heldGroups(
        step,
        carriedIn.map((c) => ({ key: groupKey(c.fromStep, c.spec.groupIndex), fromStep: c.fromStep })),
        input.maxCarrySteps,
      );
      const lock = new Lockstep(
        all.map((e) => groupKey(e.fromStep, e.spec.groupIndex)),
        input.minFinished,
        held,
      );
      const ended: Array<StoredEpisode | undefined> = all.map((e) => e.finished && { ...e.finished, meta: { ...e.finished.meta, step } });
      const records: Generation[][] = all.map(() => []);
      let generatedTokens = 0;
      let replayedTokens = 0;
      all.forEach((e, i) => e.finished && lock.finish(i));
      setMaxListeners(0, ctx.cancellationSignal);
      await heartbeating(
        () => ({ rounds: lock.rounds }),
        () =>
          Promise.all(
            all.map(async (e, i) => {
              if (e.finished) return;
              const live = async (call: GenerateCall) => {
                await lock.enter(i);
                try {
                  const reply = await generateDirect(runId, call);
                  generatedTokens += reply.tokens.length;
                  return reply;
                } finally {
                  lock.leave(i);
                }
              };
              const gen = continuing(e.generations, live, records[i]!);
              try {
                ended[i] = await runOne(team, ctx.cancellationSignal, gen.generate, {
                  team: { team: input.team, teamOptions: input.teamOptions },
                  input: { episodeId: e.spec.episodeId, seed: e.spec.seed, task: e.spec.task, versions: input.versions },
                  meta: { ...e.spec, runId, step, split: 'train', mode: 'batched' },
                });
              } catch (err) {
                if (!(err instanceof CarriedOver)) throw err;
              } finally {
                replayedTokens += gen.replayedTokens();
                lock.finish(i);
              }
            }),
          ),
      );
      const whole = lock.wholeGroups();
      const trained: StoredEpisode[] = [];
      const carried: CarriedEpisode[] = [];
      // A step's groups are told apart by their index: whole groups are numbered in order (carried ones first).
      const renumbered = new Map<string, number>();
      all.forEach((e, i) => {
        const done = ended[i];
        const key = groupKey(e.fromStep, e.spec.groupIndex);
        if (done && whole.has(key)) {
          if (!renumbered.has(key)) renumbered.set(key, renumbered.size);
          trained.push({ ...done, meta: { ...done.meta, groupIndex: renumbered.get(key)! } });
        } else
          carried.push({
            spec: e.spec,
            fromStep: e.fromStep,
            carries: e.carries + 1,
            ...(done ? { finished: done } : {}),
            generations: done ? [] : records[i]!,
          });
      });
      return commitPartialRollout(sql, {
        runId,
        step,
        trained,
        carried,
        result: {
          episodes: trained.length,
          failed: trained.filter((e) => e.trajectory.status === 'failed').length,
          groups: whole.size,
          carried: carried.length,
          carriedGroups: new Set(carried.map((e) => groupKey(e.fromStep, e.spec.groupIndex))).size,
          carriedMaxAge: Math.max(0, ...carried.map((e) => step + 1 - e.fromStep)),
          trainedMaxAge: Math.max(0, ...all.filter((e) => whole.has(groupKey(e.fromStep, e.spec.groupIndex))).map((e) => step - e.fromStep)),
          heldGroups: held.size,
          generatedTokens,
          replayedTokens,
          rounds: lock.rounds,
        },
      });
    },

    /**
     * The update of one model for one step, committed exactly once: a retry
     * (or a second execution after a resume) finds the commit and returns it.
     */
    async updateModel(
      input: TeamRef & {
        runId: string;
        step: number;
        model: string;
        baseVersion: number;
        settings: ResolvedTraining;
        nonFinite: 'skip' | 'reduce-lr' | 'fail';
        /** The step's rollout, committed with the update so a step that is committed always has it. */
        rollout: { seconds: number; episodes: number; failed: number };
        /** Asynchronous runs (staleness > 0): the model's correction against the base version (off-policy.ts). */
        offPolicy?: OffPolicySetting;
      },
    ): Promise<UpdateResult> {
      const { runId, step, model } = input;
      const episodes = await loadStepEpisodes(sql, runId, step, 'train');
      const batch = buildStepBatch(episodes, input.settings);
      const done = await versionOfStep(sql, runId, model, step);
      if (done) return { version: done.version, committed: false, metrics: done.metrics, rewards: batch.rewards };

      const modelSettings = input.settings.models[model]!;
      const sequences = batch.models[model] ?? [];
      const agents = agentsOfModel(loadTeam(input.team, input.teamOptions), model, batch);
      const skip = async (reason: string, detail: Record<string, unknown> = {}) => {
        // The step's rewards and endings are kept even without an update: they say why there was none.
        await writeMetrics(
          sql,
          runId,
          agentRows(batch, agents.acted).map((r) => ({ ...r, step })),
        );
        await recordEvent(sql, { runId, step, kind: 'update-skipped', detail: { model, reason, ...detail } });
        return { version: input.baseVersion, committed: false, skipped: reason, metrics: {}, rewards: batch.rewards };
      };
      const untrainable = skipReason(sequences);
      if (untrainable) return skip(untrainable);

      const key = modelKey(runId, model);
      const refLogprobs = needsReference(modelSettings) ? await score(runId, model, 0, sequences) : undefined;
      const onPolicy = updateSamples(sequences, refLogprobs);
      // A stale rollout: the base version scores the tokens (the proximal policy), off-policy.ts weights them.
      const corrected =
        input.offPolicy &&
        offPolicyCorrection(sequences, onPolicy, await score(runId, model, input.baseVersion, sequences), input.baseVersion, input.offPolicy);
      const samples = corrected ? corrected.samples : onPolicy;
      const request = (attempt: UpdateAttempt) => updateRequest({ runId, model, step, baseVersion: input.baseVersion }, samples, modelSettings, attempt);
      // The engine's progress goes out with the heartbeats (visible in the Web UI's pending activity).
      let progress: UpdateProgress | undefined;
      const send = (req: UpdateRequest) => {
        const e = engine();
        return e.updateStream ? e.updateStream(req, (p) => void (progress = p)) : e.update(req);
      };
      // The engine's answer, or the step skipped after a non-finite update.
      const updated = await heartbeating(
        () => ({ phase: 'update', ...(progress ? { engine: progress } : {}) }),
        async (): Promise<UpdateResponse | UpdateResult> => {
          try {
            return await withVersion(runId, model, input.baseVersion, () => send(request(FIRST_ATTEMPT)));
          } catch (e) {
            if (reasonOf(e) !== 'NON_FINITE_UPDATE') throw e;
            const message = (e as Error).message;
            await recordEvent(sql, { runId, step, kind: 'non-finite-update', detail: { model, message, policy: input.nonFinite } });
            if (input.nonFinite === 'fail')
              throw ApplicationFailure.nonRetryable(
                `step ${step}, model ${model}: non-finite update (${message}); the run's nonFinite policy is 'fail'`,
                'NonFiniteUpdate',
              );
            if (input.nonFinite === 'skip') return skip('non-finite', { message });
            try {
              return await withVersion(runId, model, input.baseVersion, () => send(request(REDUCED_LR)));
            } catch (e2) {
              if (reasonOf(e2) !== 'NON_FINITE_UPDATE') throw e2;
              return skip('non-finite after reducing lr', { message: (e2 as Error).message });
            }
          }
        },
      );
      if (!('info' in updated)) return updated;
      const res = updated;
      const exported = await engine().exportVersion({ modelKey: key, version: res.info.version });
      const metrics = updateMetrics(res, corrected?.model);
      const rows = updateRows(model, metrics, input.rollout, batch, agents, corrected?.agents);
      const commit = await commitUpdate(sql, checkpoints, {
        version: {
          runId,
          model,
          version: res.info.version,
          step,
          spec: exported.info.spec,
          weights: exported.weights,
          optimizerState: exported.optimizerState,
          sha256: exported.info.weightsSha256,
          metrics,
        },
        metrics: rows.filter((r) => Number.isFinite(r.value)),
        stepMetrics: { counts: batch.counts, [`update.${model}`]: metrics },
        settings: { [model]: modelSettings },
        advantages: batch.turnAdvantages.filter((a) => a.model === model),
      });
      return { version: commit.version.version, committed: commit.committed, metrics: commit.version.metrics, rewards: batch.rewards };
    },
  });

  /** The log-probs of the sequences' tokens under a version of the model (engine Score). */
  async function score(runId: string, model: string, version: number, sequences: UpdateSequence[]): Promise<number[][]> {
    const res = await withVersion(runId, model, version, () => engine().score(scoreRequest(modelKey(runId, model), version, sequences)));
    return res.sequences.map((q) => q.logprobs);
  }
}

export type TrainingPoolActivities = ReturnType<typeof createTrainingPoolActivities>;
