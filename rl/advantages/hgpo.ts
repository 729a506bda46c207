/**
 * HGPO (He et al. 2026, "Hierarchy-of-Groups Policy Optimization for Long-Horizon
 * Agentic Tasks", arXiv:2602.22817): step-level group advantages over a hierarchy of
 * groups whose turns share more and more history, combined by weight. Read from the
 * reference `hgpo_advantage_estimate` in `recipe/hgpo/core_hgpo.py` of
 * langfengQ/verl-agent, in two public copies of that recipe (zzj1111/alfworldauto
 * 51c1a03, OliverLeeXZ/SERL 3c63ef3; the function is the same in both).
 *   levels:  C_1(t) = t's context hash (the state it acted in: GiGPO's anchor);
 *            C_k(t) = C_1(t) with C_{k−1} of each turn t came after (its agent's previous
 *            turns along the graph, `after`), k = 2..K+1, K = HGPO_HISTORY; a turn with
 *            fewer than k − 1 turns behind it has no level k (on a chain, C_k is the last
 *            k contexts, as the reference's k-step windows of observations);
 *   groups:  the turns of one (task group, agent) with equal C_k; G_t the discounted
 *            return along the turn graph (γ the `gamma` option, default 0.95;
 *            turn-graph.ts turnReturns);
 *            A_k(t) = (G_t − mean_G) / (std_G + 1e-6) in t's level-k group, std over n;
 *   combine: A(t) = Σ_k w_k A_k(t) / Σ_k w_k,  w_k = (k + 1)^α, α = HGPO_ALPHA,
 *            over the levels where t's group holds two or more turns and A_k(t) ≠ 0 (a
 *            level whose returns are all equal says nothing and does not dilute the
 *            others); no such level gives A(t) = 0.
 * K = 2 and α = 1 are the reference's defaults (history_length, length_weight_alpha): a
 * deeper level, whose turns share more of what the policy saw, is less biased and weighs
 * more. normalizeStd: false drops the division (the reference's mean_norm mode). Left
 * out: the reference's optional base_group (an episode-level advantage as a level-0 item,
 * off in its scripts) and the 1e-6 it adds to Σ w (the weights here sum to 1).
 *
 * Against gigpo: no episode-level term (a turn in no shared group gets 0), and turns that
 * acted in the same state after different histories are told apart by the deeper levels.
 * When a role's context carries its whole history, equal contexts mean equal histories,
 * every level holds the same turns, and A(t) is the level-1 (step-group) advantage.
 *
 * Baseline bias (verl #7244): each baseline is a mean over turns that share the contexts
 * up to the one the turn acted in, fixed before it acted, never by how many turns its
 * episode went on to take, and each turn's return is its own G_t, not a sum of normalized
 * per-turn values. The mean includes the turn itself, which scales A_k by (n_k − 1)/n_k
 * against a leave-one-out mean (as GRPO) and adds no bias. The left-out base_group would
 * bring one in: its episode baseline averages every step, so a longer episode weighs more.
 */

import type { Sample } from '../samples';
import { requireFields, setsBy, turnPlaces, turnReturns } from '../turn-graph';
import { toResult } from './scope';
import { mean, populationStd } from './stats';
import { DEFAULT_GAMMA, type AdvantageEstimator, type AdvantageResult, type ResolvedAdvantageOptions } from './types';

/** K: previous turns of history the deepest level matches. */
export const HGPO_HISTORY = 2;
/** α of the level weights (k + 1)^α; 0 weighs the levels alike. */
export const HGPO_ALPHA = 1;
export const HGPO_EPS = 1e-6;

/**
 * Per level k = 1..K+1 (array index k − 1), each sample's level-k context as a small id,
 * equal ids meaning equal C_k within one (task group, agent); −1 where the level does not exist.
 */
function contextLevels(samples: readonly Sample[], parents: readonly number[][], history: number): Int32Array[] {
  const ids = new Map<string, number>();
  const intern = (key: string) => {
    let id = ids.get(key);
    if (id === undefined) ids.set(key, (id = ids.size));
    return id;
  };
  const levels = Array.from({ length: history + 1 }, () => new Int32Array(samples.length).fill(-1));
  samples.forEach((s, i) => (levels[0]![i] = intern(`${s.groupId}\u0000${s.agentId}\u0000${s.contextHash}`)));
  for (let k = 1; k <= history; k++) {
    const level = levels[k]!;
    const below = levels[k - 1]!;
    for (let i = 0; i < samples.length; i++) {
      const ps = parents[i]!;
      if (ps.length === 0 || ps.some((p) => below[p]! < 0)) continue;
      level[i] = intern(`${k}\u0000${levels[0]![i]}\u0000${ps.map((p) => below[p]!).sort((a, b) => a - b)}`);
    }
  }
  return levels;
}

export function hgpo(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  requireFields(samples, 'hgpo', ['contextHash']);
  const places = turnPlaces(samples, 'hgpo');
  const g = turnReturns(samples, places, options.weights, options.gamma);
  const parents: number[][] = samples.map(() => []);
  places.children.forEach((kids, i) => kids.forEach((c) => parents[c]!.push(i)));
  const levels = contextLevels(samples, parents, HGPO_HISTORY);

  const weighted = new Float64Array(samples.length);
  const weightSum = new Float64Array(samples.length);
  let stepSets: number[][] = [];
  levels.forEach((level, index) => {
    const w = (index + 2) ** HGPO_ALPHA; // level k = index + 1 weighs (k + 1)^α
    const sets = setsBy(samples.length, (i) => String(level[i])).filter((set) => level[set[0]!]! >= 0);
    if (index === 0) stepSets = sets;
    for (const set of sets) {
      if (set.length < 2) continue;
      const r = set.map((i) => g[i]!);
      const m = mean(r);
      const std = populationStd(r, m);
      for (const i of set) {
        const a = options.normalizeStd ? (g[i]! - m) / (std + HGPO_EPS) : g[i]! - m;
        if (a === 0) continue;
        weighted[i]! += w * a;
        weightSum[i]! += w;
      }
    }
  });
  const adv = Float64Array.from(weighted, (x, i) => (weightSum[i] === 0 ? 0 : x / weightSum[i]!));
  const sharedStep: boolean[] = new Array<boolean>(samples.length).fill(false);
  for (const set of stepSets) if (set.length > 1) for (const i of set) sharedStep[i] = true;
  return { ...toResult('hgpo', samples, { sets: stepSets }, adv, options), sharedStep };
}

export const hgpoEstimator: AdvantageEstimator = {
  name: 'hgpo',
  summary: `weighted step-level advantages over groups sharing the context and up to ${HGPO_HISTORY} turns of history (weights (k+1)^${HGPO_ALPHA}; returns with γ, default ${DEFAULT_GAMMA})`,
  supportsNormalizeStd: true,
  discounted: true,
  perComponent: false,
  scopes: ['group-agent'],
  estimate: hgpo,
};
