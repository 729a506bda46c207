/**
 * Sequence-level truncated importance sampling: one weight per sequence, the
 * product of its tokens' ratios, truncated, on every trained token:
 *
 *   w_t = min(∏_s ρ_s, C) = exp(min(Σ_s log ρ_s, log C))   for each trained t
 *
 * Source: the sequence-level variant of Yao, Liu et al. 2025, "Your Efficient RL
 * Framework Secretly Brings You Off-Policy RL Training" (and verl's
 * rollout_is = "sequence"). Unbiased for sequence-level rewards before the cap;
 * its variance grows with length, so C matters more than for tis-token.
 */
import type { Correction } from './types';

export const tisSequence: Correction = {
  uses: ['cap'],
  weigh(logRatios, { cap }) {
    const logRho = logRatios.reduce((a, d) => a + d, 0);
    const truncate = logRho > Math.log(cap);
    const w = truncate ? cap : Math.exp(logRho);
    return { weights: new Float64Array(logRatios.length).fill(w), truncated: truncate ? logRatios.length : 0, masked: 0 };
  },
};
