/**
 * Adam's first moment for a stale model. A rollout k versions behind its update is a
 * feedback loop with a delay: the batch a step trains on was sampled before the last k
 * steps moved the policy, so what it says ("say 'N' more": right while the solver was
 * still wrong) keeps arriving for k steps after the policy has already acted on it.
 * Asynchrony itself behaves like momentum on top of the optimizer's (Mitliagkas et al.,
 * "Asynchrony begets momentum", 2016), and Adam's β1 = 0.9 adds ten more steps of memory
 * to a signal that is already late: together they carry a move past where the fresh samples
 * would have stopped it. Measured on `math` at k = 1 (docs/performance.md, "Asynchronous
 * RL"): with β1 0.9 the verifier overshot onto 'N', never sampled 'Y' again and the run
 * ended at 0 on two seeds of five; with β1 0 every seed learned.
 *
 *   'off'  (default) a stale model's update uses β1 = 0: each step follows its own batch's
 *          gradient, scaled per parameter by Adam's second moment (β2 kept);
 *   'keep' it uses the model's betas as written (before 2026-12).
 *
 * A synchronous model (staleness 0) always keeps its betas.
 */
export const MOMENTA = ['off', 'keep'] as const;
export type Momentum = (typeof MOMENTA)[number];
export const DEFAULT_MOMENTUM: Momentum = 'off';

/** The Adam betas a stale model's update runs with under `momentum`. */
export function staleBetas(betas: readonly [number, number], momentum: Momentum): [number, number] {
  return momentum === 'off' ? [0, betas[1]] : [betas[0], betas[1]];
}
