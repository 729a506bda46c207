/**
 * Samples: the input of every advantage estimator.
 *
 * A sample is one agent invocation (a turn) that will be trained on. Rewards
 * arrive already assigned to the role and turn, as named components; the
 * estimator turns them into one score with weights.
 *
 * Simplified: a reward component a sample does not report counts as 0 in
 * every score and statistic (one rule, no per-component masks).
 *
 * Turn-level estimators (rl/advantages/turn-*.ts and the like) also read where the
 * turn sits in its episode's graph (`turn`, `after`), what it saw and did
 * (`contextHash`, `turnHash`) and which components reward the turn itself
 * (`turnRewards`) rather than the episode (`rewards`). Episode-level estimators
 * score both kinds alike (scoreOf), so they need none of these fields.
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
  /** Per-turn reward components (the turn's own signal); names never repeat those of `rewards`. */
  turnRewards?: Readonly<Record<string, number>>;
  /** The turn's index in its episode. */
  turn?: number;
  /**
   * The same agent's turns (indices) this turn follows in the episode's graph, other agents'
   * turns in between passed through (rl/turn-graph.ts agentParents).
   */
  after?: readonly number[];
  /** Hash of the turn's context tokens: the state it acted in. */
  contextHash?: string;
  /** Hash of the context and response tokens: the state and what the turn did in it. */
  turnHash?: string;
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

    if (s.turnRewards !== undefined) {
      const tr = s.turnRewards;
      if (typeof tr !== 'object' || tr === null || Array.isArray(tr))
        issues.add(`${at}.turnRewards`, `must be an object of named numbers, got ${describe(tr)}`);
      else
        for (const [k, v] of Object.entries(tr)) {
          if (typeof v !== 'number' || !Number.isFinite(v)) issues.add(`${at}.turnRewards.${k}`, `must be a finite number, got ${describe(v)}`);
          else if (typeof rewards === 'object' && rewards !== null && Object.prototype.hasOwnProperty.call(rewards, k))
            issues.add(`${at}.turnRewards.${k}`, 'is also an episode reward component (rewards); a name is one or the other');
        }
    }
    if (s.turn !== undefined && !(typeof s.turn === 'number' && Number.isInteger(s.turn) && s.turn >= 0))
      issues.add(`${at}.turn`, `must be a non-negative integer, got ${describe(s.turn)}`);
    if (s.after !== undefined) {
      if (!Array.isArray(s.after)) issues.add(`${at}.after`, `must be an array of turn indices, got ${describe(s.after)}`);
      else
        s.after.forEach((p, k) => {
          if (!(typeof p === 'number' && Number.isInteger(p) && p >= 0)) issues.add(`${at}.after[${k}]`, `must be a non-negative integer, got ${describe(p)}`);
          else if (typeof s.turn === 'number' && p >= s.turn) issues.add(`${at}.after[${k}]`, `must be an earlier turn than ${s.turn}, got ${p}`);
        });
    }
    for (const field of ['contextHash', 'turnHash'] as const) {
      const v = s[field];
      if (v !== undefined && (typeof v !== 'string' || v.length === 0)) issues.add(`${at}.${field}`, `must be a non-empty string, got ${describe(v)}`);
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

/** A sample's score: the weighted sum of all its reward components, episode and turn ones. */
export function scoreOf(sample: Sample, weights: RewardWeights): number {
  return episodeScoreOf(sample, weights) + turnScoreOf(sample, weights);
}

/** The weighted sum of the sample's episode components (`rewards`). */
export function episodeScoreOf(sample: Sample, weights: RewardWeights): number {
  return weightedSum(sample.rewards, weights);
}

/** The weighted sum of the sample's per-turn components (`turnRewards`); 0 without any. */
export function turnScoreOf(sample: Sample, weights: RewardWeights): number {
  return sample.turnRewards === undefined ? 0 : weightedSum(sample.turnRewards, weights);
}

function weightedSum(components: Readonly<Record<string, number>>, weights: RewardWeights): number {
  let s = 0;
  for (const k in components) s += (weights[k] ?? 1) * components[k]!;
  return s;
}

/** A component's value on a sample, episode or turn one; 0 where it reports none. */
export function componentOf(sample: Sample, name: string): number {
  return sample.rewards[name] ?? sample.turnRewards?.[name] ?? 0;
}

/** All reward component names that appear in the samples (episode and turn ones), in first-seen order. */
export function componentNames(samples: readonly Sample[]): string[] {
  const names = new Set<string>();
  for (const s of samples) {
    for (const k in s.rewards) names.add(k);
    for (const k in s.turnRewards ?? {}) names.add(k);
  }
  return [...names];
}
