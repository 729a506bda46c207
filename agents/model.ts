/**
 * Models: trainable policies. Agents name a model; several agents may share one
 * (full sharing), each may have its own (separation), or some share (partial).
 */
import type { Tokenizer } from './tokenizer';

export interface TinyLMSpec {
  readonly kind: 'tiny-lm';
  readonly tokenizer: Tokenizer;
  /** How many previous tokens the policy sees. */
  readonly contextWindow: number;
  readonly embedDim: number;
  readonly hiddenDim: number;
  readonly layers: number;
  /** The pool whose engines serve this model (default DEFAULT_POOL); the deployment maps it to a task queue. */
  readonly pool: string;
  /** Optimizer settings for every agent on this model (agents may override). */
  readonly optimizer?: Record<string, unknown>;
}

export type ModelSpec = TinyLMSpec;

export interface TinyLMOptions {
  tokenizer: Tokenizer;
  contextWindow?: number;
  embedDim?: number;
  hiddenDim?: number;
  layers?: number;
  pool?: string;
  optimizer?: Record<string, unknown>;
}

/**
 * The pool a model uses unless it names one. Served on the task queue TROUPE_POOL_TASK_QUEUE
 * (default: this name); any other pool name is its own task queue
 * (activities/training/pool-queues.ts).
 */
export const DEFAULT_POOL = 'troupe-gpu';

/** The built-in policy family: a small autoregressive LM the engine runs as ONNX. */
export function tinyLM(opts: TinyLMOptions): TinyLMSpec {
  return {
    kind: 'tiny-lm',
    tokenizer: opts.tokenizer,
    contextWindow: opts.contextWindow ?? 8,
    embedDim: opts.embedDim ?? 16,
    hiddenDim: opts.hiddenDim ?? 64,
    layers: opts.layers ?? 1,
    pool: opts.pool ?? DEFAULT_POOL,
    optimizer: opts.optimizer,
  };
}

/** The engine's view of a model: plain numbers, JSON-safe (no tokenizer object). */
export function engineSpec(spec: ModelSpec) {
  return {
    family: 'tiny-lm' as const,
    vocabSize: spec.tokenizer.size,
    contextWindow: spec.contextWindow,
    embedDim: spec.embedDim,
    hiddenDim: spec.hiddenDim,
    layers: spec.layers,
  };
}
