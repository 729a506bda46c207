/**
 * RLOO (leave-one-out baseline), per set:
 *   A_i = s_i − mean of the others = n/(n − 1) · (s_i − mean);
 *   a set of one sample gets 0 (there is no other to compare with).
 */

import type { Sample } from '../samples';
import { pick, scopeSamples, toResult } from './scope';
import { mean } from './stats';
import type { AdvantageEstimator, AdvantageResult, ResolvedAdvantageOptions } from './types';

export function rloo(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  const scoped = scopeSamples(samples, options);
  const adv = new Float64Array(samples.length);
  for (const set of scoped.sets) {
    const n = set.length;
    if (n < 2) continue;
    const s = pick(scoped.scores, set);
    const m = mean(s);
    for (let k = 0; k < n; k++) adv[set[k]!] = (n / (n - 1)) * (s[k]! - m);
  }
  return toResult('rloo', samples, scoped, adv, options);
}

export const rlooEstimator: AdvantageEstimator = {
  name: 'rloo',
  summary: 'n/(n − 1)·(s − mean) per set; singleton 0',
  supportsNormalizeStd: false,
  perComponent: false,
  estimate: rloo,
};
