/**
 * From sample advantages to tokens, and loss aggregation as per-token weights.
 *
 * A sample (turn) has one loss mask over its tokens: 1 on tokens the policy
 * sampled, 0 on prompt and tool-output tokens (context, never trained).
 *
 * Aggregation is expressed as weights: the aggregated loss is
 * Σ_t w_t · L_t over every token of every sample, so the engine's update
 * graph only multiplies by w_t and sums, and the aggregation rule lives here
 * and nowhere else. With m the mask, n_i = Σ_t m_{i,t} the trainable tokens
 * of sample i, S the number of trained samples that have n_i > 0, and
 * N = Σ_i n_i:
 *
 *   token-mean              w = m / N                       Σ w = 1
 *   seq-mean-token-mean     w = m / (S · n_i)               Σ w = 1
 *   seq-mean-token-sum-norm w = m / (S · H)                 Σ w = N / (S · H) ≤ 1
 *
 * H (the horizon) is a constant token budget — pass the role's max generated
 * tokens so the scale does not change from step to step (Dr. GRPO's
 * MAX_TOKENS). Without it, H = the longest mask in the call. verl divides the
 * token sum by its padded length only and leaves 1/S to its mini-batch
 * scaling; here 1/S is explicit so the loss scale does not grow with the
 * batch. Excluded samples (e.g. MC-GRPO pivots) get weight 0 and do not count
 * in N, S or n_i.
 */

import { IssueList } from './errors';

export type LossAggregation = 'token-mean' | 'seq-mean-token-mean' | 'seq-mean-token-sum-norm';
export const LOSS_AGGREGATIONS: readonly LossAggregation[] = ['token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'];

export type LossMask = ArrayLike<number>;

/** Checks every mask entry is 0 or 1. */
export function validateMasks(masks: readonly LossMask[], name = 'masks'): void {
  const issues = new IssueList();
  masks.forEach((mask, i) => {
    for (let t = 0; t < mask.length; t++) {
      const v = mask[t];
      if (v !== 0 && v !== 1) {
        issues.add(`${name}[${i}][${t}]`, `must be 0 or 1, got ${String(v)}`);
        break; // one issue per mask is enough to find it
      }
    }
  });
  issues.throwIfAny();
}

export function countTrainable(mask: LossMask): number {
  let n = 0;
  for (let t = 0; t < mask.length; t++) n += mask[t]!;
  return n;
}

/** Per-token advantages: A_i on mask-1 tokens of sample i, 0 elsewhere. */
export function broadcastAdvantages(advantages: ArrayLike<number>, masks: readonly LossMask[]): Float64Array[] {
  if (advantages.length !== masks.length) {
    const issues = new IssueList();
    issues.add('masks', `expected one mask per advantage (${advantages.length}), got ${masks.length}`);
    issues.throwIfAny();
  }
  validateMasks(masks);
  return masks.map((mask, i) => {
    const out = new Float64Array(mask.length);
    for (let t = 0; t < mask.length; t++) if (mask[t] === 1) out[t] = advantages[i]!;
    return out;
  });
}

export interface AggregationOptions {
  /** Samples not trained on; their weights are 0. */
  excluded?: readonly boolean[];
  /** H for `seq-mean-token-sum-norm`; a positive constant, default the longest mask. */
  horizon?: number;
}

export interface AggregationWeights {
  /** One array per sample, same length as its mask. */
  weights: Float64Array[];
  /** Σ of all weights (1 for the mean modes when any token is trained, else 0). */
  total: number;
  /** Trained tokens N and trained samples S (samples with n_i > 0). */
  tokens: number;
  sequences: number;
}

export function aggregationWeights(masks: readonly LossMask[], mode: LossAggregation = 'token-mean', options: AggregationOptions = {}): AggregationWeights {
  const issues = new IssueList();
  if (!LOSS_AGGREGATIONS.includes(mode)) issues.add('lossAggregation', `must be one of ${LOSS_AGGREGATIONS.join(', ')}, got ${JSON.stringify(mode)}`);
  if (options.excluded !== undefined && options.excluded.length !== masks.length)
    issues.add('excluded', `expected one flag per mask (${masks.length}), got ${options.excluded.length}`);
  if (options.horizon !== undefined && !(Number.isFinite(options.horizon) && options.horizon > 0))
    issues.add('horizon', `must be a positive number, got ${String(options.horizon)}`);
  issues.throwIfAny();
  validateMasks(masks);

  const trained = masks.map((m, i) => (options.excluded?.[i] ? 0 : countTrainable(m)));
  let tokens = 0;
  let sequences = 0;
  let longest = 0;
  for (let i = 0; i < masks.length; i++) {
    tokens += trained[i]!;
    if (trained[i]! > 0) sequences++;
    longest = Math.max(longest, masks[i]!.length);
  }
  const horizon = options.horizon ?? longest;

  let total = 0;
  const weights = masks.map((mask, i) => {
    const w = new Float64Array(mask.length);
    if (trained[i] === 0) return w;
    const perToken = mode === 'token-mean' ? 1 / tokens : mode === 'seq-mean-token-mean' ? 1 / (sequences * trained[i]!) : 1 / (sequences * horizon);
    for (let t = 0; t < mask.length; t++) if (mask[t] === 1) w[t] = perToken;
    total += perToken * trained[i]!;
    return w;
  });
  return { weights, total, tokens, sequences };
}

/** Concatenates per-sample arrays into one flat array (the loss takes flat tokens). */
export function flatten(parts: readonly ArrayLike<number>[]): Float64Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Float64Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
