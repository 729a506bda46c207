/**
 * The baseline of a stale batch, moved from the behaviour policy to the proximal one.
 *
 * A group's advantages A_i (GRPO, RLOO, Dr. MAS per agent: rl/advantages/) are centred
 * on what the *behaviour* policy scored: for GRPO, Σ_i A_i = 0 over the group's samples.
 * The off-policy correction then weights sample i by ω_i ≈ π_prox/π_behav, and
 * Σ_i ω_i·A_i is no longer 0: where the trainer has moved towards the group's better
 * answers (ω > 1 on them, ω < 1 on the others) the weighted advantages add up to a
 * positive sum, a push up on every token that happened to be sampled, on top of the
 * policy gradient. In expectation it is zero, per group it is not: it makes the update
 * committal (it reinforces what was sampled; Chung et al. 2021, "Beyond variance
 * reduction: understanding the true impact of baselines on policy optimization"), and
 * its size grows with the mismatch between versions, so a lag-1 batch collapses a
 * policy a synchronous one does not.
 *
 * The fix is the self-normalized importance-sampling baseline: the group's mean under
 * the proximal policy, Σ ω_i·A_i / Σ ω_i, instead of under the behaviour policy. With
 * ω_i the mean weight of sample i's trained tokens, per set g (a task group and an
 * agent, Dr. MAS's key):
 *
 *   shift_g = Σ_{i∈g} ω_i·A_i / Σ_{i∈g} ω_i  −  (1/n_g)·Σ_{i∈g} A_i,     A'_i = A_i − shift_g
 *
 * so Σ_{i∈g} ω_i·A'_i = (Σ ω_i)·(1/n_g)·Σ A_i: the weighted advantages keep the
 * centring the estimator gave the unweighted ones (0 for GRPO and RLOO), and with
 * ω ≡ 1 (a sample of the proximal version) shift_g = 0 and nothing changes. The
 * estimator's scale (its std) is left as it is. A set whose weights are all 0 (every
 * token masked) gets no shift.
 */

/** The policies a stale group's advantages may be centred on (the run config's offPolicy.baseline). */
export const BASELINES = ['proximal', 'behaviour'] as const;
export type Baseline = (typeof BASELINES)[number];
/**
 * The estimator's own centring stays the default: measured on `recall` (docs/performance.md,
 * "Asynchronous RL"), 'proximal' alone did not help (k = 2: 0.820 against 0.904) and on top of
 * the ESS step size it changed the final eval by +0.013 at k = 1, within the seed spread, with a
 * slower curve (0.77 against 0.94 at step 30).
 */
export const DEFAULT_BASELINE: Baseline = 'behaviour';

export interface BaselineSample {
  /** The set it is centred in: its task group and agent. */
  key: string;
  /** A_i: the mean advantage over its trained tokens. */
  advantage: number;
  /** ω_i: the mean off-policy weight over its trained tokens. */
  weight: number;
}

/** shift_g of each sample's set, in the order given (subtract it from the sample's advantages). */
export function proximalBaselineShifts(samples: readonly BaselineSample[]): Float64Array {
  const sets = new Map<string, { n: number; a: number; w: number; wa: number }>();
  for (const s of samples) {
    const g = sets.get(s.key) ?? { n: 0, a: 0, w: 0, wa: 0 };
    g.n++;
    g.a += s.advantage;
    g.w += s.weight;
    g.wa += s.weight * s.advantage;
    sets.set(s.key, g);
  }
  const shift = new Map([...sets].map(([key, g]) => [key, g.w > 0 ? g.wa / g.w - g.a / g.n : 0]));
  return Float64Array.from(samples, (s) => shift.get(s.key) ?? 0);
}
