/**
 * Dynamic batching of Generate calls. Calls with the same group key join an
 * open group (the engine's key: the (model, version), or the spec for LoRA
 * models, whose rows each run on their own adapter); the group is handed to the device queue `windowMs` after its
 * first call (or at once when it reaches `maxBatch` rows) and keeps accepting
 * callers until the device actually starts it — so under load, batches grow to
 * whatever arrived while the previous run was executing.
 *
 * Coalescing cannot change anyone's result: each row carries its own sampling
 * settings and Philox key, and the graphs are row-independent (see
 * engines/onnx/README.md, "Batch invariance").
 */
import type { GenerateRow, GenerateRowResult } from './model-runtime';
import type { DeviceQueue } from './device-queue';

export interface GenerateJob {
  rows: GenerateRow[];
  /** the weights its rows run on (a group's jobs share one, but for runtimes with generateMixed) */
  theta: Float32Array;
  /** null = aborted before it reached the device (Engine.abort) */
  resolve(results: Array<GenerateRowResult | null>): void;
  reject(err: unknown): void;
}

/** Runs a closed group: all rows of its jobs, in ≤ maxBatch-row chunks. */
export type GroupRunner<C> = (ctx: C, jobs: GenerateJob[]) => Promise<void>;

interface Group<C> {
  key: string;
  ctx: C;
  jobs: GenerateJob[];
  rows: number;
  timer?: NodeJS.Timeout;
  scheduled: boolean;
}

export class GenerateBatcher<C> {
  private readonly open = new Map<string, Group<C>>();
  /** The group of each job not yet started (for withdraw). */
  private readonly groupOf = new Map<GenerateJob, Group<C>>();
  private pendingJobs = 0;

  constructor(
    private readonly queue: DeviceQueue,
    private readonly opts: { windowMs: number; maxBatch: number },
    private readonly runner: GroupRunner<C>,
  ) {}

  /** Calls waiting in open groups (not yet started on the device). */
  get waiting(): number {
    return this.pendingJobs;
  }

  submit(key: string, ctx: C, job: GenerateJob): void {
    let g = this.open.get(key);
    if (!g) {
      g = { key, ctx, jobs: [], rows: 0, scheduled: false };
      this.open.set(key, g);
    }
    g.jobs.push(job);
    g.rows += job.rows.length;
    this.groupOf.set(job, g);
    this.pendingJobs++;
    if (g.rows >= this.opts.maxBatch) {
      this.open.delete(key); // full: later callers start a new group
      this.schedule(g);
    } else if (!g.scheduled && !g.timer) {
      const group = g;
      g.timer = setTimeout(() => this.schedule(group), this.opts.windowMs);
    }
  }

  /**
   * Takes a job that has not started out of its group (Engine.abort): its rows no longer
   * count towards the group's size nor the queue depth; a group left empty is dropped.
   * False when the job has started (or is unknown).
   */
  withdraw(job: GenerateJob): boolean {
    const g = this.groupOf.get(job);
    if (!g) return false;
    this.groupOf.delete(job);
    g.jobs.splice(g.jobs.indexOf(job), 1);
    g.rows -= job.rows.length;
    this.pendingJobs--;
    if (g.jobs.length === 0 && !g.scheduled) {
      if (g.timer) clearTimeout(g.timer);
      if (this.open.get(g.key) === g) this.open.delete(g.key);
    }
    return true;
  }

  private schedule(g: Group<C>): void {
    if (g.timer) clearTimeout(g.timer);
    g.timer = undefined;
    if (g.scheduled) return;
    g.scheduled = true;
    void this.queue
      .run(async () => {
        if (this.open.get(g.key) === g) this.open.delete(g.key); // close: no more joiners
        this.pendingJobs -= g.jobs.length;
        for (const j of g.jobs) this.groupOf.delete(j);
        // jobs whose callers went away or were aborted were withdrawn
        if (g.jobs.length > 0) await this.runner(g.ctx, g.jobs);
      })
      .catch((err) => {
        for (const j of g.jobs) j.reject(err);
      });
  }
}
