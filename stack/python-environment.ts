/**
 * The PyTorch engine's Python environment. Troupe makes it itself, as it builds the Temporal
 * CLI: a virtual environment under its cache holding engines/pytorch/requirements.txt (every
 * package pinned by constraints.txt beside it), made on first use, once, under a lock, with pip's progress on stderr,
 * and marked ready only when complete, so a half-made one (a killed install) is made again.
 * The folder's name carries a hash of both files: a changed pin gets a new environment.
 *
 * `TROUPE_PYTHON` names an interpreter that already has the stack (the GPU image's): it is
 * used as it is and nothing is installed. `TROUPE_PYTHON_BASE` (default `python3`, 3.10 or
 * newer) is the interpreter the environment is made from.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { cacheDir } from '../infra/paths';
import { tryLockFile } from './lock';

const ENGINE_DIR = path.join(__dirname, '..', 'engines', 'pytorch');
export const REQUIREMENTS = path.join(ENGINE_DIR, 'requirements.txt');
export const CONSTRAINTS = path.join(ENGINE_DIR, 'constraints.txt');
/** What the engine imports: a probe of these decides whether an interpreter can run it. */
export const ENGINE_IMPORTS = ['torch', 'transformers', 'peft', 'safetensors', 'grpc', 'grpc_tools', 'google.protobuf', 'numpy'];
const READY = '.troupe-ready';
const INSTALL_TIMEOUT_MS = 30 * 60_000;

export type PythonEnvironment = { python: string; installed: boolean } | { missing: string };

/** The environment's folder: `<cache>/python/pytorch-engine-<hash of the two pin files>`. */
export function environmentDir(env: NodeJS.ProcessEnv = process.env): string {
  const h = createHash('sha256');
  for (const f of [REQUIREMENTS, CONSTRAINTS]) h.update(fs.readFileSync(f));
  h.update(`${process.platform}-${process.arch}`);
  return path.join(cacheDir(env), 'python', `pytorch-engine-${h.digest('hex').slice(0, 12)}`);
}

/** Whether `python` imports everything the engine needs; the last line of its error if not. */
export function probeImports(python: string): string | undefined {
  const r = spawnSync(python, ['-c', `import ${ENGINE_IMPORTS.join(', ')}`], { timeout: 120_000, encoding: 'utf8' });
  if (r.error) return `${python}: ${r.error.message}`;
  if (r.status !== 0) return `${python} cannot import the engine's packages (${(r.stderr || '').trim().split('\n').pop()})`;
  return undefined;
}

const sleepSync = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

function folderBytes(dir: string): number {
  let total = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) total += fs.statSync(path.join(e.parentPath, e.name)).size;
  }
  return total;
}

/**
 * The interpreter that runs the engine: TROUPE_PYTHON, else the cached environment, made now
 * when `install` (the default) and it is missing. Blocks while it installs (minutes, once).
 */
export function pythonEnvironment(opts: { install?: boolean; log?: (line: string) => void } = {}): PythonEnvironment {
  const log = opts.log ?? ((line: string) => process.stderr.write(line + '\n'));
  const own = process.env.TROUPE_PYTHON;
  if (own) {
    const problem = probeImports(own);
    return problem ? { missing: `TROUPE_PYTHON: ${problem} (it needs ${path.relative(process.cwd(), REQUIREMENTS)})` } : { python: own, installed: false };
  }
  const dir = environmentDir();
  const python = path.join(dir, 'bin', 'python');
  const ready = () => fs.existsSync(path.join(dir, READY));
  if (ready()) return { python, installed: false };
  if (opts.install === false)
    return { missing: `the engine's Python environment is not installed yet (${dir}); its first use installs it (~2.6 GB download, a few minutes)` };

  let told = false;
  for (;;) {
    const got = tryLockFile(`${dir}.lock`);
    if (typeof got === 'function') {
      try {
        return ready() ? { python, installed: false } : install(dir, log);
      } finally {
        got();
      }
    }
    if (got === process.pid) {
      fs.rmSync(`${dir}.lock`, { force: true }); // this process's own leftover
      continue;
    }
    if (!told) log(`troupe: waiting for another install of the PyTorch engine's environment (pid ${got}) to finish...`);
    told = true;
    sleepSync(1000);
  }
}

function install(dir: string, log: (line: string) => void): PythonEnvironment {
  const base = process.env.TROUPE_PYTHON_BASE || 'python3';
  const t0 = Date.now();
  const version = spawnSync(base, ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'], { encoding: 'utf8', timeout: 30_000 });
  if (version.error || version.status !== 0)
    return {
      missing: `no Python to make the engine's environment from: ${base} did not run (set TROUPE_PYTHON_BASE, or TROUPE_PYTHON to a ready interpreter)`,
    };
  const [major = 0, minor = 0] = version.stdout.trim().split('.').map(Number);
  if (major < 3 || (major === 3 && minor < 10))
    return { missing: `${base} is Python ${version.stdout.trim()}; the engine needs 3.10 or newer (set TROUPE_PYTHON_BASE)` };

  fs.rmSync(dir, { recursive: true, force: true }); // a half-made one from an install that was killed
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  log(
    `troupe: installing the PyTorch engine's Python packages (${path.basename(REQUIREMENTS)}: torch, transformers, peft, grpcio) into ${dir}, once (~2.6 GB download)...`,
  );
  const venv = spawnSync(base, ['-m', 'venv', dir], { encoding: 'utf8', timeout: 120_000 });
  if (venv.error || venv.status !== 0) {
    fs.rmSync(dir, { recursive: true, force: true });
    return { missing: `${base} -m venv failed: ${(venv.stderr || venv.error?.message || '').trim().split('\n').pop()} (Debian: apt-get install python3-venv)` };
  }
  const python = path.join(dir, 'bin', 'python');
  const pip = spawnSync(
    python,
    ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '--progress-bar', 'off', '-r', REQUIREMENTS, '-c', CONSTRAINTS],
    { stdio: ['ignore', 2, 2], timeout: INSTALL_TIMEOUT_MS },
  );
  if (pip.error || pip.status !== 0) {
    fs.rmSync(dir, { recursive: true, force: true });
    return { missing: `pip could not install the engine's packages (${pip.error?.message ?? `exit ${pip.status}`}; its output is above)` };
  }
  const problem = probeImports(python);
  if (problem) {
    fs.rmSync(dir, { recursive: true, force: true });
    return { missing: problem };
  }
  fs.writeFileSync(path.join(dir, READY), `${new Date().toISOString()}\n`);
  log(`troupe: the engine's environment is ready: ${(folderBytes(dir) / 2 ** 30).toFixed(1)} GiB in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  return { python, installed: true };
}
