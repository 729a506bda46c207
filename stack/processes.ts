// Background processes that `troupe up` starts and `troupe down` stops.
// Each one has `<state>/<name>.pid` (JSON: pid, exact argv, log path) and `<state>/<name>.log`.
// A process counts as ours only while its pid is alive AND its command line is the one
// we recorded, so `down` never signals a process that merely reused the pid. Every process
// spawnService starts also carries its state dir and service name in its environment
// (inherited by its children), so a process whose record was lost is still found and
// ended (strayProcesses) instead of running on untracked.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { procStat } from '../infra/proc-stat';

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
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A zombie has ended: only its parent's reaping is left, which an orphan's init may do late.
  return procState(pid) !== 'Z';
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
  const names = fs.existsSync(stateDir)
    ? fs
        .readdirSync(stateDir)
        .filter((f) => f.endsWith('.pid'))
        .map((f) => f.slice(0, -'.pid'.length))
    : [];
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

/**
 * Remove `name`'s record; with `pid`, only while the record is still that process's: another
 * process may have started under the same name meanwhile, and its record must survive.
 */
export function removeRecord(stateDir: string, name: string, pid?: number): void {
  if (pid !== undefined && readRecord(stateDir, name)?.pid !== pid) return;
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
  removeRecord(stateDir, name, rec.pid);
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
      env: { ...(opts.env ?? process.env), [SERVICE_STATE_DIR_ENV]: path.resolve(opts.stateDir), [SERVICE_NAME_ENV]: opts.name },
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
    if (rec) removeRecord(stateDir, name, rec.pid);
    return 'not-running';
  }
  const outcome = await endProcess(rec.pid, { timeoutMs, signal: opts.signal, what: `${name} (pid ${rec.pid})` });
  removeRecord(stateDir, name, rec.pid);
  return outcome;
}

/**
 * Signal `pid`'s process group, SIGKILL it after `timeoutMs`, and verify it is gone: a
 * process that outlives SIGKILL (it should not) is an error, never a silent survivor.
 */
async function endProcess(pid: number, opts: { timeoutMs: number; signal?: NodeJS.Signals; what: string }): Promise<'stopped' | 'killed'> {
  signal(pid, opts.signal ?? 'SIGTERM');
  const deadline = Date.now() + opts.timeoutMs;
  while (Date.now() < deadline) {
    if (!pidAlive(pid)) return 'stopped';
    await sleep(100);
  }
  signal(pid, 'SIGKILL');
  for (let i = 0; i < 50 && pidAlive(pid); i++) await sleep(100);
  if (pidAlive(pid)) throw new Error(`${opts.what} is still alive 5 s after SIGKILL`);
  return 'killed';
}

/** Environment variables that mark a process spawnService started (and its children). */
export const SERVICE_STATE_DIR_ENV = 'TROUPE_SERVICE_STATE_DIR';
export const SERVICE_NAME_ENV = 'TROUPE_SERVICE';

export interface MarkedProcess {
  pid: number;
  /** the service it was started as, or whose child it is */
  service: string;
  argv: string[];
}

function procState(pid: number): string | undefined {
  return procStat(pid)?.state;
}

function procEnv(pid: number, key: string): string | undefined {
  try {
    const entry = fs
      .readFileSync(`/proc/${pid}/environ`, 'utf8')
      .split('\0')
      .find((e) => e.startsWith(key + '='));
    return entry?.slice(key.length + 1);
  } catch {
    return undefined;
  }
}

function livePids(): number[] {
  try {
    return fs
      .readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .map(Number);
  } catch {
    return []; // no /proc: only records can be followed
  }
}

/** Parent pid of every live process (zombies left out), from /proc. */
function processTree(): Map<number, number> {
  const parent = new Map<number, number>();
  for (const pid of livePids()) {
    const st = procStat(pid);
    if (st && st.state !== 'Z') parent.set(pid, st.ppid);
  }
  return parent;
}

/**
 * Live processes of `stateDir`: started by spawnService for it, or children of those. With
 * `nested`, also those of state dirs inside it (a test run's folder holds its tests' stacks).
 */
export function markedProcesses(stateDir: string, tree = processTree(), opts: { nested?: boolean } = {}): MarkedProcess[] {
  const dir = path.resolve(stateDir);
  const ours = (marked: string | undefined) => marked === dir || (opts.nested === true && marked?.startsWith(dir + path.sep) === true);
  return [...tree.keys()]
    .filter((pid) => ours(procEnv(pid, SERVICE_STATE_DIR_ENV)))
    .map((pid) => ({ pid, service: procEnv(pid, SERVICE_NAME_ENV) ?? '?', argv: procArgv(pid) ?? [] }));
}

/**
 * End every live process of `stateDir` and of the state dirs inside it, whatever records say:
 * for a folder whose owner is gone (a killed test run). This process and its ancestors are spared.
 */
export async function endMarkedProcesses(stateDir: string, timeoutMs = 5_000): Promise<MarkedProcess[]> {
  const tree = processTree();
  const mine = new Set<number>();
  for (let p: number | undefined = process.pid; p && mine.size < 64 && !mine.has(p); p = tree.get(p)) mine.add(p);
  const marked = markedProcesses(stateDir, tree, { nested: true }).filter((p) => !mine.has(p.pid));
  await Promise.all(marked.map((p) => endProcess(p.pid, { timeoutMs, what: `${p.service} (pid ${p.pid}) of ${stateDir}` })));
  return marked;
}

/**
 * Processes of `stateDir` (of `services`, if given) that no record accounts for: neither a
 * recorded pid nor a descendant of one. Such a process was replaced or lost its record, and
 * nobody would ever stop it. This process and its ancestors are never listed.
 */
export function strayProcesses(stateDir: string, services?: readonly string[]): MarkedProcess[] {
  const tree = processTree();
  const recorded = new Set(
    recordedServiceNames(stateDir, /.*/)
      .flatMap((name) => readRecord(stateDir, name)?.pid ?? [])
      .filter(pidAlive),
  );
  const ancestors = (pid: number): number[] => {
    const out: number[] = [];
    for (let p: number | undefined = pid; p && out.length < 64 && !out.includes(p); p = tree.get(p)) out.push(p);
    return out;
  };
  const mine = new Set(ancestors(process.pid));
  return markedProcesses(stateDir, tree).filter(
    (p) => !mine.has(p.pid) && !ancestors(p.pid).some((a) => recorded.has(a)) && (!services || services.includes(p.service)),
  );
}

/** End every stray process of `stateDir` (of `services`, if given); returns what was ended. */
export async function endStrayProcesses(stateDir: string, services?: readonly string[], timeoutMs = 15_000): Promise<MarkedProcess[]> {
  const strays = strayProcesses(stateDir, services);
  await Promise.all(strays.map((p) => endProcess(p.pid, { timeoutMs, what: `stray ${p.service} (pid ${p.pid})` })));
  return strays;
}

/** Last `n` lines of a file ('' if it does not exist). */
export function tailFile(file: string, n = 20): string {
  try {
    const text = fs.readFileSync(file, 'utf8');
    return text
      .split('\n')
      .slice(-n - 1)
      .join('\n')
      .trimEnd();
  } catch {
    return '';
  }
}
