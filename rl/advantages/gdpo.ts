/**
 * GDPO (multi-reward, decoupled normalization):
 *   per component j, per set: A_j = (r_j − mean_j) / (std_j + 1e-4);
 *   pre = Σ_j w_j A_j;
 *   then over every sample of the call: A = (pre − mean) / (std + 1e-4).
 * Stds are unbiased (n − 1), as torch's default in the GDPO reference.
 *
 * Simplified: a singleton set has no within-set spread, so its A_j are 0
 * (the reference would produce NaN from the std of one element). Components
 * are the union over the call; a sample missing one reports 0 for it.
 */

import type { Sample } from '../samples';
import { pick, scopeSamples, toResult } from './scope';
import { mean, unbiasedStd } from './stats';
import type { AdvantageEstimator, AdvantageResult, ResolvedAdvantageOptions } from './types';

export const GDPO_EPS = 1e-4;

export function gdpo(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  const scoped = scopeSamples(samples, options);
  const pre = new Float64Array(samples.length);

  scoped.components.forEach((name, j) => {
    const w = options.weights[name] ?? 1;
    for (const set of scoped.sets) {
      if (set.length < 2) continue;
      const r = pick(scoped.componentValues[j]!, set);
      const m = mean(r);
      const std = unbiasedStd(r, m);
      for (let k = 0; k < set.length; k++) pre[set[k]!]! += (w * (r[k]! - m)) / (std + GDPO_EPS);
    }
  });

  // Batch renormalization over every sample this call received.
  const m = mean(pre);
  const std = unbiasedStd(pre, m);
  const adv = new Float64Array(samples.length);
  for (let i = 0; i < samples.length; i++) adv[i] = (pre[i]! - m) / (std + GDPO_EPS);
  return toResult('gdpo', samples, scoped, adv, options);
}

export const gdpoEstimator: AdvantageEstimator = {
  name: 'gdpo',
  summary: 'per-component (r − mean)/(std + 1e-4) per set, weighted sum, then batch renormalization',
  supportsNormalizeStd: false,
  perComponent: true,
  estimate: gdpo,
};
