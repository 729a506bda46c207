/**
 * Request validation. Every check names the offending field by path, so a bad
 * request comes back as INVALID_ARGUMENT with a message a caller can act on,
 * before anything touches the device or the cache.
 */
import { invalid } from '../protocol/errors';
import { seedKey } from '../families/philox';
import { familyOf, normalizeModelSpec } from '../families';
import { ModelSpecError, type ModelSpec } from '../families/model-family';
import { type TransformerSpec, transformerSpecKey } from '../families/transformer/spec';
import { loraSpecOf } from '../families/transformer/lora';
import { checkpointSpecOf, HfCheckpointError, loadHfCheckpoint } from '../checkpoints/hf-layout';
import { HfConfigError } from '../checkpoints/hf-config';
import type { GenerateRow, UpdateSample, UpdateSettings } from './model-runtime';
import {
  DEFAULT_UPDATE_SETTINGS,
  ENGINE_LIMITS,
  type GenerateRequest,
  type ModelSpecInput,
  type SamplingParams,
  type ScoreRequest,
  type UpdateRequest,
  type UpdateSettingsInput,
} from '../protocol/types';

/** The engine contract's request limits (engines/protocol/contract.json). */
export const LIMITS = ENGINE_LIMITS;

export function modelKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0) throw invalid('model_key: required');
  if (key.length > LIMITS.modelKeyLength) throw invalid(`model_key: longer than ${LIMITS.modelKeyLength} characters`);
  return key;
}

export function versionNumber(v: unknown, field = 'version'): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw invalid(`${field}: must be a non-negative integer below 2^53, got ${String(v)}`);
  }
  return v;
}

/** A normalized spec whose smallest run fits in `memoryBytes` (the family's checkMemory); a LoRA spec names its base. */
export function spec(s: ModelSpecInput | undefined, memoryBytes: number): ModelSpec {
  if (!s) throw invalid('spec: required');
  let spec: ModelSpec;
  try {
    spec = normalizeModelSpec(s);
    familyOf(spec.family).checkMemory?.(spec, memoryBytes, 'spec');
  } catch (e) {
    if (e instanceof ModelSpecError) throw invalid(e.message);
    throw e;
  }
  const lora = loraSpecOf(spec)?.lora;
  // a team's spec leaves the base out (the run fills it in); the engine must know which θ to adapt
  if (lora && lora.baseSeed === undefined && lora.baseCheckpoint === undefined)
    throw invalid("spec.lora.baseSeed: required (the seed of the frozen base's version 0), or lora.baseCheckpoint");
  return spec;
}

/**
 * The checkpoint an InitModel spec names (`{family: "transformer", checkpoint: "/abs/dir", maxSeq?}`), loaded:
 * its spec and θ as engines/checkpoints/hf-layout.ts gives them; undefined for a plain spec. A directory that
 * cannot be the model is INVALID_REQUEST naming spec.checkpoint (or the field), nothing loaded.
 * With `lora` beside `checkpoint` it is an adapter over the directory: the spec is the directory's with that
 * lora and `lora.baseCheckpoint` the directory, θ the base's (as engines/pytorch/server.py's spec_from_wire).
 */
export function checkpoint(s: ModelSpecInput | undefined): { spec: ModelSpecInput; theta: Float32Array } | undefined {
  if (s && 'checkpoint' in s && typeof s.lora === 'object' && s.lora !== null) {
    const { lora, ...base } = s;
    if ('baseSeed' in lora || 'baseCheckpoint' in lora)
      throw invalid('spec.lora: over a checkpoint the base is the checkpoint; leave baseSeed and baseCheckpoint out');
    const loaded = checkpoint(base)!;
    return { spec: { ...loaded.spec, lora: { ...lora, baseCheckpoint: base.checkpoint } }, theta: loaded.theta };
  }
  try {
    const ck = checkpointSpecOf(s);
    if (!ck) return undefined;
    const loaded = loadHfCheckpoint(ck.dir, ck.maxSeq === undefined ? {} : { maxSeq: ck.maxSeq });
    const V = (s as { vocabSize?: number }).vocabSize;
    if (V !== undefined && V !== 0 && V !== loaded.spec.vocabSize)
      throw invalid(`spec.vocab_size: ${V}, but the checkpoint's config.json has vocab_size ${loaded.spec.vocabSize} (send 0 or that)`);
    return { spec: loaded.spec as ModelSpecInput, theta: loaded.theta };
  } catch (e) {
    throw checkpointFault(e, 'spec.checkpoint');
  }
}

/**
 * θ of a LoRA base named by its directory, which must still give the base's spec (the adapter's versions were
 * made over it); INVALID_REQUEST naming spec.lora.baseCheckpoint otherwise.
 */
