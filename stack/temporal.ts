// Finding, building and running the Temporal CLI's dev server.
//
// Binary lookup order (ensureTemporalBinary):
//   TROUPE_TEMPORAL_BIN → `temporal` on PATH → <cache>/bin/temporal → build it with
//   `go install github.com/temporalio/cli/cmd/temporal@v1.5.1` into <cache>/bin
//   (one build at a time, guarded by a lock file) → no Go: say what to install.
// <cache> is $XDG_CACHE_HOME/troupe or ~/.cache/troupe.
//
// Server (ensureTemporalServer): TEMPORAL_ADDRESS → the dev server `up` already started
// (<state>/temporal.pid) → a Temporal server already on the port → start the dev server
// detached, SQLite state in <state>/temporal.db, log in <state>/temporal.log.
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { ConfigError, type TroupeConfig, temporalAddressOf } from '../infra/config';
import { TroupeError, errorMessage } from '../infra/errors';
import { withLockFile } from './lock';
import { cacheBinDir, cacheDir } from '../infra/paths';
import { type ServiceRecord, pidAlive, runningService, spawnService, tailFile } from './processes';
import { TROUPE_SEARCH_ATTRIBUTES } from '../infra/search-attributes';
import { connectHint, temporalServerVersion } from '../infra/temporal-connection';

export const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal';
/** Later tags carry a `replace` directive and cannot be go-installed. */
export const TEMPORAL_CLI_VERSION = 'v1.5.1';
export const MIN_GO_VERSION = '1.25';

export type Log = (line: string) => void;
const stderrLog: Log = (line) => process.stderr.write(line + '\n');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface TemporalBinary {
  path: string;
  /** Where it was found. */
  source: 'TROUPE_TEMPORAL_BIN' | 'PATH' | 'cache' | 'built';
}

