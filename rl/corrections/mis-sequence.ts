/**
 * Sequence-level masked importance sampling (Seq-MIS): a whole sequence is
 * dropped when its product ratio exceeds C, otherwise every trained token gets it:
 *
 *   ρ = ∏_s ρ_s,   w_t = ρ · 1[ρ ≤ C]   for each trained t
 *
 * Source: Liu, Li et al. 2025, "When Speed Kills Stability: Demystifying RL
 * Collapse from the Training-Inference Mismatch" (sequence-level MIS, their
 * recommended form). The product is taken in log space: log ρ ≤ log C.
 */
import type { Correction } from './types';

export const misSequence: Correction = {
  uses: ['cap'],
  weigh(logRatios, { cap }) {
    const logRho = logRatios.reduce((a, d) => a + d, 0);
    const drop = logRho > Math.log(cap);
    return { weights: new Float64Array(logRatios.length).fill(drop ? 0 : Math.exp(logRho)), truncated: 0, masked: drop ? logRatios.length : 0 };
  },
};
