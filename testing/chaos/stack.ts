/**
 * A Troupe stack of separate OS processes for chaos tests, brought up by the
 * same code path as `troupe up` (cli/commands/up.ts): the Temporal dev server
 * on a SQLite file, the embedded PostgreSQL, the control worker and the pool
 * worker (which spawns and supervises its engine). Everything lives in a temp
 * state dir on free loopback ports, so it never meets a developer's own stack.
 *
 * kill(kind) sends SIGKILL to exactly one recorded process (by pid); restart()
 * calls up() again, which starts whatever is missing. The engine is restarted
 * by its supervisor inside the pool worker, not by up().
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { up } from '../../cli/commands/up';
import { PYTORCH_SERVER } from '../../stack/pytorch-engine';
import { loadConfig, type TroupeConfig } from '../../infra/config';
import { connect, type Sql } from '../../infra/db';
import { embeddedDataDir, embeddedPostgresStatus } from '../../stack/postgres';
import { logFilePath, pidAlive, procArgv, readRecord, stopService, tailFile } from '../../stack/processes';
import { pollerIdentities } from '../../infra/temporal-connection';
import { stopEmbeddedPostgres } from '../../stack/postgres';
import { freePort } from '../ports';

export const FAULT_KINDS = ['control-worker', 'pool-worker', 'engine', 'temporal', 'postgres'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface ChaosStack {
  config: TroupeConfig;
  stateDir: string;
  address: string;
  databaseUrl: string;
  /** A store connection of the harness (reconnects by itself after a Postgres restart). */
  sql: Sql;
  /** A Temporal client of the harness (reconnects by itself after a server restart). */
  client: Client;
  /** The live pid of a process kind, or undefined if it is not running. */
  pidOf(kind: FaultKind): number | undefined;
  /** SIGKILL one process of `kind`; returns its pid (undefined if none was running). */
  kill(kind: FaultKind): Promise<number | undefined>;
  /** up() again until everything runs (bounded); returns what was restarted, with why it had died. */
  restart(): Promise<Restarted[]>;
  /** Waits (bounded) until the pool worker has an engine other than `oldPid`. */
  waitForEngine(oldPid: number | undefined, timeoutMs?: number): Promise<number>;
  /** Kinds whose process is not running right now. */
  missing(): FaultKind[];
  /** Stops every process of the stack and removes the state dir (unless keepState). */
  shutdown(opts?: { keepState?: boolean }): Promise<void>;
}

export interface Restarted {
  kind: FaultKind;
  /** From the end of its log: a known cause, or its last line. */
  cause: string;
}

/**
 * postgres.js 3.4.9 (the latest release) can throw from a setImmediate when a
 * connection closes with a small write queued: an uncaught TypeError that ends
 * the process (porsager/postgres#1154, #1208). A PostgreSQL crash triggers it.
 */
export const POSTGRES_JS_CRASH = 'postgres.js crashed the process writing to a closed socket (porsager/postgres#1154)';

function causeOfDeath(stateDir: string, kind: FaultKind): string {
  const tail = tailFile(logFilePath(stateDir, kind), 40);
  if (/reading 'write'\)/.test(tail) && /nextWrite/.test(tail)) return POSTGRES_JS_CRASH;
  return `last log line: ${(
    tail
      .split('\n')
      .filter((l) => l.trim())
      .at(-1) ?? '(empty log)'
  ).slice(0, 240)}`;
}

