/**
 * The trainer's side of the engine on a second thread: Score and Update. `session.run`
 * holds the JS thread for the whole run, so on one thread an Update (and the Scores
 * an update step sends first: reference, proximal policy) waits for every Generate run
 * queued before it and they for it; with staleness ≥ 1 a step's rollout and the
 * previous step's update are meant to overlap (docs/running.md, "Asynchronous RL").
 * The thread (trainer-worker.ts) builds its own sessions of a spec with the engine's
 * row policy and session settings, so its results are the bits the engine's own
 * thread gives. The engine sends it one call at a time, in order (its train queue).
 *
 * The thread holds a copy of the version's θ (and, for an update, AdamW moments)
 * while a call runs; results come back without a copy.
 */
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { EngineFault, type ErrorReason } from '../protocol/errors';
import type { ModelSpec } from '../families/model-family';
import type { MemoryPolicy, ModelRuntime, OptimState, RowPolicy, ScoreSequence, UpdateSample, UpdateSettings } from './model-runtime';
import type { UpdateStepResult } from './update-step';

/** What every session of the thread is built with (the engine's own settings). */
export interface ThreadSettings {
  device: string;
  intraOpThreads: number;
  memory: MemoryPolicy;
}

/** A spec and its probed row policy: what the thread builds a runtime for. */
export interface SpecRows {
  spec: ModelSpec;
  rows: RowPolicy;
}

export type ScoreResult = Awaited<ReturnType<ModelRuntime['score']>>;

export type ThreadJob = SpecRows & { id: number } & (
    | { kind: 'score'; theta: Float32Array; seqs: ScoreSequence[] }
    | { kind: 'update'; state: OptimState; samples: UpdateSample[]; settings: UpdateSettings; baseLogprobs?: Float32Array[] }
  );

export interface ThreadError {
  message: string;
  reason?: ErrorReason;
  details?: Record<string, unknown>;
}

export type FromThread =
  | { kind: 'worked' }
  | { kind: 'training'; id: number }
  | { kind: 'done'; id: number; result: UpdateStepResult | ScoreResult }
  | { kind: 'failed'; id: number; error: ThreadError };

interface Pending {
  resolve: (r: never) => void;
  reject: (e: unknown) => void;
  training: () => void;
}

type Job<K extends ThreadJob['kind']> = Omit<Extract<ThreadJob, { kind: K }>, 'id' | 'kind'>;

export class TrainerThread {
  private worker?: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;

  /** `worked` hears each session built and each run ended on the thread (the engine's progress). */
  constructor(
    private readonly settings: ThreadSettings,
    private readonly worked: () => void,
  ) {}

  /** The update's result, computed on the thread; `training` is called when its Score of the base is done. */
  update(job: Job<'update'>, training: () => void): Promise<UpdateStepResult> {
    return this.send({ ...job, kind: 'update' }, training);
  }

  score(job: Job<'score'>): Promise<ScoreResult> {
    return this.send({ ...job, kind: 'score' }, () => undefined);
  }

  private send<R>(job: Omit<ThreadJob, 'id'>, training: () => void): Promise<R> {
    const worker = this.worker ?? this.start();
    const id = this.nextId++;
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (r: never) => void, reject, training });
      worker.ref(); // a caller awaiting only this call keeps the process alive
      worker.postMessage({ ...job, id });
    });
  }

  /** Ends the thread; updates still on it fail. */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    if (w) await w.terminate();
  }

  private start(): Worker {
    // The engine runs TypeScript through tsx; a worker starts with a bare module loader, so it registers tsx first.
    const boot = `require(${JSON.stringify(require.resolve('tsx/cjs'))}); require(${JSON.stringify(path.join(__dirname, 'trainer-worker.ts'))});`;
    const worker = new Worker(boot, { eval: true, workerData: this.settings });
    worker.unref();
    worker.on('message', (m: FromThread) => this.heard(m));
    const lost = (why: string) => {
      if (this.worker === worker) this.worker = undefined; // the next update starts a new thread
      const err = new Error(`the engine's update thread ${why}`);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    worker.on('error', (e) => lost(`failed: ${e.message}`));
    worker.on('exit', (code) => lost(`exited (code ${code})`));
    this.worker = worker;
    return worker;
  }

  private heard(m: FromThread): void {
    if (m.kind === 'worked') return this.worked();
    const p = this.pending.get(m.id);
    if (!p) return;
    if (m.kind === 'training') return p.training();
    this.pending.delete(m.id);
    if (this.pending.size === 0) this.worker?.unref();
    if (m.kind === 'done') p.resolve(m.result as never);
    else p.reject(m.error.reason === undefined ? new Error(m.error.message) : new EngineFault(m.error.reason, m.error.message, m.error.details));
  }
}
