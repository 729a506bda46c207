/**
 * When an engine is hung: a device run has been in progress for `hangMs`, or the engine
 * has not answered for that long. The engine runs one device run at a time and answers
 * Health only between runs (onnxruntime's `session.run` blocks its thread), so a busy or
 * CPU-starved engine answers late, not never: each Health ask waits until the hang
 * deadline, and a late answer that shows a finished run is progress. A long queue is not
 * a hang while its runs keep finishing. Pure (times are passed in), for the watchdog in
 * gpu-workers/engine-process.ts.
 */
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

  /** `servingSince`: when the engine started serving; its first run is measured from there. */
  constructor(
    private readonly hangMs: number,
    servingSince: number,
  ) {
    this.progressAt = servingSince;
  }

  /** How long a Health asked at `now` may take: until the hang deadline, at least `minMs`. */
  askTimeoutMs(now: number, minMs: number): number {
    return Math.max(minMs, this.progressAt + this.hangMs - now);
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

  /** Milliseconds since the last progress. */
  stalledMs(now: number): number {
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
