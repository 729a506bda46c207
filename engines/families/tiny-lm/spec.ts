/**
 * The built-in policy family "tiny-lm": hyperparameters, validation, defaults and
 * the flat parameter layout shared by every graph, the weights format and init.
 *
 * Architecture (see forward.ts): the last W token ids (left-padded with the pad
 * id V, which is an extra embedding row and never a vocabulary token) are
 * embedded, concatenated into one W·E vector, passed through `layers` hidden
 * layers of width H (layer 1: act(x·W1+b1); layers ≥ 2 residual:
 * h + act(h·Wl+bl)), and projected to V next-token logits.
 */

import { ModelSpecError } from '../model-family';
import type { FieldIssue } from '../../../infra/issues';

export type Activation = 'tanh' | 'relu';

export type TinyLmSpec = {
  family: 'tiny-lm';
  /** V: token ids are 0..V−1 (the team's tokenizer). */
  vocabSize: number;
  /** W: number of most recent tokens the model sees. */
  contextWindow: number;
  /** E: embedding width per token. */
  embedDim: number;
  /** H: hidden width. */
  hiddenDim: number;
  /** number of hidden layers (the first is dense, later ones residual). */
  layers: number;
  activation: Activation;
};

export const TINY_LM_DEFAULTS = {
  contextWindow: 8,
  embedDim: 16,
  hiddenDim: 64,
  layers: 1,
  activation: 'tanh' as Activation,
};

/** Upper bounds keep a typo from allocating gigabytes inside the engine. */
export const TINY_LM_LIMITS = { vocabSize: 65536, contextWindow: 512, embedDim: 1024, hiddenDim: 4096, layers: 16 };

const FIELDS = ['family', 'vocabSize', 'contextWindow', 'embedDim', 'hiddenDim', 'layers', 'activation'];

/**
 * Fill defaults for missing/zero fields (the v1 wire sends 0 for "unset") and validate;
 * throws ModelSpecError naming every bad field under `prefix`.
 */
export function normalizeSpec(input: Partial<TinyLmSpec> & { family?: string }, prefix = 'spec'): TinyLmSpec {
  const issues: FieldIssue[] = [];
  const bad = (field: string, message: string) => issues.push({ path: `${prefix}.${field}`, message });
  for (const k of Object.keys(input)) if (!FIELDS.includes(k)) bad(k, `unknown option (tiny-lm options: ${FIELDS.slice(2).join(', ')})`);
  if ((input.family || 'tiny-lm') !== 'tiny-lm') bad('family', `must be "tiny-lm", got ${JSON.stringify(input.family)}`);
  const spec: TinyLmSpec = {
    family: 'tiny-lm',
    vocabSize: input.vocabSize ?? 0,
    contextWindow: input.contextWindow || TINY_LM_DEFAULTS.contextWindow,
    embedDim: input.embedDim || TINY_LM_DEFAULTS.embedDim,
    hiddenDim: input.hiddenDim || TINY_LM_DEFAULTS.hiddenDim,
    layers: input.layers || TINY_LM_DEFAULTS.layers,
    activation: (input.activation || TINY_LM_DEFAULTS.activation) as Activation,
  };
  const intField = (name: keyof typeof TINY_LM_LIMITS, min: number) => {
    const v = spec[name];
    if (!Number.isInteger(v) || v < min || v > TINY_LM_LIMITS[name]) bad(name, `must be an integer in [${min}, ${TINY_LM_LIMITS[name]}], got ${v}`);
  };
  intField('vocabSize', 2);
  intField('contextWindow', 1);
  intField('embedDim', 1);
  intField('hiddenDim', 1);
  intField('layers', 1);
  if (spec.activation !== 'tanh' && spec.activation !== 'relu') bad('activation', `must be "tanh" or "relu", got "${spec.activation}"`);
  if (issues.length > 0) throw new ModelSpecError(issues);
  return spec;
}

/** Canonical JSON (fixed key order) used to compare specs. */
export function specKey(s: TinyLmSpec): string {
  return JSON.stringify([s.family, s.vocabSize, s.contextWindow, s.embedDim, s.hiddenDim, s.layers, s.activation]);
}

export interface ParamSlot {
  name: string;
  offset: number;
  shape: number[];
  size: number;
  /** kind drives init only; AdamW treats every slot alike. */
  kind: 'embedding' | 'matrix' | 'bias';
  fanIn: number;
}

export interface ParamLayout {
  slots: ParamSlot[];
  total: number;
}

/** Flat parameter vector θ: emb[V+1,E], then per layer W[in,H], b[H], then Wo[H,V], bo[V]. */
export function paramLayout(s: TinyLmSpec): ParamLayout {
  const slots: ParamSlot[] = [];
  let offset = 0;
  const add = (name: string, shape: number[], kind: ParamSlot['kind'], fanIn: number) => {
    const size = shape.reduce((a, b) => a * b, 1);
    slots.push({ name, offset, shape, size, kind, fanIn });
    offset += size;
  };
  add('emb', [s.vocabSize + 1, s.embedDim], 'embedding', 1);
  for (let l = 0; l < s.layers; l++) {
    const fanIn = l === 0 ? s.contextWindow * s.embedDim : s.hiddenDim;
    add(`w${l}`, [fanIn, s.hiddenDim], 'matrix', fanIn);
    add(`b${l}`, [s.hiddenDim], 'bias', fanIn);
  }
  add('wo', [s.hiddenDim, s.vocabSize], 'matrix', s.hiddenDim);
  add('bo', [s.vocabSize], 'bias', s.hiddenDim);
  return { slots, total: offset };
}

export function padId(s: TinyLmSpec): number {
  return s.vocabSize;
}

/**
 * Left-padded window of the last W tokens of `seq` (as a view of the sequence
 * ending just before position `end`), written into `out` at `at`.
 */
export function writeWindow(s: TinyLmSpec, seq: ArrayLike<number>, end: number, out: BigInt64Array, at: number): void {
  const W = s.contextWindow;
  const pad = BigInt(padId(s));
  for (let j = 0; j < W; j++) {
    const src = end - W + j;
    out[at + j] = src >= 0 ? BigInt(seq[src]!) : pad;
  }
}
