/**
 * Python tools the tests check Troupe against (TensorBoard's reader, an MLflow server), each in
 * a virtual environment under Troupe's cache made the way stack/python-environment.ts makes the
 * engine's: from a pinned requirements file in test/fixtures/observability/, once, under a
 * lock, marked ready only when complete. pip installs exactly the file's packages (--no-deps):
 * each file pins the whole set, which may leave out declared dependencies the tool never imports.
 * The folder's name carries the file's hash, so a changed pin gets a new environment. Made from TROUPE_PYTHON_BASE (default python3).
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { cacheDir } from '../../infra/paths';
import { tryLockFile } from '../../stack/lock';

const FIXTURES = path.join(__dirname, '..', 'fixtures', 'observability');
const READY = '.troupe-ready';
const sleepSync = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/**
 * The python of the environment `<name>-requirements.txt` describes, made now if missing
 * (throws, naming why, when it cannot be: pip's output is on stderr).
 */
export function pythonTool(name: string): string {
  const requirements = path.join(FIXTURES, `${name}-requirements.txt`);
  const hash = createHash('sha256').update(fs.readFileSync(requirements)).update(`${process.platform}-${process.arch}`).digest('hex').slice(0, 12);
  const dir = path.join(cacheDir(), 'python', `test-${name}-${hash}`);
  const python = path.join(dir, 'bin', 'python');
  for (;;) {
    if (fs.existsSync(path.join(dir, READY))) return python;
    const got = tryLockFile(`${dir}.lock`);
    if (typeof got === 'function') {
      try {
        if (!fs.existsSync(path.join(dir, READY))) make(dir, requirements);
      } finally {
        got();
      }
    } else if (got === process.pid) fs.rmSync(`${dir}.lock`, { force: true });
    else sleepSync(1000);
  }
}

function make(dir: string, requirements: string): void {
  const base = process.env.TROUPE_PYTHON_BASE || 'python3';
  const t0 = Date.now();
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  process.stderr.write(`test: installing ${path.basename(requirements)} into ${dir}, once...\n`);
  const run = (cmd: string, args: string[]) => {
    const r = spawnSync(cmd, args, { stdio: ['ignore', 2, 2], timeout: 15 * 60_000 });
    if (r.error || r.status !== 0) {
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(`${cmd} ${args.slice(0, 3).join(' ')} failed (${r.error?.message ?? `exit ${r.status}`}); its output is above`);
    }
  };
  run(base, ['-m', 'venv', dir]);
  run(path.join(dir, 'bin', 'python'), [
    '-m',
    'pip',
    'install',
    '--disable-pip-version-check',
    '--no-input',
    '--progress-bar',
    'off',
    '--no-deps',
    '-q',
    '-r',
    requirements,
  ]);
  fs.writeFileSync(path.join(dir, READY), `${new Date().toISOString()}\n`);
  process.stderr.write(`test: ${path.basename(requirements)} ready in ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
}
