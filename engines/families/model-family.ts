/**
 * The model-family seam. A family is a named kind of policy (`tiny-lm`,
 * `transformer`): it validates and normalizes its config, lays out and counts
 * the flat parameter vector θ, draws version-0 weights from a seed, and (in
 * `<family>/runtime.ts`, loaded by the engine only — see engine/runtimes.ts)
 * builds the sessions that generate, score and update. The engine core, the
 * wire and the team API only ever see `{ family, vocabSize, ...config }`.
 *
 * This module and every `<family>/family.ts` are pure TypeScript: team code
 * validates specs with them inside the Temporal workflow sandbox.
 */
import { FieldError, type FieldIssue } from '../../infra/issues';

/** A normalized spec: the family's name, the vocabulary size and the family's own fields. */
export type ModelSpec = {
  family: string;
  /** V: token ids are 0..V−1 (the team's tokenizer). */
  vocabSize: number;
};

/** A spec as callers send it: family (default tiny-lm), vocabSize and any of the family's fields. */
export type ModelSpecInput = { family?: string; vocabSize: number; [field: string]: unknown };

/** A bad family config; every issue names its field (`spec.heads: must divide width …`). */
export class ModelSpecError extends FieldError {
  constructor(issues: readonly FieldIssue[]) {
    super(issues);
    this.name = 'ModelSpecError';
  }
}

/** A request a spec cannot run (e.g. a sequence longer than the model's maxSeq); names the field. */
export class ModelRequestError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'ModelRequestError';
  }
}

export interface ParamSlotInfo {
  name: string;
  offset: number;
  shape: number[];
  size: number;
}

export interface ModelFamily<S extends ModelSpec = ModelSpec> {
  /** the registry name, also the family's folder under gpu-workers/ */
  readonly name: string;
  /** Validate and fill defaults; throws ModelSpecError with issues under `prefix` (`models.policy.heads`). */
  normalize(input: unknown, prefix: string): S;
  /** Canonical string of a normalized spec: equal keys ⇔ same graphs and layout. */
  key(spec: S): string;
  paramLayout(spec: S): { slots: ParamSlotInfo[]; total: number };
  /** Deterministic version-0 weights. */
  init(spec: S, seed: bigint | number | string): Float32Array;
  /**
   * What is wrong with a sequence of `contextLength` context tokens and `total` tokens in all
   * (`field` '' = the whole sequence, 'context' = its context), or undefined when it can run.
   * Checked per sequence before batching, so one bad caller fails alone.
   */
  sequenceIssue(spec: S, contextLength: number, total: number): { field: '' | 'context'; message: string } | undefined;
  /**
   * Refuse a spec whose smallest run would not fit in `budgetBytes` (ModelSpecError naming the
   * dominant field under `prefix`). Optional: families of small models leave it out.
   */
  checkMemory?(spec: S, budgetBytes: number, prefix: string): void;
  /** Context length the batch-invariance probe uses (long enough to exercise every op). */
  probeContextLength(spec: S): number;
  /** One line for logs, `troupe doctor` and status (`tiny-lm W8 E16 H64 L1 tanh`). */
  describe(spec: S): string;
}
