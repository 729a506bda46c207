/**
 * Decoupled PPO with a weight cap (Troupe's default for asynchronous runs):
 *
 *   w_t = min(ρ_t, C),   ρ_t = π_prox(y_t)/π_behav(y_t),   PPO ratio π_θ/π_prox
 *
 * Source: Hilton, Cobbe, Schulman 2022, "Batch size-invariance for policy
 * optimization" (decoupled proximal and behaviour policies), as used for
 * asynchronous LLM RL by AReaL (Fu et al. 2025), with the proximal policy the
 * update's base version. The cap C bounds the variance; the per-token formula is
 * token-level TIS's (tis-token.ts), which it reuses.
 */
import { tisToken } from './tis-token';
import type { Correction } from './types';

export const decoupledPpo: Correction = { uses: ['cap'], weigh: tisToken.weigh };
