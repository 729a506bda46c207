/**
 * When an engine is hung: a device run has been in progress for `hangMs`, or the engine
 * has not answered for that long. The engine runs one device run at a time and answers
 * Health only between runs (onnxruntime's `session.run` blocks its thread), so a busy or
 * CPU-starved engine answers late, not never: each Health ask waits until the hang
 * deadline, and a late answer that shows a finished run is progress. A long queue is not
 * a hang while its runs keep finishing. One device run may take longer than the limit (an
 * Update over a large vocabulary on a slow host): while the engine's CPU time keeps advancing
 * it is at work, not hung, for at most BUSY_LIMIT_FACTOR limits since its last progress; a
 * stopped, deadlocked or waiting engine uses no CPU and is found hung as before. Pure (times
 * are passed in), for the watchdog in gpu-workers/engine-process.ts.
 */

/** A device run that keeps the engine busy counts as progress for at most this many hang limits (default 20 s × 15 = 5 min). */
export const BUSY_LIMIT_FACTOR = 15;

/** The share of one core an engine must have used since the previous sample to count as busy. */
export const BUSY_CPU_SHARE = 0.2;
export interface HealthProgress {
  /** device runs finished so far */
  deviceRuns: number;
  /** requests queued or running */
  queueDepth: number;
}

export class HangWatch {
  /** when the current device run started at the latest (or the engine was last seen idle) */
  private progressAt: number;
  private runs: number | undefined;
  private depth = 0;
  /** when the engine was last seen busy (its CPU time advancing) within BUSY_LIMIT_FACTOR limits of its last progress */
  private busyAt = -Infinity;

  /** `servingSince`: when the engine started serving; its first run is measured from there. */
  constructor(
    private readonly hangMs: number,
    servingSince: number,
  ) {
    this.progressAt = servingSince;
  }

  /** How long a Health asked at `now` may take: until the hang deadline, at least `minMs`. */
  askTimeoutMs(now: number, minMs: number): number {
    return Math.max(minMs, this.lastSign() + this.hangMs - now);
  }

  /**
   * A CPU sample at `at`: the engine used `cpuSeconds` of CPU in the `wallSeconds` since the
   * previous one. Busy (at least BUSY_CPU_SHARE of a core) counts as a sign of work, within
   * BUSY_LIMIT_FACTOR limits of the last real progress.
   */
  cpu(at: number, cpuSeconds: number, wallSeconds: number): void {
    if (wallSeconds > 0 && cpuSeconds >= BUSY_CPU_SHARE * wallSeconds && at - this.progressAt < this.hangMs * BUSY_LIMIT_FACTOR) this.busyAt = at;
  }

  private lastSign(): number {
    return Math.max(this.progressAt, this.busyAt);
  }

  /**
   * A Health answer received at `at`. Its first answer, an idle engine, or a device run
   * finished since the previous answer is progress: the run now in progress (if any)
   * started no later than `at`.
   */
  answered(at: number, h: HealthProgress): void {
    if (this.runs === undefined || h.queueDepth === 0 || h.deviceRuns !== this.runs) this.progressAt = Math.max(this.progressAt, at);
    this.runs = h.deviceRuns;
    this.depth = h.queueDepth;
  }

  /** Milliseconds since the last progress or sign of work. */
  stalledMs(now: number): number {
    return now - this.lastSign();
  }

  /** Milliseconds since the last progress (a finished run, an idle engine): busy time included. */
  sinceProgressMs(now: number): number {
    return now - this.progressAt;
  }

  /** Device runs finished at the last answer (-1: none answered yet). */
  get deviceRuns(): number {
    return this.runs ?? -1;
  }

  /** Requests queued or running at the last answer. */
  get queueDepth(): number {
    return this.depth;
  }

  hung(now: number): boolean {
    return this.stalledMs(now) >= this.hangMs;
  }
}
