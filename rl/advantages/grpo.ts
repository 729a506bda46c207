/**
 * GRPO (as verl's compute_grpo_outcome_advantage), per set of the scope:
 *   A_i = (s_i − mean) / (std + 1e-6), std unbiased (n − 1);
 *   a set of one sample uses mean 0 and std 1, so A = s / (1 + 1e-6);
 *   normalizeStd: false is Dr. GRPO, A_i = s_i − mean (singleton: s).
 */

import type { Sample } from '../samples';
import { pick, scopeSamples, toResult } from './scope';
import { mean, unbiasedStd } from './stats';
import type { AdvantageEstimator, AdvantageResult, ResolvedAdvantageOptions } from './types';

export const GRPO_EPS = 1e-6;

export function grpo(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  const scoped = scopeSamples(samples, options);
  const adv = new Float64Array(samples.length);
  for (const set of scoped.sets) {
    const s = pick(scoped.scores, set);
    const m = s.length === 1 ? 0 : mean(s);
    const std = s.length === 1 ? 1 : unbiasedStd(s, m);
    for (let k = 0; k < set.length; k++) adv[set[k]!] = options.normalizeStd ? (s[k]! - m) / (std + GRPO_EPS) : s[k]! - m;
  }
  return toResult('grpo', samples, scoped, adv, options);
}

export const grpoEstimator: AdvantageEstimator = {
  name: 'grpo',
  summary: '(s − mean)/(std + 1e-6) per set; normalizeStd=false is Dr. GRPO',
  supportsNormalizeStd: true,
  perComponent: false,
  estimate: grpo,
};
