/**
 * How the rest of Troupe launches the PyTorch engine (engines/pytorch/server.py): with the
 * interpreter of its own Python environment (python-environment.ts: TROUPE_PYTHON, else a virtual
 * environment under Troupe's cache, installed on first use). Cached per process.
 *
 *   const e = pytorchEngine();
 *   if ('missing' in e) skip(e.missing); else spawn(e.command[0], [...e.command.slice(1), '--port', '0', '--exit-with-stdin']);
 */
import * as path from 'node:path';
import { pythonEnvironment } from './python-environment';

export const PYTORCH_SERVER = path.join(__dirname, '..', 'engines', 'pytorch', 'server.py');

export type PytorchEngine = { command: string[] } | { missing: string };

let cached: PytorchEngine | undefined;

/**
 * The command that starts the engine (append flags), or why it cannot start here. Installs
 * the engine's environment when it is missing, unless `install` is false (`troupe doctor`).
 */
export function pytorchEngine(opts: { install?: boolean } = {}): PytorchEngine {
  if (cached) return cached;
  const env = pythonEnvironment({ install: opts.install });
  const result: PytorchEngine = 'missing' in env ? { missing: `PyTorch engine unavailable: ${env.missing}` } : { command: [env.python, PYTORCH_SERVER] };
  if (!('missing' in result) || opts.install !== false) cached = result;
  return result;
}
