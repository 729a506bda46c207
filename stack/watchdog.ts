/**
 * A process watching itself from beside its main thread. Some failures stop
 * the main thread from noticing anything: a synchronous loop in code a worker
 * runs (a user's tool, a reward that never returns) blocks every activity,
 * heartbeat and poll; an ONNX Runtime run allocates natively, synchronously, on
 * the main thread, until the host swaps. A worker thread keeps running through
 * both: the main thread stamps a shared clock, and the thread reads the clock
 * and this process's RSS. Past a limit it writes one JSON line to stderr saying
 * why and kills the process (SIGKILL: a blocked thread cannot run its own
 * handlers), so that whoever restarts it (`troupe up`'s supervisor, a pool
 * worker's engine supervisor, systemd, Kubernetes) starts a fresh one; the call
 * or activity it held fails as retryable and is retried.
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
const WATCHER = `
const { workerData: w } = require('node:worker_threads');
const fs = require('node:fs');
const stamp = new Float64Array(w.clock);
const rss = () => { try { return Number(/^VmRSS:\\s+(\\d+) kB/m.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) * 1024; } catch { return undefined; } };
const die = (event, detail, message) => {
  fs.writeSync(2, JSON.stringify({ ts: new Date().toISOString(), event, ...detail, message: w.what + ': ' + message }) + '\\n');
  process.kill(process.pid, 'SIGKILL');
};
const mib = (b) => Math.round(b / 2 ** 20) + ' MiB';
setInterval(() => {
  const blockedMs = Date.now() - stamp[0];
  if (w.blockedLoopMs !== undefined && blockedMs > w.blockedLoopMs)
    die('event-loop-blocked', { blockedMs, limitMs: w.blockedLoopMs },
      'the event loop has been blocked for ' + Math.round(blockedMs / 1000) + ' s (a synchronous loop in code this process runs?); exiting so that it is restarted');
  const held = w.rssLimitBytes === undefined ? undefined : rss();
  if (held !== undefined && held > w.rssLimitBytes)
    die('memory-exceeded', { rssBytes: held, limitBytes: w.rssLimitBytes },
      'resident memory ' + mib(held) + ' is over the limit of ' + mib(w.rssLimitBytes) + '; exiting before the host runs out of memory (' + w.rssHint + ')');
}, w.everyMs);
`;

export interface WatchOptions {
  /** Names the process in the log line. */
  what: string;
  /** Kill the process when its main thread has not run for this long. */
  blockedLoopMs?: number;
  /** Kill the process when its resident memory (Linux: VmRSS) exceeds this. */
  rssLimitBytes?: number;
  /** What to do about a memory kill (which setting raises the limit, what makes the work smaller). */
  rssHint?: string;
}

export interface Watchdog {
  stop(): Promise<void>;
}

export function watchProcess(opts: WatchOptions): Watchdog {
  // Memory grows fast: look often. A blocked loop is judged in seconds.
  const everyMs = Math.min(opts.rssLimitBytes === undefined ? 1000 : 100, (opts.blockedLoopMs ?? Infinity) / 4);
  const clock = new SharedArrayBuffer(8);
  const stamp = new Float64Array(clock);
  stamp[0] = Date.now();
  const tick = setInterval(() => (stamp[0] = Date.now()), Math.min(1000, everyMs));
  tick.unref();
  const thread = new Worker(WATCHER, {
    eval: true,
    execArgv: [],
    workerData: { clock, everyMs, what: opts.what, blockedLoopMs: opts.blockedLoopMs, rssLimitBytes: opts.rssLimitBytes, rssHint: opts.rssHint ?? '' },
  });
  thread.unref();
  return {
    async stop() {
      clearInterval(tick);
      await thread.terminate();
    },
  };
}
