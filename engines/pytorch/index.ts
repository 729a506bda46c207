/**
 * How the rest of Troupe launches the PyTorch engine (engines/pytorch/server.py):
 * the interpreter (env TROUPE_PYTHON, else /usr/bin/python3, else python3), checked
 * once per process that it imports torch and grpc and that protoc and
 * grpc_python_plugin (which generate the stubs at start-up) are on PATH.
 *
 *   const e = pytorchEngine();
 *   if ('missing' in e) skip(e.missing); else spawn(e.command[0], [...e.command.slice(1), '--port', '0', '--exit-with-stdin']);
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

export const PYTORCH_SERVER = path.join(__dirname, 'server.py');
export const PYTORCH_DEBIAN_PACKAGES = 'python3-torch python3-grpcio protobuf-compiler protobuf-compiler-grpc';

export type PytorchEngine = { command: string[] } | { missing: string };

let cached: PytorchEngine | undefined;

function interpreter(): string {
  const env = process.env.TROUPE_PYTHON;
  if (env) return env;
  if (fs.existsSync('/usr/bin/python3')) return '/usr/bin/python3';
  return 'python3';
}

function onPath(tool: string): boolean {
  const r = spawnSync('sh', ['-c', `command -v ${tool}`], { timeout: 5000, encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() !== '';
}

/** The command that starts the engine (append flags), or why it cannot start here. Cached. */
export function pytorchEngine(): PytorchEngine {
  if (cached) return cached;
  const python = interpreter();
  const problems: string[] = [];
  const r = spawnSync(python, ['-c', 'import torch, grpc, google.protobuf, numpy; print(torch.__version__)'], { timeout: 60_000, encoding: 'utf8' });
  if (r.error) problems.push(`${python}: ${r.error.message}`);
  else if (r.status !== 0) problems.push(`${python} cannot import torch/grpc/protobuf/numpy (${(r.stderr || '').trim().split('\n').pop()})`);
  for (const tool of ['protoc', 'grpc_python_plugin']) if (!onPath(tool)) problems.push(`${tool} not on PATH`);
  cached =
    problems.length > 0
      ? { missing: `PyTorch engine unavailable: ${problems.join('; ')} (Debian: apt-get install ${PYTORCH_DEBIAN_PACKAGES}; or set TROUPE_PYTHON)` }
      : { command: [python, PYTORCH_SERVER] };
  return cached;
}
