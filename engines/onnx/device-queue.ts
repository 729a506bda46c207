/**
 * FIFO of device work. `session.run` blocks the JS thread for the whole run, so
 * runs cannot overlap anyway; one queue makes the order explicit, lets a
 * generate group stay open (and keep absorbing callers) until the device is
 * actually free, and gives Stats a queue depth. A task may be many device runs
 * (a spec's sessions and batch-invariance probe, a batch split by memory):
 * each one the task reports (`worked`) counts as progress, as does each task's end.
 */
export class DeviceQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private waiting = 0;
  private running = false;
  private finished = 0;
  private work = 0;

  /** Tasks finished (or failed) and device work done inside them so far: the engine's progress, reported in Health. */
  get completed(): number {
    return this.finished + this.work;
  }

  /** One piece of device work done (a session built, a run ended) inside the running task. */
  worked(): void {
    this.work++;
  }

  /** Tasks queued or running. */
  get depth(): number {
    return this.waiting + (this.running ? 1 : 0);
  }

  run<T>(task: () => Promise<T>): Promise<T> {
    this.waiting++;
    const result = this.tail.then(async () => {
      this.waiting--;
      this.running = true;
      try {
        return await task();
      } finally {
        this.running = false;
        this.finished++;
      }
    });
    this.tail = result.catch(() => undefined);
    return result;
  }
}
