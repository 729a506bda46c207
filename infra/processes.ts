// Background processes that `troupe up` starts and `troupe down` stops.
// Each one has `<state>/<name>.pid` (JSON: pid, exact argv, log path) and `<state>/<name>.log`.
// A process counts as ours only while its pid is alive AND its command line is the one
// we recorded, so `down` never signals a process that merely reused the pid.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

export interface ServiceRecord {
  name: string;
  pid: number;
  /** Exact argv the process was started with (argv[0] is the executable). */
  argv: string[];
  log: string;
  startedAt: string;
}

export function pidFilePath(stateDir: string, name: string): string {
  return path.join(stateDir, `${name}.pid`);
}

export function logFilePath(stateDir: string, name: string): string {
  return path.join(stateDir, `${name}.log`);
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** argv of a live process from /proc, or undefined where /proc is unavailable. */
export function procArgv(pid: number): string[] | undefined {
  try {
    const raw = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return raw.split('\0').filter((s, i, all) => i < all.length - 1 || s !== '');
  } catch {
    return undefined;
  }
}

/** Names of the services with a pid file in `stateDir` that match `pattern`, sorted. */
export function recordedServiceNames(stateDir: string, pattern: RegExp): string[] {
  const names = fs.existsSync(stateDir) ? fs.readdirSync(stateDir).filter((f) => f.endsWith('.pid')).map((f) => f.slice(0, -'.pid'.length)) : [];
  return names.filter((n) => pattern.test(n)).sort();
}

/** The extra pool workers of `up --pool-workers N` (pool-worker-2, ...) recorded in `stateDir`. */
export const EXTRA_POOL_WORKER = /^pool-worker-\d+$/;

export function readRecord(stateDir: string, name: string): ServiceRecord | undefined {
  try {
    const rec = JSON.parse(fs.readFileSync(pidFilePath(stateDir, name), 'utf8')) as ServiceRecord;
    return Number.isInteger(rec.pid) && Array.isArray(rec.argv) ? rec : undefined;
  } catch {
    return undefined;
  }
}

export function writeRecord(stateDir: string, rec: ServiceRecord): void {
  fs.mkdirSync(stateDir, { recursive: true });
  fs.writeFileSync(pidFilePath(stateDir, rec.name), JSON.stringify(rec, null, 2) + '\n');
}

export function removeRecord(stateDir: string, name: string): void {
  fs.rmSync(pidFilePath(stateDir, name), { force: true });
}

/** True when the recorded process is alive and still runs the recorded command. */
export function recordIsRunning(rec: ServiceRecord): boolean {
  if (!pidAlive(rec.pid)) return false;
  const argv = procArgv(rec.pid);
  if (argv === undefined) return process.platform !== 'linux'; // no /proc: trust the pid
  return argv.length === rec.argv.length && argv.every((a, i) => a === rec.argv[i]);
}

/** The running record for `name`, or undefined (a stale pid file is removed). */
export function runningService(stateDir: string, name: string): ServiceRecord | undefined {
  const rec = readRecord(stateDir, name);
  if (!rec) return undefined;
  if (recordIsRunning(rec)) return rec;
  removeRecord(stateDir, name);
  return undefined;
}

export interface SpawnServiceOptions {
  stateDir: string;
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/**
 * Start a detached process (its own process group) with stdout+stderr appended to
 * `<state>/<name>.log`, and record it in `<state>/<name>.pid`.
 */
export function spawnService(opts: SpawnServiceOptions): ServiceRecord {
  fs.mkdirSync(opts.stateDir, { recursive: true });
  const log = logFilePath(opts.stateDir, opts.name);
  const fd = fs.openSync(log, 'a');
  fs.writeSync(fd, `\n--- ${new Date().toISOString()} starting ${opts.name}: ${opts.command} ${opts.args.join(' ')}\n`);
  try {
    const child = spawn(opts.command, opts.args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      detached: true,
      stdio: ['ignore', fd, fd],
    });
    if (child.pid === undefined) throw new Error(`could not start ${opts.command}`);
    child.unref();
    const rec: ServiceRecord = {
      name: opts.name,
      pid: child.pid,
      argv: [opts.command, ...opts.args],
      log,
      startedAt: new Date().toISOString(),
    };
    // The kernel may report argv[0] as given; keep exactly what we passed.
    writeRecord(opts.stateDir, rec);
    return rec;
  } finally {
    fs.closeSync(fd);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Signal the process group (falls back to the pid) — children of the service go too. */
function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      /* already gone */
    }
  }
}

/**
 * Stop a recorded service: `signal` (default SIGTERM) to its process group, SIGKILL
 * after `timeoutMs`. Returns what happened. Never touches a process we did not record.
 */
export async function stopService(
  stateDir: string,
  name: string,
  opts: { timeoutMs?: number; signal?: NodeJS.Signals } = {},
): Promise<'stopped' | 'killed' | 'not-running'> {
  const timeoutMs = opts.timeoutMs ?? 15_000;
  const rec = readRecord(stateDir, name);
  if (!rec || !recordIsRunning(rec)) {
    removeRecord(stateDir, name);
    return 'not-running';
  }
  signal(rec.pid, opts.signal ?? 'SIGTERM');
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!pidAlive(rec.pid)) {
      removeRecord(stateDir, name);
      return 'stopped';
    }
    await sleep(100);
  }
  signal(rec.pid, 'SIGKILL');
  for (let i = 0; i < 50 && pidAlive(rec.pid); i++) await sleep(100);
  removeRecord(stateDir, name);
  return 'killed';
}

/** Last `n` lines of a file ('' if it does not exist). */
export function tailFile(file: string, n = 20): string {
  try {
    const text = fs.readFileSync(file, 'utf8');
    return text.split('\n').slice(-n - 1).join('\n').trimEnd();
  } catch {
    return '';
  }
}
