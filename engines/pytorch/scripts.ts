/**
 * The PyTorch engine's Python scripts that Troupe runs beside the engine, with the engine's interpreter (the
 * caller finds it: stack/python-environment.ts): the layout of a LoRA adapter over a transformers-layout model
 * (`hf.py targets`, the engine's spec.target_shapes) and the export of such a model (`export.py`).
 */
import { spawnSync } from 'node:child_process';
import type { HfTarget } from '../checkpoints/peft';

/** engines/pytorch, where the scripts are. */
export const PYTORCH_ENGINE_DIR = __dirname;

/** A script that exited with an error: its message is the script's last line on stderr. */
export class EngineScriptError extends Error {}

/** Runs `python <script> ...args` in engines/pytorch; its stdout as JSON. */
export function runEngineScript(python: string, args: readonly string[], what: string): unknown {
  const r = spawnSync(python, args, { cwd: PYTORCH_ENGINE_DIR, encoding: 'utf8', timeout: 30 * 60_000, maxBuffer: 64 << 20 });
  const last = (r.stderr || r.error?.message || '').trim().split('\n').pop();
  if (r.error || r.status !== 0) throw new EngineScriptError(`${what} failed: ${last || `exit ${r.status}`}`);
  return JSON.parse(r.stdout) as unknown;
}

/** The modules a LoRA spec over a transformers-layout model targets, [name, fan in, fan out] in the adapter's order. */
export function hfTargets(python: string, spec: unknown): HfTarget[] {
  return runEngineScript(python, ['hf.py', 'targets', JSON.stringify(spec)], 'reading the adapter layout (hf.py targets)') as HfTarget[];
}