/** Children of `pid` (from /proc), with their argv. */
export function childProcesses(pid: number): Array<{ pid: number; argv: string[] }> {
  const out: Array<{ pid: number; argv: string[] }> = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may contain spaces, so parse after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push({ pid: Number(entry), argv: procArgv(Number(entry)) ?? [] });
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

/** The engine child of a pool worker: the built-in engine or the PyTorch one (TROUPE_ENGINE=pytorch). */
function enginePid(poolPid: number | undefined): number | undefined {
  if (poolPid === undefined) return undefined;
  return childProcesses(poolPid).find((c) => c.argv.some((a) => a.endsWith('onnx-engine.ts') || a === PYTORCH_SERVER))?.pid;
}

function livePid(stateDir: string, name: string): number | undefined {
  const rec = readRecord(stateDir, name);
  if (!rec || !pidAlive(rec.pid)) return undefined;
  const argv = procArgv(rec.pid);
  if (argv && rec.argv.length > 0 && (argv.length !== rec.argv.length || !argv.every((a, i) => a === rec.argv[i]))) return undefined;
  return rec.pid;
}

/** The live pid of one process of the stack in `stateDir`, by fault kind. */
function stackPid(stateDir: string, kind: FaultKind): number | undefined {
  switch (kind) {
    case 'control-worker':
    case 'pool-worker':
    case 'temporal':
      return livePid(stateDir, kind);
    case 'engine':
      return enginePid(livePid(stateDir, 'pool-worker'));
    case 'postgres': {
      const s = embeddedPostgresStatus(stateDir);
      return s.running ? s.pid : undefined;
    }
  }
}

/** SIGKILL of exactly the processes recorded in `stateDir` (and their children), synchronously. */
function killStack(stateDir: string): void {
  const dashboard = livePid(stateDir, 'dashboard');
  if (dashboard !== undefined) {
    try {
      process.kill(dashboard, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  for (const kind of ['pool-worker', 'control-worker', 'temporal', 'postgres'] as const) {
    const pid = stackPid(stateDir, kind);
    if (pid === undefined) continue;
    const children = kind === 'postgres' || kind === 'pool-worker' ? childProcesses(pid).map((c) => c.pid) : [];
    for (const p of [pid, ...children]) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
}

type Log = (line: string) => void;

/** up() until it succeeds, `attempts` times at most. */
async function bringUp(config: TroupeConfig, log: Log, attempts = 6): Promise<{ address: string; databaseUrl: string }> {
  let last: unknown;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      // The harness restarts what it kills itself, on its schedule: no supervisor.
      const { result } = await up(config, { supervise: false, log });
      return { address: result.address, databaseUrl: result.databaseUrl };
    } catch (e) {
      // e.g. a worker started while PostgreSQL was still recovering: try again.
      last = e;
      log(`chaos: up() attempt ${attempt} failed: ${(e as Error).message}`);
      if (attempt < attempts) await sleep(1000 * attempt);
    }
  }
  throw last;
}

/**
 * The first start, on fresh ports and a fresh state dir per try: a port another program took
 * after it was picked is no fault of the stack. A failed try leaves nothing running and this
 * process's environment as it was.
 */
async function firstStart(extraEnv: Record<string, string>, log: Log) {
  for (let tries = 1; ; tries++) {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-chaos-'));
    const env: Record<string, string> = {
      TROUPE_STATE_DIR: stateDir,
      TROUPE_TEMPORAL_PORT: String(await freePort()),
      TROUPE_TEMPORAL_UI_PORT: String(await freePort()),
      TROUPE_DASHBOARD_PORT: String(await freePort()),
      TROUPE_POSTGRES_PORT: String(await freePort()),
      TROUPE_DEVICE: 'cpu',
      TROUPE_TASK_QUEUE: 'troupe',
      TROUPE_POOL_TASK_QUEUE: 'troupe-gpu',
      ...extraEnv,
    };
    // What shutdown() puts back: a later stack in this process must not inherit this one's env (faults, retention)
    const previous = Object.keys(env).map((k) => [k, process.env[k]] as const);
    const restoreEnv = () => {
      for (const [k, v] of previous) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    };
    Object.assign(process.env, env);
    const config = loadConfig(process.env);
    try {
      return { config, stateDir, restoreEnv, first: await bringUp(config, log, 3) };
    } catch (e) {
      killStack(stateDir);
      fs.rmSync(stateDir, { recursive: true, force: true });
      restoreEnv();
      if (tries >= 3 || !/is in use by another program/.test((e as Error).message)) throw e;
      log(`chaos: starting again on other ports (${(e as Error).message})`);
    }
  }
}

/**
 * Starts the stack. `env` is merged into this process's environment (up() hands
 * process.env to the workers it spawns), e.g. { TROUPE_ENGINE_FAULTS: ... }, until shutdown().
 */
export async function startChaosStack(opts: { env?: Record<string, string>; log?: Log } = {}): Promise<ChaosStack> {
  const log = opts.log ?? (() => undefined);
  // This stack owns its Temporal and PostgreSQL: no attaching to external ones.
  delete process.env.TEMPORAL_ADDRESS;
  delete process.env.DATABASE_URL;
  const { config, stateDir, restoreEnv, first } = await firstStart(opts.env ?? {}, log);
  const sql = connect(first.databaseUrl, { max: 4 });
  const connection = await Connection.connect({ address: first.address });
  const client = new Client({ connection, namespace: config.namespace });

  const pidOf = (kind: FaultKind): number | undefined => stackPid(stateDir, kind);

  const waitForPoolPoller = async (timeoutMs = 90_000) => {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const pid = pidOf('pool-worker');
      if (pid === undefined) return; // it exited during start-up: the next restart() finds it missing
      if ((await pollerIdentities(connection, config.namespace, config.poolTaskQueue, 'activity').catch(() => [])).some((id) => id.startsWith(`${pid}@`)))
        return;
      await sleep(250);
    }
    throw new Error(`the pool worker did not poll ${config.poolTaskQueue} within ${timeoutMs / 1000}s (log: ${path.join(stateDir, 'pool-worker.log')})`);
  };

  // If this process dies without shutdown() (an uncaught error), take the stack with it:
  // SIGKILL of exactly the processes recorded in the state dir, synchronously.
  let shut = false;
  const killAllOnExit = () => {
    if (!shut) killStack(stateDir);
  };
  process.once('exit', killAllOnExit);

  const stack: ChaosStack = {
    config,
    stateDir,
    address: first.address,
    databaseUrl: first.databaseUrl,
    sql,
    client,
    pidOf,
    async kill(kind) {
      const pid = pidOf(kind);
      if (pid === undefined) return undefined;
      // PostgreSQL: the postmaster and every backend at once, like a crashed server;
      // its children are collected first (they are reparented once it dies).
      const also = kind === 'postgres' ? childProcesses(pid).map((c) => c.pid) : [];
      process.kill(pid, 'SIGKILL');
      for (const c of also) {
        try {
          process.kill(c, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
      for (let i = 0; i < 100 && pidAlive(pid); i++) await sleep(50);
      return pid;
    },
    missing() {
      return FAULT_KINDS.filter((k) => k !== 'engine' && pidOf(k) === undefined);
    },
    async restart() {
      const missing = stack.missing();
      const dead = missing.map((kind) => ({ kind, cause: causeOfDeath(stateDir, kind) })); // before up() appends to the logs
      if (missing.length > 0) await bringUp(config, log);
      // up() returns once the pool queue has any poller (the dead worker's may still be listed):
      // a restarted pool worker counts as back when it polls itself.
      if (missing.includes('pool-worker')) await waitForPoolPoller();
      return dead;
    },
    async waitForEngine(oldPid, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const pid = pidOf('engine');
        if (pid !== undefined && pid !== oldPid) return pid;
        await sleep(100);
      }
      throw new Error(`the engine was not restarted within ${timeoutMs / 1000}s (pool worker log: ${path.join(stateDir, 'pool-worker.log')})`);
    },
    async shutdown({ keepState } = {}) {
      shut = true;
      process.off('exit', killAllOnExit);
      await connection.close().catch(() => undefined);
      await sql.end({ timeout: 2 }).catch(() => undefined);
      // The dashboard `up` started too: left running it outlives the test (seen: one per chaos run).
      for (const name of ['dashboard', 'pool-worker', 'control-worker', 'temporal'] as const)
        await stopService(stateDir, name, { timeoutMs: 10_000 }).catch(() => undefined);
      if (fs.existsSync(embeddedDataDir(stateDir))) await stopEmbeddedPostgres(stateDir, 15_000).catch(() => undefined);
      if (!keepState) fs.rmSync(stateDir, { recursive: true, force: true });
      restoreEnv();
    },
  };
  return stack;
}
