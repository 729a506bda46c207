/**
 * Token-level truncated importance sampling (TIS):
 *
 *   w_t = min(ρ_t, C),   ρ_t = π_prox(y_t)/π_behav(y_t)
 *
 * Source: Yao, Liu et al. 2025, "Your Efficient RL Framework Secretly Brings You
 * Off-Policy RL Training" (fengyao.notion.site/off-policy-rl), where π_prox is
 * the trainer's log-prob of the sampler's tokens at the same weights and C = 2.
 * Here π_prox is the base version, so the weight is the same as decoupled PPO's
 * (decoupled-ppo.ts); the name is kept for configs that follow the TIS paper.
 */
import type { Correction } from './types';

export const tisToken: Correction = {
  uses: ['cap'],
  weigh(logRatios, { cap }) {
    const weights = new Float64Array(logRatios.length);
    let truncated = 0;
    logRatios.forEach((d, t) => {
      const rho = Math.exp(d);
      weights[t] = Math.min(rho, cap);
      if (rho > cap) truncated++;
    });
    return { weights, truncated, masked: 0 };
  },
};
