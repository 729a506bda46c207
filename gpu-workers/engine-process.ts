/**
 * Spawns an engine (the command line its caller gives: processes/engine-kinds.ts names the
 * built-in one, processes/onnx-engine.ts) as a child process, waits for its "listening" line,
 * and restarts it (with backoff) whenever it exits unexpectedly, also while starting. A restarted
 * engine has an empty cache: callers get NOT_FOUND (VERSION_NOT_LOADED) and
 * reload versions from the store, as after any engine loss.
 *
 * A hung engine (stopped, deadlocked, or stuck in a device run) does not exit: a watchdog asks
 * it for Health every HEALTH_EVERY_MS and counts it hung by gpu-workers/hang-watch.ts's rule
 * (a device run, or silence, lasting `hangMs`; each ask waits up to that deadline, as a busy
 * engine answers only between device runs). It is then killed, which fails
 * the calls in flight (retryable: the activity's next attempt reloads and redoes the work),
 * and restarted like an engine that died. An engine killed as hung MAX_HUNG_IN_A_ROW times in
 * a row, none getting further than the one before (no more device runs), would only loop: the
 * next `client()` throws EngineHungError saying where it hung (that run fails) and starts a fresh engine.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { EngineClient } from '../engines/protocol/client';
import { backoffDelay, untilAvailable } from '../infra/backoff';
import { procStat } from '../infra/proc-stat';
import { BUSY_LIMIT_FACTOR, HangWatch } from './hang-watch';
import { troupeMetrics } from '../infra/metrics';

const REPO_ROOT = path.resolve(__dirname, '..');

export interface ListeningEvent {
  event: 'listening';
  port: number;
  address: string;
  device: string;
  fell_back: boolean;
  fallback_reason: string;
  pid: number;
  /** host:port of its Prometheus /metrics, when started with --metrics-port */
  metrics_address?: string;
}

export interface SpawnedEngine {
  child: ChildProcess;
  listening: ListeningEvent;
}

/** The engine was killed as hung MAX_HUNG_IN_A_ROW times in a row at the same point and is not restarted: the message says where. */
export class EngineHungError extends Error {
  override name = 'EngineHungError';
}

/** An engine that exited with code 1 before listening: its own start-up error (bad flag, device unavailable), which a retry repeats. */
export class EngineStartupError extends Error {
  override name = 'EngineStartupError';
}

/**
 * Start one engine process; resolves on its "listening" line, rejects with its stderr tail if it exits first.
 * `command` is any engine that keeps the built-in engine's launch contract (engines/protocol/README.md):
 * --port/--device/--exit-with-stdin flags, one JSON "listening" line on stdout, exit code 1 on a start-up error.
 */
export function spawnEngine(args: string[], opts: { startTimeoutMs?: number; quiet?: boolean; command: readonly string[] }): Promise<SpawnedEngine> {
  const [program, ...prefix] = opts.command;
  // stdin stays open as a lifeline: the engine exits when this process dies (--exit-with-stdin).
  const child = spawn(program!, [...prefix, '--exit-with-stdin', ...args], {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: process.env,
  });
  let stderrTail = '';
  child.stderr?.on('data', (d: Uint8Array) => {
    stderrTail = (stderrTail + new TextDecoder().decode(d)).slice(-4000);
    if (!opts.quiet) process.stderr.write(d); // the engine's JSON log lines
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`engine did not start within ${opts.startTimeoutMs ?? 60000} ms\n${stderrTail}`));
    }, opts.startTimeoutMs ?? 60000);
    const lines = readline.createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      try {
        const ev = JSON.parse(line) as ListeningEvent;
        if (ev.event === 'listening') {
          clearTimeout(timer);
          resolve({ child, listening: ev });
        }
      } catch {
        // not a JSON line; ignore
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      const message = `engine exited before listening (code ${code}, signal ${signal}): ${stderrTail.trim()}`;
      reject(code === 1 && signal === null ? new EngineStartupError(message) : new Error(message));
    });
  });
}

export interface SupervisorOptions {
  device: string;
  /** the engine's command line (processes/engine-kinds.ts: BUILT_IN_ENGINE_COMMAND, engineCommand) */
  command: readonly string[];
  /** extra engine flags, e.g. ['--threads', '2'] */
  extraArgs?: string[];
  /** do not forward the engine's stderr log lines */
  quiet?: boolean;
  log?: (event: Record<string, unknown>) => void;
  /** stop retrying a start once this returns true (the owner is shutting down) */
  stopped?: () => boolean;
  /**
   * An engine without progress for this long is hung, killed and restarted (default 20 s).
   * A single device run (one update, one fused generation) must take less.
   */
  hangMs?: number;
}

/** How often the watchdog asks the engine for Health; each ask waits at most this long. */
export const HEALTH_EVERY_MS = 2000;
export const DEFAULT_HANG_MS = 20_000;
/** Engines killed as hung in a row, none further than the one before, before the supervisor gives up. */
export const MAX_HUNG_IN_A_ROW = 3;

