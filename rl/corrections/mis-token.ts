/**
 * Token-level masked importance sampling (MIS): tokens whose ratio exceeds C are
 * dropped instead of truncated, the others keep their full ratio:
 *
 *   w_t = ρ_t · 1[ρ_t ≤ C]
 *
 * Source: Liu, Li et al. 2025, "When Speed Kills Stability: Demystifying RL
 * Collapse from the Training-Inference Mismatch" (token-level MIS). A token the
 * sampler found far less likely than the trainer does carries no gradient,
 * rather than a clipped one.
 */
import type { Correction } from './types';

export const misToken: Correction = {
  uses: ['cap'],
  weigh(logRatios, { cap }) {
    const weights = new Float64Array(logRatios.length);
    let masked = 0;
    logRatios.forEach((d, t) => {
      const rho = Math.exp(d);
      if (rho > cap) masked++;
      else weights[t] = rho;
    });
    return { weights, truncated: 0, masked };
  },
};
