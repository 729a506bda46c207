/**
 * A worker process's own event loop: how late it runs (for /healthz), and a
 * watchdog for when it does not run at all. A synchronous loop in code the
 * worker runs (a user's tool, a reward that never returns) blocks every
 * activity, heartbeat and poll of the process; the process can neither notice
 * nor recover from inside. The watchdog is a worker thread, which keeps running
 * while the main thread is blocked: the main thread stamps a shared clock every
 * second, and when the stamp is older than the limit the thread writes why to
 * stderr and kills the process, so that whoever restarts it (`troupe up`'s
 * supervisor, systemd, Kubernetes) starts a fresh one. The activity it held
 * times out on heartbeats and retries elsewhere.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';

/** Event-loop delay in the last window: what /healthz reports, and whether the loop is too slow to be ready. */
export function eventLoopLag(windowMs = 10_000): () => { eventLoopLagMs: number } {
  const h = monitorEventLoopDelay({ resolution: 20 });
  h.enable();
  let last = 0;
  let at = Date.now();
  return () => {
    if (Date.now() - at >= windowMs) {
      last = h.max / 1e6;
      h.reset();
      at = Date.now();
    }
    return { eventLoopLagMs: Math.round(Math.max(last, h.max / 1e6)) };
  };
}

// Plain JavaScript, evaluated in the thread: no module loading there (and so no TypeScript).
const WATCHDOG = `
const { workerData } = require('node:worker_threads');
const fs = require('node:fs');
const stamp = new Float64Array(workerData.clock);
const check = () => {
  const blockedMs = Date.now() - stamp[0];
  if (blockedMs > workerData.limitMs) {
    fs.writeSync(2, JSON.stringify({ ts: new Date().toISOString(), event: 'event-loop-blocked', blockedMs, limitMs: workerData.limitMs,
      message: workerData.what + ': the event loop has been blocked for ' + Math.round(blockedMs / 1000) + ' s (a synchronous loop in code this process runs?); exiting so that it is restarted' }) + '\\n');
    process.kill(process.pid, 'SIGKILL');
  }
};
setInterval(check, Math.min(1000, workerData.limitMs / 4));
`;

export interface BlockedLoopWatchdog {
  stop(): Promise<void>;
}

/**
 * Kills this process when its main thread has not run for `limitMs` (a SIGKILL: a blocked
 * thread cannot run its own handlers). `what` names the process in the log line.
 */
export function watchBlockedLoop(opts: { limitMs: number; what: string }): BlockedLoopWatchdog {
  const clock = new SharedArrayBuffer(8);
  const stamp = new Float64Array(clock);
  stamp[0] = Date.now();
  const tick = setInterval(() => (stamp[0] = Date.now()), Math.min(1000, opts.limitMs / 4));
  tick.unref();
  const thread = new Worker(WATCHDOG, { eval: true, execArgv: [], workerData: { clock, limitMs: opts.limitMs, what: opts.what } });
  thread.unref();
  return {
    async stop() {
      clearInterval(tick);
      await thread.terminate();
    },
  };
}
