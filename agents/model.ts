/**
 * Models: trainable policies. Agents name a model; several agents may share one
 * (full sharing), each may have its own (separation), or some share (partial).
 * A model is a family (engines/families/index.ts) plus that family's config;
 * the team's tokenizer gives the vocabulary size.
 */
import type { ModelSpecInput } from '../engines/families/model-family';
import type { Tokenizer } from './tokenizer';
import { loraIssues } from '../engines/families/transformer/spec';

export interface ModelSpec {
  /** `tiny-lm`, `transformer`, ... (engines/families/index.ts) */
  readonly family: string;
  readonly tokenizer: Tokenizer;
  /** the family's own fields (validated at team load, defaults filled by the family) */
  readonly config: Readonly<Record<string, unknown>>;
  /** The pool whose engines serve this model (default DEFAULT_POOL); the deployment maps it to a task queue. */
  readonly pool: string;
  /**
   * The pool that trains it, where that is another (e.g. a PyTorch trainer behind an ONNX sampler):
   * version 0 and every update run there; the sampling pool's engines load each new version from
   * the store (by reference where they share its checkpoint files) when a rollout first needs it.
   * Default: `pool`. A run may override both (run config `pools`).
   */
  readonly trainPool?: string;
  /** Optimizer settings for every agent on this model (agents may override). */
  readonly optimizer?: Record<string, unknown>;
  /**
   * A LoRA model (`lora(...)`): the team model whose version 0 is its frozen base. defineTeam copies the
   * base's config into `config` beside `config.lora`.
   */
  readonly base?: string;
  /**
   * A LoRA model's starting adapter: the absolute path of a PEFT adapter directory (adapter_config.json +
   * adapter_model.safetensors), imported as version 0 instead of PEFT's initialisation
   * (engines/checkpoints/peft.ts importPeftAdapter: its r, lora_alpha and target modules must be the model's).
   */
  readonly adapter?: string;
}

interface CommonOptions {
  tokenizer: Tokenizer;
  pool?: string;
  trainPool?: string;
  optimizer?: Record<string, unknown>;
}

/**
 * The pool a model uses unless it names one. Served on the task queue TROUPE_POOL_TASK_QUEUE
 * (default: this name); any other pool name is its own task queue
 * (activities/training/pool-queues.ts).
 */
import { DEFAULT_POOL } from '../infra/pools';

export { DEFAULT_POOL };

function model(family: string, { tokenizer, pool, trainPool, optimizer, ...config }: CommonOptions & Record<string, unknown>): ModelSpec {
  return { family, tokenizer, config, pool: pool ?? DEFAULT_POOL, ...(trainPool ? { trainPool } : {}), optimizer };
}

export interface TinyLMOptions extends CommonOptions {
  /** How many previous tokens the policy sees (default 8). */
  contextWindow?: number;
  embedDim?: number;
  hiddenDim?: number;
  layers?: number;
  activation?: 'tanh' | 'relu';
}

/** A small MLP over the last `contextWindow` tokens (gpu-workers/tiny-lm). */
export function tinyLM(opts: TinyLMOptions): ModelSpec {
  return model('tiny-lm', { ...opts });
}

export interface TransformerOptions extends CommonOptions {
  width?: number;
  layers?: number;
  heads?: number;
  kvHeads?: number;
  /** width of one attention head (default width / heads) */
  headDim?: number;
  mlpWidth?: number;
  positions?: 'learned' | 'rope';
  ropeTheta?: number;
  norm?: 'layernorm' | 'rmsnorm';
  normEps?: number;
  /** RMSNorm of every query and key head before RoPE (Qwen3) */
  qkNorm?: boolean;
  mlp?: 'gelu' | 'swiglu';
  bias?: boolean;
  tiedHead?: boolean;
  /** longest context + generated sequence (default 256; with a checkpoint, a rope model's bound from config.json may only be lowered) */
  maxSeq?: number;
  /**
   * Absolute path of a Hugging Face-layout directory (config.json + safetensors):
   * version 0 is its weights and config.json gives every shape field, so the
   * shape options above must be left out (engines/checkpoints/hf-layout.ts).
   */
  checkpoint?: string;
}

/**
 * A decoder-only transformer (engines/onnx/transformer/README.md). It attends over
 * its whole context, so every turn needs at least one context token (a start token)
 * and context + generated tokens must fit in `maxSeq`.
 */
export function transformer(opts: TransformerOptions): ModelSpec {
  return model('transformer', { ...opts });
}

export interface LoraOptions extends CommonOptions {
  /** Another model of the team, a transformer that is not itself a LoRA model: its version 0 is the frozen base. */
  base: string;
  /** r: the adapter's rank */
  rank: number;
  /** α: the update is scaled by α / r (default: rank, a scale of 1) */
  alpha?: number;
  /**
   * The projections of every layer that get an adapter, by their names in the base's parameter layout: q, k, v, o, and
   * 1, 2 (GELU MLP) or g, u, d (SwiGLU MLP). Over a checkpoint that is not of the family's layout (a model type other
   * than gpt2 / llama / qwen2 / qwen3, served by the PyTorch engine), its linear modules as transformers and PEFT name
   * them: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, qkv_proj, ... (every module of that name).
   */
  targets: string[];
  /** Absolute path of a PEFT adapter directory to start from (version 0), e.g. one PEFT trained or Troupe exported. */
  adapter?: string;
}

