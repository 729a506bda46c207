/**
 * Pool-queue activities of a training run, served next to an engine: turns of
 * durable episodes, batched rollouts, version 0, and the exactly-once update.
 * Each is a module: engine-versions.ts (the engine as a cache of the store's
 * versions), init-model.ts, rollout.ts, partial-rollout.ts, update-model.ts
 * (with step-batches.ts: a step's batch built once for all its models, and
 * scores-ahead.ts: an asynchronous step's proximal Score started early).
 *
 * The engine is a cache of versions; Postgres is the truth. Any call that
 * finds its version missing (engine restarted, another host) loads it from
 * the store and retries, so a pool worker or engine can die at any moment.
 */
import type { GenerateCall, GenerateReply } from '../../agents/episode';
import type { Sql } from '../../infra/db';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import type { TeamRef } from './control';
import { withEngineFailures } from './engine-work';
import { type EngineApi, engineVersions } from './engine-versions';
import type { EpisodeThreads } from './episode-threads';
import { type HfTargetsOf, initModel, type InitModelInput } from './init-model';
import { rolloutPartial, type RolloutPartialInput } from './partial-rollout';
import { readCheckpointTokenizers } from './pretrained';
import { episodeRunner, rolloutBatch, type RolloutBatchInput } from './rollout';
import { sftDatasets } from './sft';
import { scoresAhead } from './scores-ahead';
import { stepBatches } from './step-batches';
import { updateModel, type UpdateModelInput } from './update-model';

export { type EngineApi, generateOne } from './engine-versions';
export type { UpdateResult } from './update-model';

export interface PoolDeps {
  sql: Sql;
  engine: () => EngineApi;
  /** Where versions above the inline limit keep their bytes. */
  checkpoints: CheckpointStore;
  /** Threads for batched episodes (a pool worker's); without them episodes run on the calling thread. */
  episodes?: EpisodeThreads;
  /** The layout of a LoRA adapter over a transformers-layout model, to import a PEFT adapter as its version 0. */
  hfTargets?: HfTargetsOf;
}

export function createTrainingPoolActivities({ sql, engine, checkpoints, episodes, hfTargets }: PoolDeps) {
  readCheckpointTokenizers();
  const versions = engineVersions({ sql, engine, checkpoints });
  const runOne = episodeRunner(episodes);
  const ahead = scoresAhead(versions);
  const batches = stepBatches(sql, { onReadAhead: (runId, step, batch) => ahead.readAhead(runId, step, batch) });
  const sftData = sftDatasets(sql);

  return withEngineFailures({
    /** One generation segment of a durable episode's turn. */
    async generateTurn(input: TeamRef & { runId: string; call: GenerateCall }): Promise<GenerateReply> {
      return versions.generate(input.runId, input.call);
    },

    /** Version 0 of a model, from its checkpoint or else the run seed; stored once, a repeat is a no-op. */
    async initModel(input: InitModelInput) {
      return initModel({ sql, engine, checkpoints, hfTargets }, input);
    },

    /** Many episodes in this process against the engine (batched mode), stored as they finish (rollout.ts). */
    async rolloutBatch(input: RolloutBatchInput) {
      return rolloutBatch({ sql, versions, runOne, batches }, input);
    },

    /** A step's partial rollout (batched mode): whole groups trained, the rest carried (partial-rollout.ts). */
    async rolloutPartial(input: RolloutPartialInput) {
      return rolloutPartial({ sql, versions, runOne }, input);
    },

    /** The update of one model for one step, committed exactly once (update-model.ts). */
    async updateModel(input: UpdateModelInput) {
      return updateModel({ sql, engine, checkpoints, versions, batches, ahead, sftData }, input);
    },
  });
}

export type TrainingPoolActivities = ReturnType<typeof createTrainingPoolActivities>;
