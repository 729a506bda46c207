/**
 * The proximal Score of an asynchronous run's next update, started ahead.
 *
 * A stale step's update first scores its batch under its base version (the
 * proximal policy, off-policy.ts), then updates. That base is the version the
 * update before it just made, and with staleness the next step's rollout has
 * often finished by then (its batch read ahead, step-batches.ts). So the
 * update that makes a version starts the next step's Score under it at once,
 * and the Score runs while the version is committed and the workflow moves on
 * to the next update, instead of inside that update.
 *
 * A Score ahead waits until every update of the step on this worker is past
 * its engine work (another model's Update and export would otherwise queue
 * behind it in the engine: the step's commit comes first).
 *
 * A Score is a pure function of the version's weights and the tokens (the
 * engines' row invariance), so the one started ahead is the one the update
 * would make. It is used only for the very sequences it scored (the same
 * batch object) under the same version; anything else, or a Score ahead that
 * failed, scores anew.
 */
import type { StepBatch, UpdateSequence } from './batch';
import type { EngineVersions } from './engine-versions';

const KEEP = 4;

export interface ScoresAhead {
  /** An update of (runId, step) begins its engine work; the function it returns says it is over (idempotent). */
  updating(runId: string, step: number): () => void;
  /** Scores `model`'s sequences of `batch` under `version` (made by the update of `step`), for the run's next update of the model. */
  start(runId: string, step: number, model: string, version: number, batch: Promise<StepBatch>): void;
  /** The log-probs of `sequences` under `version`: the Score started ahead where it scored these very sequences, else a new one. */
  score(runId: string, model: string, version: number, sequences: UpdateSequence[]): Promise<number[][]>;
}

interface Ahead {
  version: number;
  sequences: Promise<UpdateSequence[] | undefined>;
  logprobs: Promise<number[][] | undefined>;
}

export function scoresAhead(versions: Pick<EngineVersions, 'score'>, keep = KEEP): ScoresAhead {
  // per (run, model): the one Score ahead; insertion order is age
  const ahead = new Map<string, Ahead>();
  const keyOf = (runId: string, model: string) => `${runId}\u0000${model}`;
  // per (run, step): updates still at their engine work, and the Scores ahead waiting for them
  const busy = new Map<string, { updates: number; waiting: Array<() => void> }>();
  const idle = (key: string) => {
    const b = busy.get(key);
    return b ? new Promise<void>((resolve) => b.waiting.push(resolve)) : Promise.resolve();
  };
  return {
    updating(runId, step) {
      const key = keyOf(runId, String(step));
      const b = busy.get(key) ?? { updates: 0, waiting: [] };
      busy.set(key, b);
      b.updates++;
      let over = false;
      return () => {
        if (over) return;
        over = true;
        if (--b.updates > 0) return;
        busy.delete(key);
        for (const go of b.waiting) go();
      };
    },
    start(runId, step, model, version, batch) {
      const gate = idle(keyOf(runId, String(step)));
      const sequences = Promise.all([batch, gate]).then(
        ([b]) => b.models[model],
        () => undefined,
      );
      const logprobs = sequences.then((s) => (s && s.length > 0 ? versions.score(runId, model, version, s).catch(() => undefined) : undefined));
      const key = keyOf(runId, model);
      ahead.delete(key);
      ahead.set(key, { version, sequences, logprobs });
      for (const old of ahead.keys()) if (ahead.size > keep) ahead.delete(old);
    },
    async score(runId, model, version, sequences) {
      const key = keyOf(runId, model);
      const a = ahead.get(key);
      if (a?.version === version && (await a.sequences) === sequences) {
        ahead.delete(key);
        const logprobs = await a.logprobs;
        if (logprobs) return logprobs;
      }
      return versions.score(runId, model, version, sequences);
    },
  };
}