/** Where an engine was killed as hung. */
interface HangPoint {
  deviceRuns: number;
  queueDepth: number;
  /** since the last progress or sign of work (CPU) */
  stalledMs: number;
  /** since the last progress: longer than stalledMs when a busy run was given up on (BUSY_LIMIT_FACTOR) */
  sinceProgressMs: number;
}

/** Keeps one engine child alive; `client()` is the client of the current incarnation. */
export class EngineSupervisor {
  private current?: { engine: SpawnedEngine; client: EngineClient; startedAt: number; hung?: HangPoint };
  private stopping = false;
  private restarts = 0;
  private quickDeaths = 0;
  private readyWaiters: (() => void)[] = [];
  /** the hangs in a row so far, the last one's point first reached (reset by an engine that dies otherwise) */
  private hungInARow = 0;
  private lastHang?: HangPoint;
  private gaveUp?: EngineHungError;

  constructor(private readonly opts: SupervisorOptions) {}

  get restartCount(): number {
    return this.restarts;
  }

  get pid(): number | undefined {
    return this.current?.engine.child.pid;
  }

  /** True while an engine process is up (not between a death and its restart). */
  get running(): boolean {
    const child = this.current?.engine.child;
    return !!child && child.exitCode === null && child.signalCode === null;
  }

  get listening(): ListeningEvent | undefined {
    return this.current?.engine.listening;
  }

  /**
   * Starts an engine, retrying with capped backoff until one listens and answers: an engine
   * can die while starting (a kill, a crash), at the worker's start-up as after a restart.
   */
  async start(): Promise<EngineClient> {
    return untilAvailable('the engine', () => this.startOnce(), {
      maxMs: 10_000,
      stopped: () => this.stopping || (this.opts.stopped?.() ?? false),
      retryable: (e) => !(e instanceof EngineStartupError),
      log: (message) => this.opts.log?.({ event: 'engine_waiting', message }),
    });
  }

  private async startOnce(): Promise<EngineClient> {
    const engine = await spawnEngine(['--port', '0', '--device', this.opts.device, ...(this.opts.extraArgs ?? [])], {
      quiet: this.opts.quiet,
      command: this.opts.command,
    });
    // Registered before connecting: an engine that dies between "listening" and the
    // connection must neither be waited for nor missed.
    const died = new Promise<never>((_, reject) =>
      engine.child.once('exit', (code, signal) => {
        reject(new Error(`engine exited right after listening (code ${code}, signal ${signal})`));
        this.onExit(engine, code, signal);
      }),
    );
    died.catch(() => undefined);
    const connecting = EngineClient.connect(engine.listening.address);
    let client: EngineClient;
    try {
      client = await Promise.race([connecting, died]);
    } catch (e) {
      connecting.then(
        (c) => c.close(),
        () => undefined,
      );
      engine.child.kill('SIGKILL');
      throw e;
    }
    if (this.stopping) {
      client.close();
      engine.child.kill('SIGTERM');
      throw new Error('engine supervisor stopped');
    }
    this.current = { engine, client, startedAt: Date.now() };
    this.watch(this.current);
    this.opts.log?.({ ...engine.listening, event: 'engine_started' });
    for (const w of this.readyWaiters.splice(0)) w();
    return client;
  }

  /** The hang watchdog of one engine incarnation (the rule: gpu-workers/hang-watch.ts); it ends with that incarnation. */
  private watch(incarnation: NonNullable<EngineSupervisor['current']>): void {
    const watch = new HangWatch(this.opts.hangMs ?? DEFAULT_HANG_MS, incarnation.startedAt);
    const pid = incarnation.engine.child.pid;
    let cpu = pid === undefined ? undefined : { seconds: procStat(pid)?.cpuSeconds, at: Date.now() };
    let asking = false;
    const timer = setInterval(() => {
      // the engine's CPU time, sampled even while an ask waits: a long device run at work is not a hang
      const seconds = pid === undefined ? undefined : procStat(pid)?.cpuSeconds;
      const now0 = Date.now();
      if (cpu?.seconds !== undefined && seconds !== undefined) watch.cpu(now0, seconds - cpu.seconds, (now0 - cpu.at) / 1000);
      cpu = { seconds, at: now0 };
      if (asking) return;
      asking = true;
      incarnation.client
        .health({ timeoutMs: watch.askTimeoutMs(Date.now(), HEALTH_EVERY_MS) })
        .then(
          (h) => {
            watch.answered(Date.now(), h);
            troupeMetrics().engineQueueDepth.set(h.queueDepth);
          },
          () => undefined, // no answer by the hang deadline: no progress
        )
        .finally(() => {
          asking = false;
          const now = Date.now();
          if (!watch.hung(now) || this.current !== incarnation || this.stopping) return;
          clearInterval(timer);
          incarnation.hung = {
            deviceRuns: watch.deviceRuns,
            queueDepth: watch.queueDepth,
            stalledMs: watch.stalledMs(now),
            sinceProgressMs: watch.sinceProgressMs(now),
          };
          this.opts.log?.({ event: 'engine_hung', pid: incarnation.engine.child.pid, ...incarnation.hung });
          troupeMetrics().engineHangs.add(1);
          incarnation.engine.child.kill('SIGKILL'); // also a stopped process; onExit restarts it
        });
    }, HEALTH_EVERY_MS);
    timer.unref();
    incarnation.engine.child.once('exit', () => clearInterval(timer));
  }

