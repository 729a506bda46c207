/**
 * GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent
 * Training", arXiv:2505.10978): an episode-level group advantage plus a
 * step-level one over anchor-state groups.
 *   episode:  A_E(e) = (E_e − mean_E) / (std_E + 1e-6) over the episodes of the
 *             (task group, agent); E_e = the agent's total reward in episode e
 *             (turn-graph.ts episodeReturns); one value per episode, so an episode
 *             with more turns does not weigh more;
 *   step:     turns whose context tokens hash alike (same anchor state) in the same
 *             (task group, agent) form a step group; with G_t the discounted return
 *             along the turn graph (γ the `gamma` option, default 0.95; turn-graph.ts turnReturns),
 *             A_S(t) = (G_t − mean_G) / (std_G + 1e-6) within the step group;
 *   A(t) = A_E(e) + ω · A_S(t), ω = GIGPO_OMEGA (the paper's weighting, ω = 1).
 * A group of one (episode or step) contributes 0. Stds are unbiased (n − 1);
 * normalizeStd: false drops both divisions (the paper's F_norm = 1).
 *
 * Baseline bias (verl #7244): a step group is fixed by the state the turn acted
 * in, never by how many turns its episode went on to take, and returns are summed
 * before any normalization, so no baseline gains terms from the episode's own
 * length. The step mean includes the turn itself, which only scales the advantage
 * by (n − 1)/n against a leave-one-out mean (as GRPO does); it adds no bias.
 */

import type { RewardWeights, Sample } from '../samples';
import { episodeReturns, requireFields, setsBy, turnPlaces, turnReturns } from '../turn-graph';
import { toResult } from './scope';
import { mean, unbiasedStd } from './stats';
import { DEFAULT_GAMMA, type AdvantageEstimator, type AdvantageResult, type ResolvedAdvantageOptions } from './types';

export const GIGPO_OMEGA = 1;
export const GIGPO_EPS = 1e-6;

/**
 * A_E per sample: its (episode, agent) total normalized over the episodes of its
 * (task group, agent), one value per episode; a group of one episode gets 0.
 */
export function episodeAdvantages(samples: readonly Sample[], weights: RewardWeights, normalizeStd: boolean): Float64Array {
  const totals = episodeReturns(samples, weights);
  const out = new Float64Array(samples.length);
  for (const set of setsBy(samples.length, (i) => `${samples[i]!.groupId}\u0000${samples[i]!.agentId}`)) {
    const firstOf = new Map<string, number>();
    for (const i of set) if (!firstOf.has(samples[i]!.episodeId)) firstOf.set(samples[i]!.episodeId, i);
    if (firstOf.size < 2) continue;
    const e = [...firstOf.values()].map((i) => totals[i]!);
    const m = mean(e);
    const std = unbiasedStd(e, m);
    for (const i of set) out[i] = normalizeStd ? (totals[i]! - m) / (std + GIGPO_EPS) : totals[i]! - m;
  }
  return out;
}

export function gigpo(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  requireFields(samples, 'gigpo', ['contextHash']);
  const places = turnPlaces(samples, 'gigpo');
  const g = turnReturns(samples, places, options.weights, options.gamma);
  const adv = episodeAdvantages(samples, options.weights, options.normalizeStd);
  const sets = setsBy(samples.length, (i) => `${samples[i]!.groupId}\u0000${samples[i]!.agentId}\u0000${samples[i]!.contextHash}`);
  const sharedStep: boolean[] = new Array<boolean>(samples.length).fill(false);
  for (const set of sets) {
    if (set.length < 2) continue;
    for (const i of set) sharedStep[i] = true;
    const s = set.map((i) => g[i]!);
    const m = mean(s);
    const std = unbiasedStd(s, m);
    for (const i of set) adv[i]! += GIGPO_OMEGA * (options.normalizeStd ? (g[i]! - m) / (std + GIGPO_EPS) : g[i]! - m);
  }
  return { ...toResult('gigpo', samples, { sets }, adv, options), sharedStep };
}

export const gigpoEstimator: AdvantageEstimator = {
  name: 'gigpo',
  summary: `episode-level group advantage + ${GIGPO_OMEGA}× step-level one over turns with identical contexts (returns with γ, default ${DEFAULT_GAMMA})`,
  supportsNormalizeStd: true,
  discounted: true,
  perComponent: false,
  scopes: ['group-agent'],
  estimate: gigpo,
};