function isExecutableFile(p: string): boolean {
  try {
    const st = fs.statSync(p);
    if (!st.isFile()) return false;
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function findOnPath(name: string, env: NodeJS.ProcessEnv): string | undefined {
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    if (isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

/** `<cache>/bin/temporal` — where Troupe builds the CLI. */
export function cachedTemporalPath(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(cacheBinDir(env), 'temporal');
}

/** Look for the binary without building it. Throws only for a TROUPE_TEMPORAL_BIN that is not executable. */
export function findTemporalBinary(opts: { temporalBin?: string; env?: NodeJS.ProcessEnv } = {}): TemporalBinary | undefined {
  const env = opts.env ?? process.env;
  const explicit = opts.temporalBin ?? (env.TROUPE_TEMPORAL_BIN?.trim() || undefined);
  if (explicit) {
    const p = path.resolve(explicit);
    if (!isExecutableFile(p)) {
      throw new TroupeError(
        `TROUPE_TEMPORAL_BIN: ${p} is not an executable file`,
        'point it at a `temporal` CLI binary, or unset it to let Troupe find or build one',
      );
    }
    return { path: p, source: 'TROUPE_TEMPORAL_BIN' };
  }
  const onPath = findOnPath('temporal', env);
  if (onPath) return { path: onPath, source: 'PATH' };
  const cached = cachedTemporalPath(env);
  if (isExecutableFile(cached)) return { path: cached, source: 'cache' };
  return undefined;
}

/** `go version` → "1.26.8", or undefined when Go is not installed. */
export function goVersion(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const r = spawnSync('go', ['version'], { env, encoding: 'utf8' });
  if (r.error || r.status !== 0) return undefined;
  const m = /go(\d+\.\d+(?:\.\d+)?)/.exec(r.stdout);
  return m ? m[1] : r.stdout.trim();
}

export function versionAtLeast(version: string, min: string): boolean {
  const a = version.split('.').map(Number);
  const b = min.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x > y;
  }
  return true;
}

/** `temporal --version` output, e.g. "temporal version 0.0.0-DEV (Server 1.29.1, UI 2.42.1)". */
export function temporalVersion(bin: string): string {
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  if (r.error) return `failed to run: ${r.error.message}`;
  return (r.stdout || r.stderr).trim();
}

const noGoHint =
  `install Go ≥ ${MIN_GO_VERSION} (https://go.dev/dl) and run again — Troupe then builds the Temporal CLI once — ` +
  'or set TROUPE_TEMPORAL_BIN to a temporal binary, or TEMPORAL_ADDRESS to a running Temporal server';

/** Attempts at `go install` before giving up: transient proxy errors fail one attempt, not the set-up. */
const BUILD_ATTEMPTS = 3;

/** One `go install` of Troupe's: what it builds, and the names the binaries get in <cache>/bin. */
export interface GoBuild {
  /** In messages: "the Temporal CLI". */
  what: string;
  /** `module/cmd/path@version` packages, all from one module version. */
  specs: string[];
  /** Binary name go install gives (last path element of the package) → name in <cache>/bin. */
  binaries: Record<string, string>;
  /** Lock and log files under <cache>: `<name>-build.lock`, `<name>-build.log`. */
  name: string;
}

export const TEMPORAL_CLI_BUILD: GoBuild = {
  what: 'the Temporal CLI',
  specs: [`${TEMPORAL_CLI_MODULE}@${TEMPORAL_CLI_VERSION}`],
  binaries: { temporal: 'temporal' },
  name: 'temporal',
};

/**
 * `go install` the packages of `build` into <cache>/bin (one build at a time per cache, guarded
 * by a lock file; a binary already there is kept). Returns the paths, in `binaries` order.
 */
export async function goInstall(build: GoBuild, opts: { env?: NodeJS.ProcessEnv; log?: Log } = {}): Promise<string[]> {
  const env = opts.env ?? process.env;
  const log = opts.log ?? stderrLog;
  const targets = Object.values(build.binaries).map((b) => path.join(cacheBinDir(env), b));
  const lockPath = path.join(cacheDir(env), `${build.name}-build.lock`);
  return withLockFile(
    lockPath,
    async () => {
      if (targets.every(isExecutableFile)) return targets; // built while we waited
      const go = goVersion(env);
      if (!go) throw new TroupeError(`${build.what} was not found and Go is not installed to build it`, noGoHint);
      if (!versionAtLeast(go, MIN_GO_VERSION)) {
        log(`troupe: Go ${go} is older than ${MIN_GO_VERSION}; trying anyway (GOTOOLCHAIN may fetch a newer toolchain)`);
      }
      // Build into a private folder, then rename: nobody ever sees a half-written binary.
      const buildBin = path.join(cacheBinDir(env), `.build-${process.pid}`);
      fs.mkdirSync(buildBin, { recursive: true });
      const buildLog = path.join(cacheDir(env), `${build.name}-build.log`);
      log(`troupe: building ${build.what} (go install ${build.specs.join(' ')}) into ${cacheBinDir(env)}`);
      log('troupe: this happens once per machine and takes a few minutes...');
      const started = Date.now();
      const logFd = fs.openSync(buildLog, 'w');
      let packages = 0;
      const install = () =>
        new Promise<number>((resolve, reject) => {
          const child = spawn('go', ['install', '-v', ...build.specs], {
            env: { ...env, GOBIN: buildBin, GOFLAGS: env.GOFLAGS ?? '' },
            stdio: ['ignore', 'pipe', 'pipe'],
          });
          const onData = (chunk: Buffer) => {
            fs.writeSync(logFd, chunk.toString('utf8'));
            for (const line of chunk.toString('utf8').split('\n')) {
              if (line && !line.startsWith('go: ')) packages++;
            }
          };
          child.stdout.on('data', onData);
          child.stderr.on('data', onData);
          const ticker = setInterval(() => {
            const s = Math.round((Date.now() - started) / 1000);
            log(`troupe:   ...still building (${s}s, ${packages} packages compiled)`);
          }, 20_000);
          child.on('error', (e) => {
            clearInterval(ticker);
            reject(e);
          });
          child.on('close', (c) => {
            clearInterval(ticker);
            resolve(c ?? 1);
          });
        });
      try {
        // The module proxy sometimes drops a download mid-stream (seen: "stream error ... INTERNAL_ERROR");
        // go keeps what it already fetched and compiled, so another attempt costs little.
        let code = await install();
        for (let attempt = 2; code !== 0 && attempt <= BUILD_ATTEMPTS; attempt++) {
          log(`troupe: go install failed (exit ${code}: ${tailFile(buildLog, 1).slice(0, 200)}); attempt ${attempt} of ${BUILD_ATTEMPTS}`);
          code = await install();
        }
        if (code !== 0) {
          throw new TroupeError(
            `building ${build.what} failed (go install exit ${code}; Go ${go}): ${tailFile(buildLog, 3).replace(/\s+/g, ' ').slice(0, 300)}`,
            `see ${buildLog}; the build needs Go ≥ ${MIN_GO_VERSION} and the Go module proxy. Or set TROUPE_TEMPORAL_BIN / TEMPORAL_ADDRESS`,
          );
        }
        Object.keys(build.binaries).forEach((built, i) => fs.renameSync(path.join(buildBin, built), targets[i]!));
      } finally {
        fs.closeSync(logFd);
        fs.rmSync(buildBin, { recursive: true, force: true });
      }
      log(`troupe: built ${targets.join(', ')} in ${Math.round((Date.now() - started) / 1000)}s`);
      return targets;
    },
    { onWait: (pid) => log(`troupe: another process (pid ${pid}) is building ${build.what}; waiting for it...`) },
  );
}

/** Build the CLI with `go install` into <cache>/bin/temporal. Prints progress through `log`. */
export async function buildTemporalBinary(opts: { env?: NodeJS.ProcessEnv; log?: Log } = {}): Promise<string> {
  const [bin] = await goInstall(TEMPORAL_CLI_BUILD, opts);
  return bin!;
}

/** Find the Temporal CLI, building it if needed (see the order at the top of this file). */
export async function ensureTemporalBinary(opts: { temporalBin?: string; env?: NodeJS.ProcessEnv; log?: Log } = {}): Promise<TemporalBinary> {
  const found = findTemporalBinary(opts);
  if (found) return found;
  return { path: await buildTemporalBinary(opts), source: 'built' };
}

// ---------------------------------------------------------------------------
// The dev server

export interface DevServerOptions {
  bin: string;
  dbFilename: string;
  port: number;
  uiPort: number;
  namespace?: string;
  ip?: string;
}

/** Arguments for `temporal server start-dev`, with Troupe's search attributes registered. */
export function devServerArgs(o: DevServerOptions): string[] {
  const args = ['server', 'start-dev', '--db-filename', o.dbFilename, '--ip', o.ip ?? '127.0.0.1'];
  args.push('--port', String(o.port), '--ui-port', String(o.uiPort), '--namespace', o.namespace ?? 'default');
  for (const [name, type] of Object.entries(TROUPE_SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${name}=${type}`);
  return args;
}

/** True when something accepts TCP connections on host:port. */
export function portInUse(port: number, host = '127.0.0.1', timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    const done = (v: boolean) => {
      socket.destroy();
      resolve(v);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** Poll until a Temporal frontend answers; fail early (with its log) if `rec`'s process dies. */
export async function waitForTemporal(address: string, opts: { timeoutMs?: number; rec?: ServiceRecord } = {}): Promise<string> {
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  for (;;) {
    const version = await temporalServerVersion(address, 2000);
    if (version) return version;
    if (opts.rec && !pidAlive(opts.rec.pid)) {
      throw new TroupeError(`the Temporal dev server exited during start-up: ${lastLine(opts.rec.log)}`, `see ${opts.rec.log}`);
    }
    if (Date.now() > deadline) {
      throw new TroupeError(
        `Temporal at ${address} did not become reachable in ${Math.round((opts.timeoutMs ?? 60_000) / 1000)}s`,
        opts.rec ? `see ${opts.rec.log}` : 'check that the server is running and the address is right',
      );
    }
    await sleep(300);
  }
}

function lastLine(file: string): string {
  const lines = tailFile(file, 40)
    .split('\n')
    .filter((l) => /error|fatal|unable|fail/i.test(l));
  return (lines.pop() ?? tailFile(file, 1)).slice(0, 300);
}

/** Start the dev server detached; recorded as `<state>/<name>.pid`, log `<state>/<name>.log`. */
export function startDevServer(o: DevServerOptions & { stateDir: string; name?: string }): ServiceRecord {
  fs.mkdirSync(path.dirname(o.dbFilename), { recursive: true });
  return spawnService({ stateDir: o.stateDir, name: o.name ?? 'temporal', command: o.bin, args: devServerArgs(o) });
}

export interface TemporalServer {
  address: string;
  namespace: string;
  /** True when `up` started (and `down` may stop) the dev server. */
  managed: boolean;
  /** Web UI, when we know it. */
  uiUrl?: string;
  serverVersion: string;
  rec?: ServiceRecord;
}

/** Attach to or start the Temporal server that the configuration asks for. */
export async function ensureTemporalServer(config: TroupeConfig, log: Log = stderrLog): Promise<TemporalServer> {
  const namespace = config.namespace;
  if (config.temporalAddress) {
    const version = await temporalServerVersion(config.temporalAddress, 3000, config);
    if (!version) {
      throw new TroupeError(
        `cannot reach Temporal at ${config.temporalAddress} (TEMPORAL_ADDRESS${config.temporalTls.enabled ? ', with TLS' : ''})`,
        config.temporalTls.enabled ? connectHint(config) : 'start that server, fix TEMPORAL_ADDRESS, or unset it to let Troupe run a local dev server',
      );
    }
    return { address: config.temporalAddress, namespace, managed: false, serverVersion: version };
  }
  if (config.temporalTls.enabled) {
    throw new ConfigError(
      config.temporalTls.apiKey ? 'TEMPORAL_API_KEY' : 'TEMPORAL_TLS',
      'TLS settings need TEMPORAL_ADDRESS: the local dev server serves plain gRPC on loopback',
      'set TEMPORAL_ADDRESS to the TLS frontend, or unset the TEMPORAL_TLS* / TEMPORAL_API_KEY variables',
    );
  }
  const address = temporalAddressOf(config);
  const uiUrl = `http://localhost:${config.temporalUiPort}`;
  const existing = runningService(config.stateDir, 'temporal');
  if (existing) {
    const version = await waitForTemporal(address, { rec: existing });
    return { address, namespace, managed: true, uiUrl, serverVersion: version, rec: existing };
  }
  if (await portInUse(config.temporalPort)) {
    const version = await temporalServerVersion(address);
    if (!version) {
      throw new TroupeError(
        `port ${config.temporalPort} is in use by something that is not a Temporal server`,
        `stop whatever listens there (e.g. \`ss -ltnp | grep ${config.temporalPort}\`), or set TROUPE_TEMPORAL_PORT to a free port`,
      );
    }
    log(`troupe: a Temporal server (not started by troupe) already answers at ${address}; using it`);
    return { address, namespace, managed: false, serverVersion: version };
  }
  if (await portInUse(config.temporalUiPort)) {
    throw new TroupeError(
      `port ${config.temporalUiPort} (Temporal Web UI) is in use by another program`,
      'stop it, or set TROUPE_TEMPORAL_UI_PORT to a free port',
    );
  }
  const bin = await ensureTemporalBinary({ temporalBin: config.temporalBin, log });
  const rec = startDevServer({
    bin: bin.path,
    stateDir: config.stateDir,
    dbFilename: path.join(config.stateDir, 'temporal.db'),
    port: config.temporalPort,
    uiPort: config.temporalUiPort,
    namespace,
  });
  log(`troupe: started Temporal dev server (pid ${rec.pid}, ${bin.path}); waiting for it...`);
  const version = await waitForTemporal(address, { rec }).catch((err) => {
    throw err instanceof TroupeError ? err : new TroupeError(errorMessage(err), `see ${rec.log}`);
  });
  return { address, namespace, managed: true, uiUrl, serverVersion: version, rec };
}
