/**
 * AT-GRPO (Zhao et al. 2025, "Stronger Together: On-Policy Reinforcement
 * Learning for Collaborative LLMs", arXiv:2510.11062; PettingLLMs): GRPO with
 * agent- and turn-wise groups. A turn is compared with the turns the same agent
 * took at the same turn position in the other episodes of its task group:
 *   s_t = r_t + R_t   (the turn's per-turn components plus its episode ones, weighted;
 *                      the paper's α·team + local reward is set with reward weights)
 *   A_t = (s_t − mean_set) / (std_set + 1e-6),  set = (task group, agent, position of t)
 * std unbiased (n − 1); normalizeStd: false gives s_t − mean_set; a set of one gets 0
 * (the paper branches at every turn so its groups are never single; ours can be,
 * when one episode ran longer than the others).
 *
 * Baseline bias (verl #7244): each turn's advantage is its own position's normalized
 * score and is never summed with later turns', so no baseline has as many terms as
 * its episode had turns. The set mean includes the turn itself, which scales the
 * advantage by (n − 1)/n against a leave-one-out mean and adds no bias.
 */

import type { Sample } from '../samples';
import { scoreOf } from '../samples';
import { setsBy, turnPlaces } from '../turn-graph';
import { toResult } from './scope';
import { mean, unbiasedStd } from './stats';
import type { AdvantageEstimator, AdvantageResult, ResolvedAdvantageOptions } from './types';

export const AT_GRPO_EPS = 1e-6;

export function atGrpo(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  const places = turnPlaces(samples, 'at-grpo');
  const sets = setsBy(samples.length, (i) => `${samples[i]!.groupId}\u0000${samples[i]!.agentId}\u0000${places.position[i]}`);
  const adv = new Float64Array(samples.length);
  for (const set of sets) {
    if (set.length < 2) continue;
    const s = set.map((i) => scoreOf(samples[i]!, options.weights));
    const m = mean(s);
    const std = unbiasedStd(s, m);
    set.forEach((i, k) => (adv[i] = options.normalizeStd ? (s[k]! - m) / (std + AT_GRPO_EPS) : s[k]! - m));
  }
  return toResult('at-grpo', samples, { sets }, adv, options);
}

export const atGrpoEstimator: AdvantageEstimator = {
  name: 'at-grpo',
  summary: '(s − mean)/(std + 1e-6) per (group, agent, turn position); s = turn + episode reward',
  supportsNormalizeStd: true,
  perComponent: false,
  scopes: ['group-agent'],
  estimate: atGrpo,
};
