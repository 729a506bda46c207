/**
 * REINFORCE++-baseline (as verl's compute_reinforce_plus_plus_baseline_outcome_advantage):
 *   a_i = s_i − set mean (a set of one sample uses mean 0, as GRPO and verl do);
 *   then whitened over all trainable tokens of the call: sample i counts once
 *   per trainable token T_i, so with N = Σ T_i
 *     μ = Σ T_i a_i / N,   var = Σ T_i (a_i − μ)² / (N − 1),
 *     A_i = (a_i − μ) / sqrt(var + 1e-8)          (verl's masked_whiten).
 *
 * Simplified: with N ≤ 1 the variance is taken as 0 instead of failing;
 * with N = 0 nothing would be trained, and all advantages are 0.
 */

import type { Sample } from '../samples';
import { pick, scopeSamples, toResult } from './scope';
import { mean, weightedMean } from './stats';
import type { AdvantageEstimator, AdvantageResult, ResolvedAdvantageOptions } from './types';

export const WHITEN_EPS = 1e-8;

export function reinforcePlusPlusBaseline(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  const scoped = scopeSamples(samples, options);
  const n = samples.length;
  const centered = new Float64Array(n);
  for (const set of scoped.sets) {
    const s = pick(scoped.scores, set);
    const m = s.length === 1 ? 0 : mean(s);
    for (let k = 0; k < set.length; k++) centered[set[k]!] = s[k]! - m;
  }

  const tokens = Float64Array.from(samples, (s) => s.trainableTokens);
  let total = 0;
  for (const t of tokens) total += t;
  const adv = new Float64Array(n);
  if (total > 0) {
    const mu = weightedMean(centered, tokens);
    let ss = 0;
    for (let i = 0; i < n; i++) ss += tokens[i]! * (centered[i]! - mu) ** 2;
    const variance = total > 1 ? ss / (total - 1) : 0;
    const scale = 1 / Math.sqrt(variance + WHITEN_EPS);
    for (let i = 0; i < n; i++) adv[i] = (centered[i]! - mu) * scale;
  }
  return toResult('reinforce++-baseline', samples, scoped, adv, options);
}

export const reinforcePlusPlusBaselineEstimator: AdvantageEstimator = {
  name: 'reinforce++-baseline',
  summary: 's − set mean, then whitened over all trainable tokens of the batch',
  supportsNormalizeStd: false,
  perComponent: false,
  estimate: reinforcePlusPlusBaseline,
};
