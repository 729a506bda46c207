/**
 * The off-policy correction of an asynchronous run's update (staleness k > 0):
 * its rollout was sampled by an older version than the update's base. Decoupled
 * PPO with the base version as the proximal policy (rl/loss.ts): each trained
 * token's advantage is scaled by its truncated importance weight
 * w = min(π_base/π_behaviour, cap), and the base version's log-probs become the
 * "old" log-probs of the clip ratio. The engine's update graphs are unchanged:
 * w·L_pg(A) = L_pg(w·A) token by token (w ≥ 0).
 *
 * Also the correction's metrics, per model and per agent.
 */
import { importanceWeights } from '../../rl';
import type { UpdateSampleInput } from '../../engines/protocol/types';
import type { UpdateSequence } from './batch';

export interface OffPolicyMetrics {
  /** Mean versions between the behaviour version and the update's base, over sequences. */
  staleness: number;
  'isWeight.mean': number;
  'isWeight.max': number;
  /** Fraction of trained tokens whose weight the cap truncated. */
  'isWeight.truncated': number;
  /** k3 estimate of KL(behaviour ‖ base) over the behaviour's tokens. */
  behaviourKl: number;
}

export interface OffPolicyUpdate {
  samples: UpdateSampleInput[];
  /** Over the whole model's batch. */
  model: OffPolicyMetrics;
  /** Per agent of the model. */
  agents: Record<string, OffPolicyMetrics>;
}

/**
 * `samples[i]` is the engine sample of `sequences[i]`; `baseLogprobs[i]` its
 * tokens' log-probs under the base version (engine Score).
 */
export function offPolicyCorrection(
  sequences: readonly UpdateSequence[],
  samples: readonly UpdateSampleInput[],
  baseLogprobs: readonly ArrayLike<number>[],
  baseVersion: number,
  cap: number,
): OffPolicyUpdate {
  const sums = new Map<string, { sequences: number; lag: number; tokens: number; w: number; max: number; truncated: number; kl: number }>();
  const add = (key: string, lag: number, d: ReturnType<typeof importanceWeights>['diagnostics']) => {
    const s = sums.get(key) ?? { sequences: 0, lag: 0, tokens: 0, w: 0, max: 0, truncated: 0, kl: 0 };
    s.sequences++;
    s.lag += lag;
    s.tokens += d.tokens;
    s.w += d.mean * d.tokens;
    s.max = Math.max(s.max, d.max);
    s.truncated += d.truncatedFraction * d.tokens;
    s.kl += d.behaviourKl * d.tokens;
    sums.set(key, s);
  };
  const corrected = samples.map((sample, i) => {
    const seq = sequences[i]!;
    const prox = baseLogprobs[i]!;
    const { weights, diagnostics } = importanceWeights(prox, sample.oldLogprobs, sample.lossMask, cap);
    add('', baseVersion - seq.version, diagnostics);
    add(seq.agent, baseVersion - seq.version, diagnostics);
    const trained = (t: number) => sample.lossMask[t] === 1;
    return {
      ...sample,
      advantages: sample.advantages.map((a, t) => (trained(t) ? a * weights[t]! : a)),
      oldLogprobs: sample.oldLogprobs.map((lp, t) => (trained(t) ? prox[t]! : lp)),
    };
  });
  const metrics = (key: string): OffPolicyMetrics => {
    const s = sums.get(key) ?? { sequences: 0, lag: 0, tokens: 0, w: 0, max: 0, truncated: 0, kl: 0 };
    const per = (x: number) => (s.tokens === 0 ? 0 : x / s.tokens);
    return {
      staleness: s.sequences === 0 ? 0 : s.lag / s.sequences,
      'isWeight.mean': per(s.w),
      'isWeight.max': s.max,
      'isWeight.truncated': per(s.truncated),
      behaviourKl: per(s.kl),
    };
  };
  const agents = [...new Set(sequences.map((s) => s.agent))];
  return { samples: corrected, model: metrics(''), agents: Object.fromEntries(agents.map((a) => [a, metrics(a)])) };
}
