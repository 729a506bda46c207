/**
 * Builds a spec's runtime from its family's `<family>/runtime.ts`
 * (`createRuntime`). Loaded by name here, in the engine process only, so that
 * the family registry (families.ts), which team code imports inside the
 * workflow sandbox, never pulls in onnxruntime.
 */
import * as path from 'node:path';
import { familyOf } from '../families';
import type { ModelSpec } from '../families/model-family';
import type { ModelRuntime, RowPolicy, SessionFactory } from './model-runtime';

type CreateRuntime = (spec: ModelSpec, factory: SessionFactory, rows: RowPolicy) => ModelRuntime;

export function createRuntime(spec: ModelSpec, factory: SessionFactory, rows: RowPolicy): ModelRuntime {
  const family = familyOf(spec.family);
  const mod = require(path.join(__dirname, family.name, 'runtime')) as { createRuntime?: CreateRuntime };
  if (typeof mod.createRuntime !== 'function') throw new Error(`model family ${family.name}: ${family.name}/runtime.ts must export createRuntime`);
  return mod.createRuntime(spec, factory, rows);
}
