/**
 * Turn returns: discounted returns along the turn graph, with a leave-one-out
 * baseline per turn position (the k-th turn of an agent, across the episodes of
 * its task group).
 *   G_t = r_t + γ · mean_{c ∈ children(t)} G_c   (a turn without children: r_t + R_t)
 *   A_t = G_t − mean_{j ∈ set(t), j ≠ t} G_j,   set(t) = (group, agent, position of t)
 * r_t: the turn's per-turn components, R_t: its episode components (both weighted);
 * γ the `gamma` option (default DEFAULT_GAMMA, 0.95); a set of one turn gets 0. rl/turn-graph.ts holds the graph
 * rules (per agent, children averaged so parallel branches do not share credit).
 * Source: reward-to-go REINFORCE (Williams 1992; Sutton & Barto §13.4) with the
 * per-position group baseline of MT-GRPO (Zeng et al. 2025, arXiv:2505.11821).
 *
 * Baseline bias (verl #7244): there the per-turn rewards were normalized per turn
 * index and then summed over the turns that follow, so the baseline of a turn had
 * as many terms as its own episode had turns left: an action-dependent baseline.
 * Here the return is summed first and the baseline subtracted once per turn; it is
 * the mean of *other* episodes' returns at that position, so it holds neither the
 * turn's own reward nor anything its episode decided later.
 */

import type { Sample } from '../samples';
import { setsBy, turnPlaces, turnReturns } from '../turn-graph';
import { toResult } from './scope';
import { mean } from './stats';
import { DEFAULT_GAMMA, type AdvantageEstimator, type AdvantageResult, type ResolvedAdvantageOptions } from './types';

export function turnReturn(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  const places = turnPlaces(samples, 'turn-return');
  const g = turnReturns(samples, places, options.weights, options.gamma);
  const sets = setsBy(samples.length, (i) => `${samples[i]!.groupId}\u0000${samples[i]!.agentId}\u0000${places.position[i]}`);
  const adv = new Float64Array(samples.length);
  for (const set of sets) {
    const n = set.length;
    if (n < 2) continue;
    const m = mean(set.map((i) => g[i]!));
    // G_t − mean of the others = n/(n − 1) · (G_t − mean of all)
    for (const i of set) adv[i] = (n / (n - 1)) * (g[i]! - m);
  }
  return toResult('turn-return', samples, { sets }, adv, options);
}

export const turnReturnEstimator: AdvantageEstimator = {
  name: 'turn-return',
  summary: `discounted return along the turn graph (γ, default ${DEFAULT_GAMMA}) − mean of other episodes' at the same turn position`,
  supportsNormalizeStd: false,
  discounted: true,
  perComponent: false,
  scopes: ['group-agent'],
  estimate: turnReturn,
};
