/**
 * The turn graph as turn-level estimators see it: per (episode, agent), the
 * agent's own turns with edges to the turns it came after, and the return of
 * each turn along those edges.
 *
 * Credit stays with the role: a role's returns sum its own rewards (its
 * reward function scored its turns), so the graph is restricted to one
 * agent, other agents' turns in between passed through (agentParents).
 */

import { IssueList } from './errors';
import { mean } from './advantages/stats';
import { episodeScoreOf, turnScoreOf, type RewardWeights, type Sample } from './samples';

/** A trajectory turn as far as the graph goes (schema/trajectory.ts TurnRecord fits). */
export interface GraphTurn {
  index: number;
  agent: string;
  parents: readonly number[];
}

/**
 * For each turn, the nearest turns of the same agent on paths into it: a
 * parent of another agent is passed through to its own parents. Edges implied
 * by others (p before q, both listed, q reachable from p) are dropped, so an
 * agent's chain of turns stays a chain when it also hears from another agent.
 * Result is per turn in input order, indices ascending.
 */
export function agentParents(turns: readonly GraphTurn[]): number[][] {
  const byIndex = new Map(turns.map((t) => [t.index, t]));
  const nearest = new Map<string, Set<number>>();
  // Nearest turns of `agent` at or above turn `index` (memoized: graphs are small, paths many).
  const nearestOf = (index: number, agent: string): Set<number> => {
    const key = `${index}\u0000${agent}`;
    const known = nearest.get(key);
    if (known) return known;
    const t = byIndex.get(index);
    const out = new Set<number>();
    if (t !== undefined) {
      if (t.agent === agent) out.add(index);
      else for (const p of t.parents) for (const q of nearestOf(p, agent)) out.add(q);
    }
    nearest.set(key, out);
    return out;
  };
  const result = new Map<number, number[]>();
  const ancestors = new Map<number, Set<number>>();
  for (const t of [...turns].sort((a, b) => a.index - b.index)) {
    const direct = new Set<number>();
    for (const p of t.parents) for (const q of nearestOf(p, t.agent)) direct.add(q);
    const above = new Set<number>();
    for (const q of direct) for (const a of ancestors.get(q) ?? []) above.add(a);
    const kept = [...direct].filter((q) => !above.has(q)).sort((a, b) => a - b);
    result.set(t.index, kept);
    ancestors.set(t.index, new Set([...direct, ...above]));
  }
  return turns.map((t) => result.get(t.index)!);
}

/** Throws naming each sample that lacks one of the graph fields an estimator needs. */
export function requireFields(samples: readonly Sample[], estimator: string, fields: ReadonlyArray<'turn' | 'after' | 'contextHash' | 'turnHash'>): void {
  const issues = new IssueList();
  samples.forEach((s, i) => {
    for (const f of fields) if (s[f] === undefined) issues.add(`samples[${i}].${f}`, `is required by estimator ${estimator} (sample ${s.sampleId})`);
  });
  issues.throwIfAny();
}

/** Where each sample sits in its (episode, agent) graph. */
export interface TurnPlaces {
  /** Ordinal of the turn among its agent's turns in the episode (0 = first). */
  position: Int32Array;
  /** Sample indices of the turns that follow each one (same episode and agent). */
  children: number[][];
}

/**
 * Positions and child edges of the given samples; every sample needs `turn` and `after`
 * (the error names the estimator that needed them). `after` entries that point at turns
 * not among the samples are ignored (their turns were not trained: a failed step, say).
 */
export function turnPlaces(samples: readonly Sample[], estimator: string): TurnPlaces {
  requireFields(samples, estimator, ['turn', 'after']);
  const issues = new IssueList();
  const byEpisodeAgent = new Map<string, number[]>();
  samples.forEach((s, i) => {
    const key = `${s.episodeId}\u0000${s.agentId}`;
    let list = byEpisodeAgent.get(key);
    if (list === undefined) byEpisodeAgent.set(key, (list = []));
    list.push(i);
  });
  const position = new Int32Array(samples.length);
  const children: number[][] = samples.map(() => []);
  for (const list of byEpisodeAgent.values()) {
    list.sort((a, b) => samples[a]!.turn! - samples[b]!.turn!);
    const at = new Map<number, number>();
    list.forEach((i, k) => {
      position[i] = k;
      const s = samples[i]!;
      if (at.has(s.turn!)) issues.add(`samples[${i}].turn`, `turn ${s.turn} of episode ${JSON.stringify(s.episodeId)} appears twice`);
      at.set(s.turn!, i);
    });
    for (const i of list) for (const p of samples[i]!.after!) if (at.has(p)) children[at.get(p)!]!.push(i);
  }
  issues.throwIfAny();
  return { position, children };
}

/**
 * Discounted return of every turn along its agent's graph:
 *   G_t = r_t + γ · mean_{c ∈ children(t)} G_c,   and for a turn without children
 *   G_t = r_t + R_t,
 * with r_t the turn's weighted per-turn components and R_t its weighted episode
 * components (the episode's outcome arrives after the agent's last turn on each
 * branch). Children are averaged, not summed: a turn followed by two parallel
 * branches is credited with what they earn on average, and a branch never gets
 * credit from a parallel one (it is not its descendant).
 */
export function turnReturns(samples: readonly Sample[], places: TurnPlaces, weights: RewardWeights, gamma: number): Float64Array {
  const g = new Float64Array(samples.length);
  // Children have larger turn indices: visit turns latest first.
  const order = samples.map((_, i) => i).sort((a, b) => samples[b]!.turn! - samples[a]!.turn!);
  for (const i of order) {
    const s = samples[i]!;
    const kids = places.children[i]!;
    let next = 0;
    if (kids.length === 0) next = episodeScoreOf(s, weights);
    else {
      for (const c of kids) next += g[c]!;
      next = (gamma * next) / kids.length;
    }
    g[i] = turnScoreOf(s, weights) + next;
  }
  return g;
}

/** Sample indices grouped by `key`, sets in first-appearance order. */
export function setsBy(n: number, key: (i: number) => string): number[][] {
  const sets: number[][] = [];
  const byKey = new Map<string, number[]>();
  for (let i = 0; i < n; i++) {
    const k = key(i);
    let set = byKey.get(k);
    if (set === undefined) {
      byKey.set(k, (set = []));
      sets.push(set);
    }
    set.push(i);
  }
  return sets;
}

/**
 * Per sample, its agent's undiscounted total in the episode: the per-turn rewards of all
 * the agent's turns plus the mean of their episode rewards (normally one value repeated).
 * Every turn of one (episode, agent) gets the same number.
 */
export function episodeReturns(samples: readonly Sample[], weights: RewardWeights): Float64Array {
  const acc = new Map<string, { turn: number; episode: number[] }>();
  const keyOf = (s: Sample) => `${s.episodeId}\u0000${s.agentId}`;
  for (const s of samples) {
    const a = acc.get(keyOf(s)) ?? { turn: 0, episode: [] };
    a.turn += turnScoreOf(s, weights);
    a.episode.push(episodeScoreOf(s, weights));
    acc.set(keyOf(s), a);
  }
  return Float64Array.from(samples, (s) => {
    const a = acc.get(keyOf(s))!;
    return a.turn + mean(a.episode);
  });
}
