'use strict';
// Plain JavaScript, Node built-ins only: this runs before node_modules exists.
// Shared by cli/bin.js (the `troupe` command) and tools/test.js (`npm test`).
//
// ensurePackages(repoRoot): runs `npm ci` when node_modules is missing or older
// than package-lock.json. ensureProtocolTypes(repoRoot): then generates the engine
// protocol's TypeScript messages from engines/protocol/engine.proto when they are
// missing or older than it. ensureDashboardBuild(repoRoot): then builds the dashboard's
// page with Vite when dashboard/dist is missing or older than its sources. npm writes node_modules/.package-lock.json at the end of
// every install, so its mtime is when node_modules was last brought in line with a
// lockfile. A lock file in the temp dir (one per clone) keeps two concurrent
// callers from running `npm ci` over each other.

const fs = require('node:fs');
const path = require('node:path');
const os = require('node:os');
const crypto = require('node:crypto');
const { spawnSync } = require('node:child_process');

function mtimeMs(file) {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

/** Why node_modules needs (re)installing, or undefined when it is up to date. */
function packagesStaleReason(repoRoot) {
  const lock = mtimeMs(path.join(repoRoot, 'package-lock.json'));
  const installed = mtimeMs(path.join(repoRoot, 'node_modules', '.package-lock.json'));
  if (installed === undefined) return 'node_modules is missing';
  if (lock !== undefined && installed < lock) return 'node_modules is older than package-lock.json';
  return undefined;
}

function sleepMs(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/** Take an exclusive lock file (O_EXCL), waiting while a live process holds it. */
function withLockFile(lockPath, onWait, fn) {
  const deadline = Date.now() + 30 * 60 * 1000;
  let told = false;
  for (;;) {
    try {
      const fd = fs.openSync(lockPath, 'wx');
      fs.writeSync(fd, String(process.pid));
      fs.closeSync(fd);
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
      let holder = NaN;
      try {
        holder = Number(fs.readFileSync(lockPath, 'utf8').trim());
      } catch {
        continue; // removed between open and read: try again
      }
      if (!Number.isInteger(holder) || !pidAlive(holder)) {
        fs.rmSync(lockPath, { force: true }); // stale: its owner died
        continue;
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${lockPath} (held by pid ${holder})`);
      if (!told) {
        onWait(holder);
        told = true;
      }
      sleepMs(500);
    }
  }
  try {
    return fn();
  } finally {
    fs.rmSync(lockPath, { force: true });
  }
}

/**
 * The environment of Troupe's own `npm ci`: onnxruntime-node installs CPU-only (its install
 * script reads ONNXRUNTIME_NODE_INSTALL; "skip" keeps it from downloading CUDA libraries) unless
 * the caller chose otherwise, e.g. ONNXRUNTIME_NODE_INSTALL=cuda12 (README "GPU hosts"). An env
 * var, not an .npmrc key: npm 11 warns about unknown .npmrc keys on every `npx troupe`.
 */
function npmEnv(env = process.env) {
  return { ...env, ONNXRUNTIME_NODE_INSTALL: env.ONNXRUNTIME_NODE_INSTALL || 'skip' };
}

function runNpm(repoRoot, args, capture) {
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, args, {
    cwd: repoRoot,
    env: npmEnv(),
    encoding: 'utf8',
    stdio: capture ? ['ignore', 'pipe', 'pipe'] : ['ignore', 2, 2],
  });
  return { error: r.error, status: r.status, output: capture ? `${r.stdout || ''}${r.stderr || ''}` : '' };
}

function fail(log, what, r, repoRoot) {
  if (r.error) log(`troupe: could not run npm: ${r.error.message}`);
  else log(`troupe: \`${what}\` failed (exit ${r.status}); see its output above.`);
  log(`  → ${r.error ? 'install Node.js ≥ 20 with npm, then ' : 'fix the problem it reports, then '}run \`npm ci\` in ${repoRoot}`);
  process.exit(r.status || 1);
}

/**
 * Make sure node_modules matches package-lock.json, running `npm ci` if not.
 * Returns true when it installed. Exits the process with npm's status on failure.
 *
 * npm ci's strict check also wants lockfile entries for optional packages of other
 * platforms (e.g. @swc/core-darwin-arm64). A registry that lacks those can never
 * satisfy it; then we fall back to `npm install`, which installs the locked versions
 * and tolerates the missing optional ones (and says so if it changed the lockfile).
 */
function ensurePackages(repoRoot, log = (line) => process.stderr.write(line + '\n')) {
  if (!packagesStaleReason(repoRoot)) return false;
  const id = crypto.createHash('sha1').update(path.resolve(repoRoot)).digest('hex').slice(0, 12);
  const lockPath = path.join(os.tmpdir(), `troupe-npm-ci-${id}.lock`);
  return withLockFile(
    lockPath,
    (pid) => log(`troupe: waiting for another install (pid ${pid}) to finish...`),
    () => {
      const reason = packagesStaleReason(repoRoot); // someone else may have just installed
      if (!reason) return false;
      log(`troupe: ${reason}; running \`npm ci\` (once, takes a minute)...`);
      const ci = runNpm(repoRoot, ['ci', '--no-audit', '--no-fund'], true);
      if (ci.error) fail(log, 'npm ci', ci, repoRoot);
      if (ci.status === 0) return true;
      if (!/in sync/.test(ci.output)) {
        process.stderr.write(ci.output);
        fail(log, 'npm ci', ci, repoRoot);
      }
      const missing = [...ci.output.matchAll(/Missing: (\S+?)@\S* from lock file/g)].map((m) => m[1]);
      log(
        `troupe: npm ci refused the lockfile (${missing.length ? `no entries for ${missing.join(', ')}` : 'not in sync'}); ` +
          'falling back to `npm install`, which keeps the locked versions...',
      );
      const lockFile = path.join(repoRoot, 'package-lock.json');
      const before = fs.existsSync(lockFile) ? fs.readFileSync(lockFile, 'utf8') : '';
      const install = runNpm(repoRoot, ['install', '--no-audit', '--no-fund'], false);
      if (install.error || install.status !== 0) fail(log, 'npm install', install, repoRoot);
      const after = fs.existsSync(lockFile) ? fs.readFileSync(lockFile, 'utf8') : '';
      if (before !== after) log('troupe: note: `npm install` changed package-lock.json (see `git diff package-lock.json`)');
      return true;
    },
  );
}

/** Newest mtime of the files under dir (recursively), or undefined when there are none. */
function newestMtimeMs(dir) {
  let newest;
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return undefined;
  }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    const t = e.isDirectory() ? newestMtimeMs(p) : mtimeMs(p);
    if (t !== undefined && (newest === undefined || t > newest)) newest = t;
  }
  return newest;
}

/** Why the dashboard's page needs (re)building, or undefined when dashboard/dist is up to date. */
function dashboardStaleReason(repoRoot) {
  const built = mtimeMs(path.join(repoRoot, 'dashboard', 'dist', 'index.html'));
  if (built === undefined) return 'the dashboard page is not built';
  // its sources: dashboard/web, and the one module below it the page bundles
  const sources = Math.max(
    newestMtimeMs(path.join(repoRoot, 'dashboard', 'web')) ?? -Infinity,
    mtimeMs(path.join(repoRoot, 'activities', 'training', 'partial-panels.ts')) ?? -Infinity,
  );
  const packages = mtimeMs(path.join(repoRoot, 'node_modules', '.package-lock.json'));
  if (sources > built || (packages !== undefined && packages > built)) return 'the dashboard page is older than its sources';
  return undefined;
}

/**
 * Builds the dashboard's page (dashboard/web → dashboard/dist, with Vite) when it is
 * missing or older than its sources or packages. Run after ensurePackages; exits on failure.
 */
function ensureDashboardBuild(repoRoot, log = (line) => process.stderr.write(line + '\n')) {
  if (!dashboardStaleReason(repoRoot)) return false;
  const id = crypto.createHash('sha1').update(path.resolve(repoRoot)).digest('hex').slice(0, 12);
  return withLockFile(
    path.join(os.tmpdir(), `troupe-dashboard-build-${id}.lock`),
    (pid) => log(`troupe: waiting for another dashboard build (pid ${pid}) to finish...`),
    () => {
      const reason = dashboardStaleReason(repoRoot);
      if (!reason) return false;
      log(`troupe: ${reason}; building it with Vite...`);
      const vite = path.join(repoRoot, 'node_modules', 'vite', 'bin', 'vite.js');
      const r = spawnSync(process.execPath, [vite, 'build', path.join(repoRoot, 'dashboard', 'web'), '--logLevel', 'warn'], {
        cwd: repoRoot,
        encoding: 'utf8',
        stdio: ['ignore', 2, 2],
      });
      if (r.error || r.status !== 0) {
        log(`troupe: the dashboard build failed (${r.error ? r.error.message : `exit ${r.status}`}; output above)`);
        log(`  → fix it, then run \`node ${vite} build dashboard/web\` in ${repoRoot}`);
        process.exit(r.status || 1);
      }
      return true;
    },
  );
}

// ---- engine protocol types ----

const PROTOCOL_DIR = path.join('engines', 'protocol');
/** The generated module: engines/protocol/gen/engine.ts (ignored by git, like dashboard/dist). */
const PROTOCOL_OUT = path.join(PROTOCOL_DIR, 'gen', 'engine.ts');
// ts-proto's options: camelCase fields, uint64 as decimal strings (seeds span all 64 bits),
// enums by name, bytes as Uint8Array, a generic service definition (engines/protocol/proto.ts
// builds grpc-js's from it), no JSON codecs.
const TS_PROTO_OPTIONS = ['forceLong=string', 'stringEnums=true', 'outputServices=generic-definitions', 'outputJsonMethods=false'];

/** Why the protocol types need (re)generating, or undefined when they are up to date. */
function protocolStaleReason(repoRoot) {
  const generated = mtimeMs(path.join(repoRoot, PROTOCOL_OUT));
  if (generated === undefined) return 'the engine protocol types are not generated';
  const proto = mtimeMs(path.join(repoRoot, PROTOCOL_DIR, 'engine.proto'));
  const packages = mtimeMs(path.join(repoRoot, 'node_modules', '.package-lock.json'));
  if ((proto !== undefined && proto > generated) || (packages !== undefined && packages > generated))
    return 'the engine protocol types are older than engine.proto or the installed packages';
  return undefined;
}

/**
 * Generates engines/protocol/gen/engine.ts from engine.proto with ts-proto, through the
 * buf CLI (both npm packages: no protoc needed). Run after ensurePackages; exits on failure.
 * Writes aside and renames, so a concurrent reader never sees half a file.
 */
function ensureProtocolTypes(repoRoot, log = (line) => process.stderr.write(line + '\n')) {
  if (!protocolStaleReason(repoRoot)) return false;
  const id = crypto.createHash('sha1').update(path.resolve(repoRoot)).digest('hex').slice(0, 12);
  return withLockFile(
    path.join(os.tmpdir(), `troupe-protocol-gen-${id}.lock`),
    (pid) => log(`troupe: waiting for another protocol generation (pid ${pid}) to finish...`),
    () => {
      const reason = protocolStaleReason(repoRoot);
      if (!reason) return false;
      log(`troupe: ${reason}; generating them...`);
      const out = path.join(repoRoot, PROTOCOL_OUT);
      const aside = fs.mkdtempSync(path.join(path.dirname(path.dirname(out)), '.gen-'));
      const plugin = path.join(repoRoot, 'node_modules', 'ts-proto', 'protoc-gen-ts_proto');
      const template = { version: 'v2', plugins: [{ local: [process.execPath, plugin], out: aside, opt: TS_PROTO_OPTIONS }] };
      const buf = path.join(repoRoot, 'node_modules', '@bufbuild', 'buf', 'bin', 'buf');
      const r = spawnSync(process.execPath, [buf, 'generate', path.join(repoRoot, PROTOCOL_DIR), '--template', JSON.stringify(template)], {
        cwd: repoRoot,
        encoding: 'utf8',
        stdio: ['ignore', 2, 2],
      });
      try {
        if (r.error || r.status !== 0) {
          log(`troupe: generating the engine protocol types failed (${r.error ? r.error.message : `exit ${r.status}`}; output above)`);
          log(`  → fix it, then run \`node stack/install.js\` in ${repoRoot}`);
          process.exit(r.status || 1);
        }
        fs.mkdirSync(path.dirname(out), { recursive: true });
        fs.renameSync(path.join(aside, 'engine.ts'), out);
      } finally {
        fs.rmSync(aside, { recursive: true, force: true });
      }
      return true;
    },
  );
}

// ---- onnxruntime-node for an installed Troupe ----

/**
 * Whether `root` is a source checkout of Troupe (it has the lockfile, which npm never packs)
 * rather than the package installed into a project's node_modules.
 */
function isSourceCheckout(root) {
  return fs.existsSync(path.join(root, 'package-lock.json')) && !root.split(path.sep).includes('node_modules');
}

/** `$XDG_CACHE_HOME/troupe`, else `~/.cache/troupe` (as infra/paths.ts cacheDir). */
function cacheDir(env = process.env) {
  const base = env.XDG_CACHE_HOME && env.XDG_CACHE_HOME.trim() !== '' ? env.XDG_CACHE_HOME : path.join(os.homedir(), '.cache');
  return path.join(base, 'troupe');
}

/**
 * The built-in engine's runtime for an installed Troupe. onnxruntime-node is an optional peer
 * dependency, not a dependency: as a dependency its install script would run in the user's
 * `npm install` and download CUDA libraries from outside the package registries (failing the
 * whole install on a machine that reaches only those), and a dependent project cannot pass
 * it ONNXRUNTIME_NODE_INSTALL=skip. So: a project that installed onnxruntime-node itself
 * (e.g. `ONNXRUNTIME_NODE_INSTALL=cuda12 npm install onnxruntime-node@1.30.0` on a GPU host)
 * gets that one; otherwise the first command installs it once into the cache with
 * ONNXRUNTIME_NODE_INSTALL=skip (CPU build; set ONNXRUNTIME_NODE_INSTALL=cuda12 to opt in to
 * CUDA) and puts it on NODE_PATH for this process and its children. Exits on failure.
 */
function ensureOnnxRuntime(root, log = (line) => process.stderr.write(line + '\n')) {
  try {
    require.resolve('onnxruntime-node', { paths: [root] });
    return undefined;
  } catch {
    /* not installed beside Troupe: use (or make) the cached one */
  }
  const version = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).peerDependencies['onnxruntime-node'];
  const flavor = npmEnv().ONNXRUNTIME_NODE_INSTALL;
  const dir = path.join(cacheDir(), `onnxruntime-node-${version}${flavor === 'skip' ? '' : `-${flavor}`}`);
  const installed = () => fs.existsSync(path.join(dir, 'node_modules', 'onnxruntime-node', 'package.json'));
  if (!installed()) {
    fs.mkdirSync(dir, { recursive: true });
    withLockFile(
      path.join(dir, '.install.lock'),
      (pid) => log(`troupe: waiting for another install of onnxruntime-node (pid ${pid}) to finish...`),
      () => {
        if (installed()) return;
        log(`troupe: installing onnxruntime-node ${version} (${flavor === 'skip' ? 'CPU' : flavor}) into ${dir}, once...`);
        fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ private: true, description: 'the engine runtime of Troupe' }) + '\n');
        const r = runNpm(dir, ['install', `onnxruntime-node@${version}`, '--no-audit', '--no-fund', '--no-package-lock'], false);
        if (r.error || r.status !== 0) fail(log, `npm install onnxruntime-node@${version}`, r, dir);
      },
    );
  }
  const modules = path.join(dir, 'node_modules');
  const current = (process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean);
  if (!current.includes(modules)) {
    process.env.NODE_PATH = [...current, modules].join(path.delimiter);
    require('node:module').Module._initPaths();
  }
  return modules;
}

/** Everything a fresh clone needs before its TypeScript runs or typechecks, in order. */
function ensureInstalled(repoRoot, log) {
  ensurePackages(repoRoot, log);
  ensureProtocolTypes(repoRoot, log);
  ensureDashboardBuild(repoRoot, log);
}

// `node stack/install.js` (npm run typecheck runs it first)
if (require.main === module) ensureInstalled(path.join(__dirname, '..'));

module.exports = {
  npmEnv,
  isSourceCheckout,
  ensureOnnxRuntime,
  ensureInstalled,
  ensurePackages,
  packagesStaleReason,
  ensureProtocolTypes,
  protocolStaleReason,
  ensureDashboardBuild,
  dashboardStaleReason,
  withLockFile,
  pidAlive,
};
