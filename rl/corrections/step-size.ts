/**
 * The step size of a stale batch: the learning rate scaled by the batch's effective sample
 * share under the correction's weights,
 *
 *   s = (Σ_t w_t)² / (N · Σ_t w_t²)      over the N trained tokens of the model's batch (0 < s ≤ 1),
 *
 * Kish's effective sample size over N. With w ≡ 1 (the base version sampled it) s = 1 and the
 * update is the synchronous one. The update's gradient is an importance-sampled estimate of
 * the gradient at the base version, from samples of an older one: its information is that of
 * about s·N on-policy samples, and it says nothing about the ground the base version moved to.
 * After a large move (weights far from 1: most of the batch's tokens became unlikely, a few
 * likely) s is small, and a full Adam step there is mostly the optimizer's momentum carrying
 * the last move on, with no fresh sample to brake it until the first rollout of the new
 * version arrives k steps later; measured on `recall`, such steps moved the policy by
 * KL 1–3 nats and undid what it had learned (docs/performance.md, "Asynchronous RL").
 * Scaling the step by s holds the policy while its samples are uninformative and leaves it
 * alone when they are (s ≈ 1 at small mismatch). An all-zero batch (every token masked)
 * has no policy-gradient term to scale: s = 1.
 */

/** The effective sample share s of the trained tokens' weights (`masks[i][t] === 1`). */
export function effectiveSampleShare(weights: readonly ArrayLike<number>[], masks: readonly ArrayLike<number>[]): number {
  let n = 0;
  let sum = 0;
  let squares = 0;
  weights.forEach((w, i) => {
    const mask = masks[i] ?? [];
    for (let t = 0; t < mask.length; t++) {
      if (mask[t] !== 1) continue;
      const x = w[t] ?? 0;
      n++;
      sum += x;
      squares += x * x;
    }
  });
  return squares === 0 ? 1 : (sum * sum) / (n * squares);
}

/** How an asynchronous model's step size follows its batch (the run config's offPolicy.stepSize). */
export const STEP_SIZES = ['ess', 'constant'] as const;
export type StepSize = (typeof STEP_SIZES)[number];
export const DEFAULT_STEP_SIZE: StepSize = 'ess';
