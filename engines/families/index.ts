/**
 * The registry of model families, by name. Adding a family: write its folder
 * (`<name>/family.ts` implementing ModelFamily, `<name>/runtime.ts` exporting
 * `createRuntime`) and add one line here. Workflow-safe (no onnxruntime).
 */
import { ModelSpecError, type ModelFamily, type ModelSpec } from './model-family';
import { tinyLmFamily } from './tiny-lm/family';
import { transformerFamily } from './transformer/family';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each family checks its own spec type in normalize
const FAMILIES: Record<string, ModelFamily<any>> = {
  'tiny-lm': tinyLmFamily,
  transformer: transformerFamily,
};

export const FAMILY_NAMES = Object.keys(FAMILIES);

/** The family of a spec (empty = tiny-lm, the protocol's v1 default); throws ModelSpecError naming `${prefix}.family`. */
export function familyOf(name: string | undefined, prefix = 'spec'): ModelFamily {
  const f = FAMILIES[name || 'tiny-lm'];
  if (!f) throw new ModelSpecError([{ path: `${prefix}.family`, message: `unknown model family ${JSON.stringify(name)} (known: ${FAMILY_NAMES.join(', ')})` }]);
  return f;
}

/** Validate and fill defaults with the spec's family; throws ModelSpecError with every issue by path. */
export function normalizeModelSpec(input: unknown, prefix = 'spec'): ModelSpec {
  if (typeof input !== 'object' || input === null) throw new ModelSpecError([{ path: prefix, message: 'must be an object' }]);
  const family = (input as { family?: unknown }).family;
  if (family !== undefined && typeof family !== 'string') throw new ModelSpecError([{ path: `${prefix}.family`, message: 'must be a string' }]);
  return familyOf(family, prefix).normalize(input, prefix);
}

export const specKey = (s: ModelSpec): string => familyOf(s.family).key(s);
export const paramCount = (s: ModelSpec): number => familyOf(s.family).paramLayout(s).total;
export const describeSpec = (s: ModelSpec): string => familyOf(s.family).describe(s);

/** One line for a stored or user-given spec (`transformer D64 L2 … V14, 105,472 parameters`), or what is wrong with it. */
export function describeModel(input: unknown): string {
  try {
    const s = normalizeModelSpec(input);
    return `${describeSpec(s)} V${s.vocabSize}, ${paramCount(s).toLocaleString('en-US')} parameters`;
  } catch (e) {
    return `invalid spec (${(e as Error).message})`;
  }
}
