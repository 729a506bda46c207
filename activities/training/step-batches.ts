/**
 * The step batch (batch.ts) of a step, built once per pool worker and shared by
 * that step's updateModel activities, one per model, which run at the same time.
 * Without it each model's activity loaded every episode of the step and
 * computed every agent's advantages again. The batch is a pure function of the
 * step's stored episodes and the run's optimizer settings, so a shared one is
 * the one each activity would have built.
 *
 * Read ahead: when this worker's rollouts have stored every episode of a step,
 * the step is read back and its batch built (with the run's settings of its
 * last update here) at once, while the workflow moves from the rollout to the
 * update, instead of inside the update. The read is the same query an update
 * would make, after the last episode was committed, so the batch is the same;
 * an update whose settings differ builds its own. Workers that did not run the
 * whole step (a rollout split across workers, another train pool, a restart)
 * read when asked, as before.
 *
 * Kept: the last KEEP steps (several runs may share a pool worker, an
 * asynchronous run's rollouts may be a few steps ahead), each until a newer
 * step pushes it out; a failed read or build is forgotten, so a retry builds
 * again. Workers on other hosts build their own.
 */
import { setNewest } from '../../infra/bounded-map';
import type { Sql } from '../../infra/db';
import type { ResolvedTraining } from '../../schema/run-config';
import { loadStepEpisodes, type StoredEpisode } from '../store/trajectories';
import { type StepBatch, buildStepBatch } from './batch';

const KEEP = 4;

export interface StepBatches {
  /** The train-split batch of (runId, step) under `settings`. */
  get(runId: string, step: number, settings: ResolvedTraining): Promise<StepBatch>;
  /** That batch where this worker has it built or building (read ahead); never reads. */
  peek(runId: string, step: number, settings: ResolvedTraining): Promise<StepBatch> | undefined;
  /**
   * A rollout on this worker stored episodes [from, to) of the `total` of a train step. The part
   * that completes the step starts the read ahead and returns it (it never rejects: a failed one is
   * forgotten); other parts return undefined.
   */
  stored(runId: string, step: number, from: number, to: number, total: number): Promise<void> | undefined;
}

/** A bounded map whose insertion order is age; a rejected promise is forgotten. */
function promises<T>(keep: number) {
  const kept = new Map<string, Promise<T>>();
  return {
    get: (key: string) => kept.get(key),
    delete: (key: string) => kept.delete(key),
    set(key: string, value: Promise<T>) {
      void value.catch(() => {
        if (kept.get(key) === value) kept.delete(key);
      });
      return setNewest(kept, key, value, keep);
    },
  };
}

export interface StepBatchesOptions {
  /** Steps kept (default KEEP). */
  keep?: number;
  /** Told of each batch read ahead (scores-ahead.ts starts the proximal Score of an asynchronous step). */
  onReadAhead?: (runId: string, step: number, batch: Promise<StepBatch>) => void;
}

export function stepBatches(sql: Sql, { keep = KEEP, onReadAhead }: StepBatchesOptions = {}): StepBatches {
  const built = promises<StepBatch>(keep);
  // a step's episodes read ahead, until a batch is built from them
  const read = promises<StoredEpisode[]>(keep);
  // per run: the settings of its last update here (a run's settings change only between steps, by setOptimizer)
  const lastSettings = new Map<string, ResolvedTraining>();
  // per step: the parts [from, to) this worker's rollouts stored, until they cover the step
  const parts = new Map<string, Array<[number, number]>>();
  const stepKey = (runId: string, step: number) => JSON.stringify([runId, step]);

  // the settings the batch reads (a resumed run may change them between attempts)
  const batchKey = (runId: string, step: number, settings: ResolvedTraining) => JSON.stringify([runId, step, settings.models, settings.agents]);
  const get = (runId: string, step: number, settings: ResolvedTraining) => {
    const key = batchKey(runId, step, settings);
    const have = built.get(key);
    if (have) return have;
    const sk = stepKey(runId, step);
    const episodes = read.get(sk) ?? loadStepEpisodes(sql, runId, step, 'train');
    read.delete(sk);
    return built.set(
      key,
      episodes.then((e) => buildStepBatch(e, settings)),
    );
  };

  return {
    get(runId, step, settings) {
      setNewest(lastSettings, runId, settings, keep);
      return get(runId, step, settings);
    },
    peek: (runId, step, settings) => built.get(batchKey(runId, step, settings)),
    stored(runId, step, from, to, total) {
      const sk = stepKey(runId, step);
      const have = [...(parts.get(sk) ?? []), [from, to] as [number, number]].sort((a, b) => a[0] - b[0]);
      let covered = 0;
      for (const [f, t] of have) if (f <= covered) covered = Math.max(covered, t);
      if (covered < total) {
        setNewest(parts, sk, have, keep);
        return undefined;
      }
      parts.delete(sk);
      const settings = lastSettings.get(runId);
      let ahead: Promise<unknown>;
      if (settings) {
        const batch = get(runId, step, settings);
        onReadAhead?.(runId, step, batch);
        ahead = batch;
      } else ahead = read.set(sk, loadStepEpisodes(sql, runId, step, 'train'));
      return ahead.then(
        () => undefined,
        () => undefined,
      );
    },
  };
}
