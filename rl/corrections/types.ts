/**
 * What an off-policy correction is: a rule that turns the log importance ratios
 * log ρ_t = log π_prox(y_t) − log π_behav(y_t) of one sequence's trained tokens
 * into per-token weights w_t ≥ 0 on the advantage (w_t = 0 masks the token).
 * π_behav is the version that sampled each token (its own log-prob, so tokens of
 * one sequence may come from several versions); π_prox is the update's base
 * version (Score), which is also the PPO clip's "old" policy. Since w_t ≥ 0,
 * w_t·L_pg(A) = L_pg(w_t·A) (rl/loss-reference.ts): every correction is a change of the
 * advantages only, and the engine's update graph stays the same.
 */

/** The settings a correction may read; each file says which. */
export interface CorrectionSettings {
  /** Upper bound C on a weight (truncation) or on the ratios kept (one-sided masking); ≥ 1. */
  cap: number;
  /** Two-sided band [lo, hi] of the ratios kept; 0 ≤ lo ≤ 1 ≤ hi. */
  band: readonly [number, number];
}

export interface CorrectionWeights {
  /** w_t per trained token, in the order given. */
  weights: Float64Array;
  /** Tokens whose weight a cap lowered below ρ (truncated, still trained). */
  truncated: number;
  /** Tokens the correction dropped (w_t = 0). */
  masked: number;
}

export interface Correction {
  /** The settings it reads (the others are ignored). */
  readonly uses: readonly (keyof CorrectionSettings)[];
  /** `logRatios`: log ρ_t of one sequence's trained tokens, each already clamped to ±20. */
  weigh(logRatios: Float64Array, settings: CorrectionSettings): CorrectionWeights;
}