export function checkpointBase(dir: string, base: TransformerSpec): Float32Array {
  let loaded;
  try {
    loaded = loadHfCheckpoint(dir, { maxSeq: base.maxSeq });
  } catch (e) {
    throw checkpointFault(e, 'spec.lora.baseCheckpoint');
  }
  if (transformerSpecKey(loaded.spec) !== transformerSpecKey(base))
    throw invalid(`spec.lora.baseCheckpoint: ${dir} now gives the spec ${JSON.stringify(loaded.spec)}, the adapter was made over ${JSON.stringify(base)}`);
  return loaded.theta;
}

/** A checkpoint loader's error as INVALID_REQUEST naming `field` (or the field it names itself). */
function checkpointFault(e: unknown, field: string): unknown {
  if (e instanceof HfCheckpointError || e instanceof HfConfigError || e instanceof ModelSpecError) {
    const msg = e.message;
    return invalid(msg.startsWith('spec.') ? msg : `${field}: ${msg}`);
  }
  return e;
}

export function seed(s: unknown, field: string): [number, number] {
  try {
    return seedKey(s as never);
  } catch {
    throw invalid(`${field}: must be an unsigned 64-bit integer, got ${String(s)}`);
  }
}

function tokenIds(ids: unknown, V: number, field: string): number[] {
  if (!Array.isArray(ids)) throw invalid(`${field}: must be a list of token ids`);
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i];
    if (!Number.isInteger(t) || t < 0 || t >= V) {
      throw invalid(`${field}[${i}]: token id ${String(t)} is outside the vocabulary [0, ${V - 1}]`);
    }
  }
  return ids as number[];
}

function finiteList(xs: unknown, n: number, field: string, opts: { nonNegative?: boolean } = {}): number[] {
  if (!Array.isArray(xs)) throw invalid(`${field}: must be a list of numbers`);
  if (xs.length !== n) throw invalid(`${field}: has ${xs.length} entries, expected ${n} (one per token)`);
  for (let i = 0; i < n; i++) {
    const x = xs[i];
    if (typeof x !== 'number' || !Number.isFinite(x)) throw invalid(`${field}[${i}]: must be finite, got ${String(x)}`);
    if (opts.nonNegative && x < 0) throw invalid(`${field}[${i}]: must be >= 0, got ${x}`);
  }
  return xs as number[];
}

function num(x: number | undefined, def: number, field: string, ok: (v: number) => boolean, rule: string): number {
  const v = x === undefined ? def : x;
  if (typeof v !== 'number' || Number.isNaN(v) || !ok(v)) throw invalid(`${field}: ${rule}, got ${String(v)}`);
  return v;
}

type RowSampling = Pick<GenerateRow, 'temperature' | 'topK' | 'topP' | 'maxTokens' | 'stopTokens'>;

function sampling(p: SamplingParams, s: ModelSpec, field: string): RowSampling {
  const temperature = num(p.temperature, 1, `${field}.temperature`, (v) => v >= 0 && Number.isFinite(v), 'must be a finite number >= 0 (0 = greedy)');
  const topK = num(p.topK, 0, `${field}.top_k`, (v) => Number.isInteger(v) && v >= 0, 'must be an integer >= 0 (0 = off)');
  const topP = num(p.topP, 0, `${field}.top_p`, (v) => v >= 0 && v <= 1, 'must be in [0, 1] (0 or 1 = off)');
  const maxTokens = num(
    p.maxTokens,
    0,
    `${field}.max_tokens`,
    (v) => Number.isInteger(v) && v >= 1 && v <= LIMITS.maxTokens,
    `must be an integer in [1, ${LIMITS.maxTokens}]`,
  );
  const stopTokens = [...new Set(tokenIds(p.stopTokens ?? [], s.vocabSize, `${field}.stop_tokens`))].sort((a, b) => a - b);
  return { temperature, topK: Math.min(topK, s.vocabSize), topP, maxTokens, stopTokens };
}

/** The family's length rule for one sequence (e.g. the transformer's maxSeq), before it joins a batch. */
function checkSequence(s: ModelSpec, field: string, contextLength: number, total: number): void {
  const issue = familyOf(s.family).sequenceIssue(s, contextLength, total);
  if (issue) throw invalid(`${issue.field ? `${field}.${issue.field}` : field}: ${issue.message}`);
}

export function generateRows(req: GenerateRequest, s: ModelSpec): GenerateRow[] {
  if (!Array.isArray(req.sequences) || req.sequences.length === 0) throw invalid('sequences: empty batch (send at least one sequence)');
  const shared = req.sampling ? sampling(req.sampling, s, 'sampling') : undefined;
  return req.sequences.map((q, i) => {
    const own = q.sampling ? sampling(q.sampling, s, `sequences[${i}].sampling`) : shared;
    if (!own) throw invalid(`sampling: required (at least max_tokens), or sequences[${i}].sampling`);
    const context = tokenIds(q.context, s.vocabSize, `sequences[${i}].context`);
    checkSequence(s, `sequences[${i}]`, context.length, context.length + own.maxTokens);
    return {
      context,
      seedKey: seed(q.seed, `sequences[${i}].seed`),
      ...own,
    };
  });
}

