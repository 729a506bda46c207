/**
 * Samples: the input of every advantage estimator.
 *
 * A sample is one agent invocation (a turn) that will be trained on. Rewards
 * arrive already assigned to the role and turn, as named components; the
 * estimator turns them into one score with weights.
 *
 * Simplified: a reward component a sample does not report counts as 0 in
 * every score and statistic (one rule, no per-component masks).
 */

import { IssueList, describe } from './errors';

export interface Sample {
  sampleId: string;
  /** Task group within a step (the G episodes of one task). */
  groupId: string;
  episodeId: string;
  /** The role that produced this turn. */
  agentId: string;
  modelId: string;
  /** Named reward components for this role/turn. */
  rewards: Readonly<Record<string, number>>;
  /** Number of loss-mask-1 tokens; weights token-level whitening. */
  trainableTokens: number;
}

/** Reward-component weights; a component without a weight has weight 1. */
export type RewardWeights = Readonly<Record<string, number>>;

const ID_FIELDS = ['sampleId', 'groupId', 'episodeId', 'agentId', 'modelId'] as const;

/**
 * Checks an unknown value is a valid sample list and returns it typed.
 * Besides field types it rejects duplicate sample ids (a sample counted twice
 * skews every statistic) and an episode spread over two groups (the episode
 * average of the `group` scope would be ill-defined).
 */
export function validateSamples(input: unknown, name = 'samples'): Sample[] {
  const issues = new IssueList();
  if (!Array.isArray(input)) {
    issues.add(name, `must be an array of samples, got ${describe(input)}`);
    issues.throwIfAny();
  }
  const list = input as unknown[];
  const seenSample = new Map<string, number>();
  const episodeGroup = new Map<string, { groupId: string; index: number }>();

  list.forEach((raw, i) => {
    const at = `${name}[${i}]`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      issues.add(at, `must be an object, got ${describe(raw)}`);
      return;
    }
    const s = raw as Record<string, unknown>;
    for (const field of ID_FIELDS) {
      const v = s[field];
      if (v === undefined) issues.add(`${at}.${field}`, 'is required (a non-empty string)');
      else if (typeof v !== 'string' || v.length === 0) issues.add(`${at}.${field}`, `must be a non-empty string, got ${describe(v)}`);
    }

    const rewards = s.rewards;
    if (typeof rewards !== 'object' || rewards === null || Array.isArray(rewards)) {
      issues.add(`${at}.rewards`, `must be an object of named numbers, got ${describe(rewards)}`);
    } else {
      for (const [k, v] of Object.entries(rewards)) {
        if (typeof v !== 'number' || !Number.isFinite(v)) issues.add(`${at}.rewards.${k}`, `must be a finite number, got ${describe(v)}`);
      }
    }

    const tokens = s.trainableTokens;
    if (typeof tokens !== 'number' || !Number.isInteger(tokens) || tokens < 0)
      issues.add(`${at}.trainableTokens`, `must be a non-negative integer, got ${describe(tokens)}`);

    if (typeof s.sampleId === 'string') {
      const first = seenSample.get(s.sampleId);
      if (first !== undefined) issues.add(`${at}.sampleId`, `duplicate sample id ${JSON.stringify(s.sampleId)} (also ${name}[${first}])`);
      else seenSample.set(s.sampleId, i);
    }
    if (typeof s.episodeId === 'string' && typeof s.groupId === 'string') {
      const prev = episodeGroup.get(s.episodeId);
      if (prev === undefined) episodeGroup.set(s.episodeId, { groupId: s.groupId, index: i });
      else if (prev.groupId !== s.groupId)
        issues.add(
          `${at}.groupId`,
          `episode ${JSON.stringify(s.episodeId)} is in group ${JSON.stringify(prev.groupId)} ` + `(${name}[${prev.index}]) and ${JSON.stringify(s.groupId)}`,
        );
    }
  });
  issues.throwIfAny();
  return list as Sample[];
}

/** Checks reward weights are finite numbers. */
export function validateWeights(weights: unknown, path: string): RewardWeights {
  const issues = new IssueList();
  if (weights === undefined) return {};
  if (typeof weights !== 'object' || weights === null || Array.isArray(weights)) {
    issues.add(path, `must be an object of named numbers, got ${describe(weights)}`);
  } else {
    for (const [k, v] of Object.entries(weights)) {
      if (typeof v !== 'number' || !Number.isFinite(v)) issues.add(`${path}.${k}`, `must be a finite number, got ${describe(v)}`);
    }
  }
  issues.throwIfAny();
  return weights as RewardWeights;
}

/** A sample's score: the weighted sum of its reward components. */
export function scoreOf(sample: Sample, weights: RewardWeights): number {
  let s = 0;
  for (const k in sample.rewards) s += (weights[k] ?? 1) * sample.rewards[k]!;
  return s;
}

/** All reward component names that appear in the samples, in first-seen order. */
export function componentNames(samples: readonly Sample[]): string[] {
  const names = new Set<string>();
  for (const s of samples) for (const k in s.rewards) names.add(k);
  return [...names];
}