/**
 * A LoRA adapter over another model of the team (engines/families/transformer/lora.ts): agents on it
 * share the base's version 0, frozen, and train only A and B of each targeted projection. Its versions
 * hold the adapter's bytes only. Served by engines whose Health says `lora` (the built-in and the PyTorch engine).
 */
export function lora({ base, rank, alpha, targets, adapter, ...common }: LoraOptions): ModelSpec {
  return { ...model('transformer', { ...common, lora: { rank, alpha: alpha ?? rank, targets } }), base, ...(adapter === undefined ? {} : { adapter }) };
}

/**
 * The team's models with every LoRA model's config completed from its base's (the base's fields, then
 * `lora`), and the problems by field. Idempotent: a completed model is completed again from its base.
 */
export function resolveLoraModels(models: Readonly<Record<string, ModelSpec>>): {
  models: Record<string, ModelSpec>;
  issues: Array<{ path: string; message: string }>;
} {
  const out: Record<string, ModelSpec> = { ...models };
  const issues: Array<{ path: string; message: string }> = [];
  for (const [m, spec] of Object.entries(models)) {
    if (spec.base === undefined) continue;
    const at = `models.${m}.base`;
    const base = models[spec.base];
    if (typeof spec.base !== 'string' || !base)
      issues.push({ path: at, message: `unknown model ${JSON.stringify(spec.base)} (models: ${Object.keys(models).join(', ')})` });
    else if (spec.base === m) issues.push({ path: at, message: 'a LoRA model cannot be its own base' });
    else if (spec.adapter !== undefined && (typeof spec.adapter !== 'string' || !spec.adapter.startsWith('/')))
      issues.push({ path: `models.${m}.adapter`, message: `must be an absolute path of a PEFT adapter directory, got ${JSON.stringify(spec.adapter)}` });
    else if (base.base !== undefined) issues.push({ path: at, message: `${JSON.stringify(spec.base)} is itself a LoRA model; name a full model` });
    else if (base.family !== 'transformer')
      issues.push({ path: at, message: `${JSON.stringify(spec.base)} is a ${base.family} model; LoRA needs a transformer base` });
    else out[m] = { ...spec, config: { ...base.config, lora: spec.config.lora } };
  }
  return { models: out, issues };
}

/** Options a checkpoint model may still set: everything else is its config.json's. */
const CHECKPOINT_KEEPS = new Set(['checkpoint', 'maxSeq']);

/** The directory a model starts from, if it names one. */
export function checkpointOf(spec: ModelSpec): string | undefined {
  return spec.config.checkpoint as string | undefined;
}

/**
 * A checkpoint model's problems, by field of its config (the checkpoint itself is read where files can be: initModel).
 * A LoRA model over a checkpoint keeps its `lora`, checked alone (its targets against the directory's layout by the engine).
 */
export function checkpointIssues(spec: ModelSpec): Array<{ field: string; message: string }> {
  const dir = spec.config.checkpoint;
  const issues: Array<{ field: string; message: string }> = [];
  if (spec.family !== 'transformer') issues.push({ field: 'checkpoint', message: `only transformer models load a checkpoint; this is a ${spec.family} model` });
  // absolute: workers resolve it on their own machines, whatever their working directory
  if (typeof dir !== 'string' || !dir.startsWith('/'))
    issues.push({ field: 'checkpoint', message: `must be an absolute directory path, got ${JSON.stringify(dir)}` });
  for (const key of Object.keys(spec.config)) {
    if (!CHECKPOINT_KEEPS.has(key) && !(key === 'lora' && spec.base !== undefined))
      issues.push({ field: key, message: "comes from the checkpoint's config.json; leave it out" });
  }
  if (spec.base !== undefined) for (const i of loraIssues(spec.config.lora, 'lora')) issues.push({ field: i.path, message: i.message });
  return issues;
}

/** The model started from `dir` instead: its shape options dropped (config.json has them), maxSeq kept. */
export function withCheckpoint(spec: ModelSpec, dir: string, tokenizer: Tokenizer): ModelSpec {
  const maxSeq = spec.config.maxSeq;
  const lora = spec.config.lora;
  return { ...spec, tokenizer, config: { checkpoint: dir, ...(maxSeq !== undefined ? { maxSeq } : {}), ...(lora !== undefined ? { lora } : {}) } };
}

/** The engine's view of a model: plain JSON (no tokenizer object). */
export function engineSpec(spec: ModelSpec): ModelSpecInput {
  return { ...spec.config, family: spec.family, vocabSize: spec.tokenizer.size };
}
