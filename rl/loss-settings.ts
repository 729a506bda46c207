/**
 * The policy loss's settings (PPO clip range, dual clip, KL, entropy bonus) under the
 * names the run config uses (schema/optimizer.ts) and the engines take (engine.proto
 * UpdateSettings: clip_low, clip_high, dual_clip, kl_type, kl_coef, entropy_coef), and
 * the run's defaults for them. The loss itself runs in the engines; loss-reference.ts
 * states it in TypeScript.
 *
 * Defaults: ε_low = ε_high = 0.2, c = 3, KL off (type 'none'; coefficient
 * 0.001 when turned on — it needs reference log-probs), entropy coefficient 0.
 * The engine's defaults for an Update that leaves a field out are the same numbers
 * (engines/protocol/contract.json; test/unit/engine/contract.test.ts keeps them equal),
 * except the KL type: an Update without ref_logprobs has no KL term whatever the type.
 */

export type KlType = 'none' | 'k1' | 'low_var_kl';
export const KL_TYPES: readonly KlType[] = ['none', 'k1', 'low_var_kl'];

export interface PolicyLossSettings {
  clipLow: number;
  clipHigh: number;
  /** Dual-clip bound c (> 1) for A < 0; null turns dual clip off. */
  dualClip: number | null;
  kl: { type: KlType; coef: number };
  entropyCoef: number;
}

export const DEFAULT_POLICY_LOSS_SETTINGS: Readonly<PolicyLossSettings> = Object.freeze({
  clipLow: 0.2,
  clipHigh: 0.2,
  dualClip: 3,
  kl: Object.freeze({ type: 'none' as KlType, coef: 0.001 }),
  entropyCoef: 0,
});

/** The clamps of the loss (|logp − logp_old| before exp, and k3), in every engine's loss alike. */
export const LOG_RATIO_CLAMP = 20;
export const K3_CLAMP = 10;
