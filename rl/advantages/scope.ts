/**
 * Scope: which samples share statistics, and what score each sample carries
 * into them. Every estimator goes through here, which is how one `scope`
 * option applies to all of them.
 *
 * - `group-agent` (Dr. MAS): a set per (task group, agent); each sample keeps
 *   its own score, so an agent called L times contributes L samples.
 * - `group` (the "global" baseline): a set per task group; each sample's score
 *   (and each reward component) is replaced by its episode's average over the
 *   samples of the call, then statistics run over the samples of the group.
 * - `group-agent-episode` (episode-level credit per role): a set per (task
 *   group, agent), as `group-agent`; each sample's score (and component) is
 *   replaced by the average over its agent's samples of its episode, so one
 *   role's rewards never reach another's turns.
 * - `batch`: one set with every sample of the call, own scores.
 *
 * Set order and order within a set is first appearance in the input.
 */

import { componentNames, componentOf, scoreOf, type Sample } from '../samples';
import type { AdvantageDiagnostics, AdvantageResult, ResolvedAdvantageOptions } from './types';

export interface ScopedSamples {
  /** Per sample: weighted score (episode average in `group` scope). */
  scores: Float64Array;
  /** Reward component names, union over the call. */
  components: string[];
  /** componentValues[j][i]: component j of sample i (missing = 0; episode average in `group` scope). */
  componentValues: Float64Array[];
  /** Statistics sets, as lists of sample indices. */
  sets: number[][];
}

export function scopeSamples(samples: readonly Sample[], options: ResolvedAdvantageOptions): ScopedSamples {
  const n = samples.length;
  const components = componentNames(samples);
  const scores = new Float64Array(n);
  const componentValues = components.map(() => new Float64Array(n));
  for (let i = 0; i < n; i++) {
    scores[i] = scoreOf(samples[i]!, options.weights);
    for (let j = 0; j < components.length; j++) componentValues[j]![i] = componentOf(samples[i]!, components[j]!);
  }
  const average = averagedOver(options.scope);
  if (average) {
    averagePer(samples, scores, average);
    for (const values of componentValues) averagePer(samples, values, average);
  }

  const sets: number[][] = [];
  const setOfKey = new Map<string, number[]>();
  for (let i = 0; i < n; i++) {
    const s = samples[i]!;
    // '\u0000' cannot be confused with characters inside ids.
    const key = options.scope === 'batch' ? '' : options.scope === 'group' ? s.groupId : `${s.groupId}\u0000${s.agentId}`;
    let set = setOfKey.get(key);
    if (set === undefined) {
      set = [];
      setOfKey.set(key, set);
      sets.push(set);
    }
    set.push(i);
  }
  return { scores, components, componentValues, sets };
}

/** The samples whose scores a scope averages into one (by key), or undefined when each keeps its own. */
export function averagedOver(scope: ResolvedAdvantageOptions['scope']): ((s: Sample) => string) | undefined {
  if (scope === 'group') return (s) => s.episodeId;
  if (scope === 'group-agent-episode') return (s) => `${s.episodeId}\u0000${s.agentId}`;
  return undefined;
}

/**
 * Replaces each value by the mean over the samples of the same key, shifted
 * by the key's first value so equal values stay exactly equal (see stats.ts).
 */
function averagePer(samples: readonly Sample[], values: Float64Array, keyOf: (s: Sample) => string): void {
  const acc = new Map<string, { first: number; shifted: number; count: number }>();
  const keys = samples.map(keyOf);
  keys.forEach((k, i) => {
    const a = acc.get(k);
    if (a === undefined) acc.set(k, { first: values[i]!, shifted: 0, count: 1 });
    else {
      a.shifted += values[i]! - a.first;
      a.count++;
    }
  });
  keys.forEach((k, i) => {
    const a = acc.get(k)!;
    values[i] = a.first + a.shifted / a.count;
  });
}

/** Values of one set, in set order. */
export function pick(values: ArrayLike<number>, set: readonly number[]): Float64Array {
  const out = new Float64Array(set.length);
  for (let k = 0; k < set.length; k++) out[k] = values[set[k]!]!;
  return out;
}

/**
 * Wraps per-sample advantages into a result: excluded samples get 0, `-0`
 * becomes 0 (so "zero advantage" is unambiguous downstream), and the
 * diagnostics are filled.
 */
export function toResult(
  estimator: string,
  samples: readonly Sample[],
  scoped: Pick<ScopedSamples, 'sets'>,
  advantages: Float64Array,
  options: ResolvedAdvantageOptions,
  excluded: boolean[] = new Array<boolean>(samples.length).fill(false),
): AdvantageResult {
  const excludedSampleIds: string[] = [];
  for (let i = 0; i < samples.length; i++) {
    if (excluded[i]) {
      advantages[i] = 0;
      excludedSampleIds.push(samples[i]!.sampleId);
    } else advantages[i]! += 0;
  }
  let singletonSets = 0;
  let zeroAdvantageSets = 0;
  for (const set of scoped.sets) {
    if (set.length === 1) singletonSets++;
    if (set.every((i) => advantages[i] === 0)) zeroAdvantageSets++;
  }
  const diagnostics: AdvantageDiagnostics = {
    estimator,
    scope: options.scope,
    samples: samples.length,
    sets: scoped.sets.length,
    singletonSets,
    zeroAdvantageSets,
    excludedSampleIds,
  };
  return { advantages, excluded, diagnostics };
}
