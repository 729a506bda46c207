/**
 * The step batch (batch.ts) of a step, built once per pool worker and shared by
 * that step's updateModel activities, one per model, which run at the same time.
 * Without it each model's activity loaded every episode of the step and
 * computed every agent's advantages again. The batch is a pure function of the
 * step's stored episodes and the run's optimizer settings, so a shared one is
 * the one each activity would have built.
 *
 * Kept: the last KEEP steps (several runs may share a pool worker), each until
 * a newer step pushes it out; a failed build is forgotten, so a retry builds
 * again. Workers on other hosts build their own.
 */
import type { Sql } from '../../infra/db';
import type { ResolvedTraining } from '../../schema/run-config';
import { loadStepEpisodes } from '../store/trajectories';
import { type StepBatch, buildStepBatch } from './batch';

const KEEP = 2;

export interface StepBatches {
  /** The train-split batch of (runId, step) under `settings`. */
  get(runId: string, step: number, settings: ResolvedTraining): Promise<StepBatch>;
}

export function stepBatches(sql: Sql, keep = KEEP): StepBatches {
  // insertion order is age: the first key is the oldest
  const built = new Map<string, Promise<StepBatch>>();
  return {
    get(runId, step, settings) {
      // the settings the batch reads (a resumed run may change them between attempts)
      const key = JSON.stringify([runId, step, settings.models, settings.agents]);
      const have = built.get(key);
      if (have) return have;
      const batch = loadStepEpisodes(sql, runId, step, 'train').then((episodes) => buildStepBatch(episodes, settings));
      built.set(key, batch);
      void batch.catch(() => {
        if (built.get(key) === batch) built.delete(key);
      });
      for (const old of built.keys()) if (built.size > keep) built.delete(old);
      return batch;
    },
  };
}
