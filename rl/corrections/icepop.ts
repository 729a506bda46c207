/**
 * IcePop: two-sided token masking. Tokens whose ratio leaves the band [α, β]
 * are dropped (no gradient); the others keep their ratio:
 *
 *   w_t = ρ_t · 1[α ≤ ρ_t ≤ β]
 *
 * Source: Ling team (inclusionAI / Ant Group) 2025, "Small Leak Can Sink a Great
 * Ship — Boost RL Training on MoE with IcePop!" (used for Ring-1T; α = 0.5,
 * β = 5). Unlike MIS it also drops tokens the trainer finds far less likely
 * than the sampler did (ρ < α).
 */
import type { Correction } from './types';

export const icepop: Correction = {
  uses: ['band'],
  weigh(logRatios, { band: [lo, hi] }) {
    const weights = new Float64Array(logRatios.length);
    let masked = 0;
    logRatios.forEach((d, t) => {
      const rho = Math.exp(d);
      if (rho < lo || rho > hi) masked++;
      else weights[t] = rho;
    });
    return { weights, truncated: 0, masked };
  },
};
