/**
 * The proximal Score of an asynchronous run's next update, started ahead.
 *
 * A stale step's update first scores its batch under its base version (the
 * proximal policy, off-policy.ts), then updates. That base is the version the
 * update before it made. So the Score of step t's batch under the version the
 * update of step t − 1 made starts here as soon as both exist: when that update
 * is past its export, if step t's batch was read ahead already (step-batches.ts;
 * a rollout shorter than the update), else when it is read ahead (a rollout
 * longer than the update). It runs while the version is committed, the rollout
 * is stored and the workflow moves on to the update, instead of inside it.
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
import { setNewest } from '../../infra/bounded-map';
import type { StepBatch, UpdateSequence } from './batch';
import type { EngineVersions } from './engine-versions';

const KEEP = 4;

export interface ScoresAhead {
  /** An update of (runId, step) begins its engine work; the function it returns says it is over (idempotent). */
  updating(runId: string, step: number): () => void;
  /** The update of `step` made `version` of `model` (its export is done); `next`: step + 1's batch, where this worker has it. */
  made(runId: string, step: number, model: string, version: number, next: Promise<StepBatch> | undefined): void;
  /** `step`'s batch was read ahead on this worker. */
  readAhead(runId: string, step: number, batch: Promise<StepBatch>): void;
  /** The log-probs of `sequences` under `version`: the Score started ahead where it scored these very sequences, else a new one. */
  score(runId: string, model: string, version: number, sequences: UpdateSequence[]): Promise<number[][]>;
}

interface Ahead {
  version: number;
  batch: Promise<StepBatch>;
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
  // per run: the versions its last step's updates made here
  const madeAt = new Map<string, { step: number; versions: Map<string, number> }>();

  /** Scores `model`'s sequences of step + 1's `batch` under the `version` the update of `step` made. */
  function start(runId: string, step: number, model: string, version: number, batch: Promise<StepBatch>) {
    const key = keyOf(runId, model);
    const have = ahead.get(key);
    if (have?.version === version && have.batch === batch) return; // started by the other trigger
    const gate = idle(keyOf(runId, String(step)));
    const sequences = Promise.all([batch, gate]).then(
      ([b]) => b.models[model],
      () => undefined,
    );
    const logprobs = sequences.then((s) => (s && s.length > 0 ? versions.score(runId, model, version, s).catch(() => undefined) : undefined));
    setNewest(ahead, key, { version, batch, sequences, logprobs }, keep);
  }

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
    made(runId, step, model, version, next) {
      const at = madeAt.get(runId);
      if (at?.step === step) at.versions.set(model, version);
      else setNewest(madeAt, runId, { step, versions: new Map([[model, version]]) }, keep);
      if (next) start(runId, step, model, version, next);
    },
    readAhead(runId, step, batch) {
      const at = madeAt.get(runId);
      if (at?.step === step - 1) for (const [model, version] of at.versions) start(runId, at.step, model, version, batch);
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
