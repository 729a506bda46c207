/**
 * MC-GRPO (median-centred GRPO; G + 1 episodes per task), per set:
 *   med = median of the set's scores, MAD = median |s − med|,
 *   A = (s − med) / (MAD + 1e-3)      (normalizeStd: false → A = s − med).
 * The pivot — the sample whose score is the median — is excluded from the
 * update, exactly one per set, so G samples per task are trained.
 *
 * Pivot choice (deterministic, independent of input order): sort the set by
 * score ascending, ties by sampleId in code-unit order; the pivot is sorted
 * position ⌊(n − 1)/2⌋ and med is its score. For odd n that is the usual
 * median. For even n (not the intended use) it is the lower middle, and MAD
 * uses the same lower-median rule, so the pivot always has A = 0 exactly.
 * A singleton set is its own pivot: nothing in it is trained.
 *
 * In `group` scope a sample's score is its episode's average, so the pivot
 * stands for its episode: every sample of the pivot's episode is excluded
 * (all of them have A = 0), which drops the median episode as the paper does.
 * In `group-agent-episode` the same holds within the pivot's role (its set).
 */

import type { Sample } from '../samples';
import { averagedOver, scopeSamples, toResult } from './scope';
import { lowerMedian } from './stats';
import type { AdvantageEstimator, AdvantageResult, ResolvedAdvantageOptions } from './types';

export const MC_GRPO_EPS = 1e-3;

export function mcGrpo(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult {
  const scoped = scopeSamples(samples, options);
  const { scores } = scoped;
  const adv = new Float64Array(samples.length);
  const excluded: boolean[] = new Array<boolean>(samples.length).fill(false);

  for (const set of scoped.sets) {
    const order = [...set].sort((a, b) => scores[a]! - scores[b]! || compareIds(samples[a]!.sampleId, samples[b]!.sampleId));
    const pivot = order[(order.length - 1) >> 1]!;
    const med = scores[pivot]!;
    const mad = lowerMedian(set.map((i) => Math.abs(scores[i]! - med)));
    for (const i of set) adv[i] = options.normalizeStd ? (scores[i]! - med) / (mad + MC_GRPO_EPS) : scores[i]! - med;

    excluded[pivot] = true;
    const together = averagedOver(options.scope); // the samples that share the pivot's averaged score
    if (together) for (const i of set) if (together(samples[i]!) === together(samples[pivot]!)) excluded[i] = true;
  }
  return toResult('mc-grpo', samples, scoped, adv, options, excluded);
}

function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export const mcGrpoEstimator: AdvantageEstimator = {
  name: 'mc-grpo',
  summary: '(s − median)/(MAD + 1e-3) per set; the median sample (pivot) is not trained',
  supportsNormalizeStd: true,
  perComponent: false,
  estimate: mcGrpo,
};
