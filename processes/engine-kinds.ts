/**
 * Engines a pool worker can spawn, by name (`troupe worker pool --engine NAME`, env TROUPE_ENGINE):
 * each is a command line that keeps the built-in engine's (processes/onnx-engine.ts) launch contract (engines/protocol/README.md).
 * Adding an engine = its own directory plus one line here. An engine running elsewhere needs
 * none of this: point the pool worker at it with --engine-address.
 */
import * as path from 'node:path';
import { pytorchEngine } from '../stack/pytorch-engine';
import { TroupeError } from '../infra/errors';

/** The built-in engine's entry point (processes/onnx-engine.ts); the library that spawns engines is given its command line. */
export const ENGINE_MAIN = path.join(__dirname, 'onnx-engine.ts');

/** The built-in engine's command line (processes/onnx-engine.ts under this Node). */
export const BUILT_IN_ENGINE_COMMAND: readonly string[] = [process.execPath, '--import', 'tsx', ENGINE_MAIN];

export const ENGINE_KINDS: Record<string, () => readonly string[]> = {
  /** the built-in ONNX Runtime engine (engines/onnx/) */
  onnx: () => BUILT_IN_ENGINE_COMMAND,
  /** the PyTorch engine (engines/pytorch/), in its own Python environment (installed on first use) */
  pytorch: () => {
    const e = pytorchEngine();
    if ('missing' in e) throw new TroupeError(e.missing);
    return e.command;
  },
};

export const DEFAULT_ENGINE_KIND = 'onnx';

/** The command line of engine `kind`; an unknown name or an engine that cannot run here is a TroupeError saying why. */
export function engineCommand(kind: string): readonly string[] {
  const make = ENGINE_KINDS[kind];
  if (!make)
    throw new TroupeError(
      `engine: unknown engine "${kind}" (known: ${Object.keys(ENGINE_KINDS).join(', ')})`,
      'pass --engine onnx or --engine pytorch (or TROUPE_ENGINE)',
    );
  return make();
}
