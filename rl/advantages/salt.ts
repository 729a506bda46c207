/**
 * SALT-style step advantages over the merged trajectory graph of a group
 * (after Li et al. 2025, "SALT: Step-level Advantage Assignment for Long-horizon
 * Agents via Trajectory Graph", arXiv:2510.20022). The episodes of one (task
 * group, agent) are merged into one graph: turns with the same context and
 * response (same `turnHash`) are one node. Then
 *   A_E(e) = (E_e − mean_E) / (std_E + 1e-6)   over the group's episodes
 *            (gigpo.ts episodeAdvantages: E_e is the agent's total in episode e);
 *   A(t)   = mean of A_E(e) over the distinct episodes e that pass through t's node.
 * A turn only one episode took keeps that episode's advantage (plain GRPO); a turn
 * several took gets the mean over the outcomes that followed it, so a shared step
 * that did not decide the outcome is pushed neither way. normalizeStd: false drops
 * the division; a group of one episode gets 0.
 *
 * Baseline bias (verl #7244): the baseline is one per episode (mean_E over episode
 * totals), not per turn, and a node's value averages whole-episode advantages,
 * so no baseline counts the turns an episode took.
 */

import type { Sample } from '../samples';
import { requireFields, setsBy } from '../turn-graph';
import { episodeAdvantages } from './gigpo';
import { toResult } from './scope';
import { mean } from './stats';
import type { AdvantageEstimator, AdvantageResult, ResolvedAdvantageOptions } from './types';

export function salt(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  requireFields(samples, 'salt', ['turnHash']);
  const episodeAdv = episodeAdvantages(samples, options.weights, options.normalizeStd);
  const nodes = setsBy(samples.length, (i) => `${samples[i]!.groupId}\u0000${samples[i]!.agentId}\u0000${samples[i]!.turnHash}`);
  const adv = new Float64Array(samples.length);
  const sharedStep: boolean[] = new Array<boolean>(samples.length).fill(false);
  for (const node of nodes) {
    // One value per episode through the node, however often the episode repeated the turn.
    const byEpisode = new Map<string, number>();
    for (const i of node) byEpisode.set(samples[i]!.episodeId, episodeAdv[i]!);
    if (node.length > 1) for (const i of node) sharedStep[i] = true;
    const value = mean([...byEpisode.values()]);
    for (const i of node) adv[i] = value;
  }
  return { ...toResult('salt', samples, { sets: nodes }, adv, options), sharedStep };
}

export const saltEstimator: AdvantageEstimator = {
  name: 'salt',
  summary: 'episode-level group advantage, averaged over the episodes that share each turn (merged turn graph)',
  supportsNormalizeStd: true,
  perComponent: false,
  scopes: ['group-agent'],
  estimate: salt,
};