export function scoreSequences(req: ScoreRequest, s: ModelSpec): { context: number[]; tokens: number[] }[] {
  if (!Array.isArray(req.sequences) || req.sequences.length === 0) throw invalid('sequences: empty batch (send at least one sequence)');
  return req.sequences.map((q, i) => {
    const seq = { context: tokenIds(q.context, s.vocabSize, `sequences[${i}].context`), tokens: tokenIds(q.tokens, s.vocabSize, `sequences[${i}].tokens`) };
    checkSequence(s, `sequences[${i}]`, seq.context.length, seq.context.length + seq.tokens.length);
    return seq;
  });
}

export function updateSamples(req: UpdateRequest, s: ModelSpec): UpdateSample[] {
  if (!Array.isArray(req.samples) || req.samples.length === 0) throw invalid('samples: empty batch (send at least one sample)');
  let trained = 0;
  const out = req.samples.map((x, i) => {
    const f = `samples[${i}]`;
    const tokens = tokenIds(x.tokens, s.vocabSize, `${f}.tokens`);
    const n = tokens.length;
    const lossMask = finiteList(x.lossMask, n, `${f}.loss_mask`);
    lossMask.forEach((m, t) => {
      if (m !== 0 && m !== 1) throw invalid(`${f}.loss_mask[${t}]: must be 0 or 1, got ${m}`);
      trained += m;
    });
    const ref = x.refLogprobs ?? [];
    const context = tokenIds(x.context, s.vocabSize, `${f}.context`);
    checkSequence(s, f, context.length, context.length + n);
    return {
      context,
      tokens,
      lossMask,
      advantages: finiteList(x.advantages, n, `${f}.advantages`),
      oldLogprobs: finiteList(x.oldLogprobs, n, `${f}.old_logprobs`),
      lossWeights: finiteList(x.lossWeights, n, `${f}.loss_weights`, { nonNegative: true }),
      refLogprobs: ref.length === 0 ? [] : finiteList(ref, n, `${f}.ref_logprobs`),
    };
  });
  if (trained === 0) throw invalid('samples: no trained tokens (every loss_mask is 0)');
  return out;
}

export function updateSettings(x: UpdateSettingsInput | undefined): UpdateSettings {
  const d = DEFAULT_UPDATE_SETTINGS;
  const s = x ?? {};
  const finiteNonNeg = (v: number) => Number.isFinite(v) && v >= 0;
  const unit = (v: number) => v >= 0 && v < 1;
  const maxGradNorm = num(s.maxGradNorm, d.maxGradNorm, 'settings.max_grad_norm', finiteNonNeg, 'must be >= 0 (0 = off)');
  const dualClip = num(s.dualClip, d.dualClip, 'settings.dual_clip', (v) => v === 0 || (v > 1 && Number.isFinite(v)), 'must be > 1 (0 = off)');
  const klType = s.klType ?? d.klType;
  if (klType !== 'k1' && klType !== 'low_var_kl') throw invalid(`settings.kl_type: must be "k1" or "low_var_kl", got "${String(klType)}"`);
  return {
    lr: num(s.lr, d.lr, 'settings.lr', finiteNonNeg, 'must be a finite number >= 0'),
    beta1: num(s.beta1, d.beta1, 'settings.beta1', unit, 'must be in [0, 1)'),
    beta2: num(s.beta2, d.beta2, 'settings.beta2', unit, 'must be in [0, 1)'),
    eps: num(s.eps, d.eps, 'settings.eps', (v) => v > 0 && Number.isFinite(v), 'must be > 0'),
    weightDecay: num(s.weightDecay, d.weightDecay, 'settings.weight_decay', finiteNonNeg, 'must be >= 0'),
    maxGradNorm: maxGradNorm === 0 ? Infinity : maxGradNorm,
    clipLow: num(s.clipLow, d.clipLow, 'settings.clip_low', unit, 'must be in [0, 1)'),
    clipHigh: num(s.clipHigh, d.clipHigh, 'settings.clip_high', finiteNonNeg, 'must be >= 0'),
    dualClip: dualClip === 0 ? Infinity : dualClip,
    klCoef: num(s.klCoef, d.klCoef, 'settings.kl_coef', finiteNonNeg, 'must be >= 0'),
    klType,
    entropyCoef: num(s.entropyCoef, d.entropyCoef, 'settings.entropy_coef', Number.isFinite, 'must be a finite number'),
    innerSteps: num(
      s.innerSteps,
      d.innerSteps,
      'settings.inner_steps',
      (v) => Number.isInteger(v) && v >= 1 && v <= LIMITS.innerSteps,
      `must be an integer in [1, ${LIMITS.innerSteps}]`,
    ),
  };
}

export function requestId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0) throw invalid('request_id: required (the idempotency key of this update)');
  if (id.length > LIMITS.requestIdLength) throw invalid(`request_id: longer than ${LIMITS.requestIdLength} characters`);
  return id;
}