  private onExit(engine: SpawnedEngine, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.stopping || this.current?.engine !== engine) return; // not yet current: startOnce retries it
    this.opts.log?.({ event: 'engine_exited', pid: engine.child.pid, code, signal });
    this.current.client.close();
    if (this.givesUp(this.current.hung)) return;
    // Quick deaths in a row back off; an engine that ran a minute resets the streak.
    this.quickDeaths = Date.now() - this.current.startedAt < 60_000 ? this.quickDeaths + 1 : 1;
    this.restarts++;
    troupeMetrics().engineRestarts.add(1);
    setTimeout(
      () => {
        if (this.stopping) return;
        this.start().catch((e) => this.opts.log?.({ event: 'engine_restart_failed', error: (e as Error).message }));
      },
      backoffDelay(this.quickDeaths, { maxMs: 10_000 }),
    );
  }

  /**
   * Counts an engine's end towards the hangs in a row; true when it is the MAX_HUNG_IN_A_ROW-th at
   * the same point (each got no further than the one before: a restart would redo the same work
   * and hang there again): no engine is started until `client()` is next asked, which throws why
   * (the run asking fails rather than loop) and then starts a fresh engine for what comes next.
   */
  private givesUp(hung: HangPoint | undefined): boolean {
    if (!hung) {
      this.hungInARow = 0;
      this.lastHang = undefined;
      return false;
    }
    this.hungInARow = this.lastHang && hung.deviceRuns <= this.lastHang.deviceRuns ? this.hungInARow + 1 : 1;
    this.lastHang = hung;
    if (this.hungInARow < MAX_HUNG_IN_A_ROW) return false;
    const limitS = (this.opts.hangMs ?? DEFAULT_HANG_MS) / 1000;
    const busy =
      hung.sinceProgressMs - hung.stalledMs > 0 ? `, at work on the CPU for ${((hung.sinceProgressMs - hung.stalledMs) / 1000).toFixed(1)} s of it` : '';
    this.gaveUp = new EngineHungError(
      `the engine was killed as hung ${this.hungInARow} times in a row at the same point (${hung.deviceRuns < 0 ? 'before answering Health' : `after ${hung.deviceRuns} device runs`}, ` +
        `${hung.queueDepth} request${hung.queueDepth === 1 ? '' : 's'} queued or running, no finished device run for ${(hung.sinceProgressMs / 1000).toFixed(1)} s${busy}; ` +
        `the hang limit TROUPE_ENGINE_HANG_S is ${limitS} s idle, ${limitS * BUSY_LIMIT_FACTOR} s at work), so this call fails rather than restart it again: ` +
        `one device run of this work takes longer than that on this host (raise TROUPE_ENGINE_HANG_S), or the engine is stuck there`,
    );
    this.opts.log?.({ event: 'engine_gave_up', message: this.gaveUp.message });
    return true;
  }

  /** The current engine's client (calls fail with EngineUnavailableError while it restarts; EngineHungError once given up). */
  client(): EngineClient {
    const gaveUp = this.gaveUp;
    if (gaveUp) {
      // this call's run fails, naming the point; whatever asks next gets a fresh engine
      this.gaveUp = undefined;
      this.hungInARow = 0;
      this.lastHang = undefined;
      if (!this.stopping) this.start().catch((e) => this.opts.log?.({ event: 'engine_restart_failed', error: (e as Error).message }));
      throw gaveUp;
    }
    if (!this.current) throw new Error('engine supervisor not started');
    return this.current.client;
  }

  /** Resolves once an engine incarnation newer than `afterPid` is up. */
  async waitForRestart(afterPid: number | undefined, timeoutMs = 60_000): Promise<EngineClient> {
    const deadline = Date.now() + timeoutMs;
    while (this.current?.engine.child.pid === afterPid || !this.current) {
      if (Date.now() > deadline) throw new Error('engine did not restart in time');
      await new Promise<void>((r) => {
        this.readyWaiters.push(r);
        setTimeout(r, 200);
      });
    }
    return this.current.client;
  }

  /** No more restarts (call on SIGINT/SIGTERM: the child may get the signal first). */
  beginStop(): void {
    this.stopping = true;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    const cur = this.current;
    if (!cur) return;
    cur.client.close();
    const child = cur.engine.child;
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 5000).unref();
    });
  }
}
