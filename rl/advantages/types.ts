/**
 * The one signature every advantage estimator has, and its options.
 *
 * Shapes: `samples` has length N; `advantages` (Float64Array) and `excluded`
 * have length N, in the same order. A sample with `excluded[i] = true` is not
 * trained on: its advantage is 0, and passing `excluded` to
 * tokens.aggregationWeights gives its tokens weight 0.
 */

import type { RewardWeights, Sample } from '../samples';

/**
 * Which samples share statistics (see scope.ts):
 * - `group-agent` (Dr. MAS): sets are (task group, agent); every invocation
 *   is a sample, so an agent called L times per episode contributes L samples.
 * - `group` (the "global" baseline Dr. MAS compares against): sets are task
 *   groups; each sample's score is its episode's average score.
 * - `group-agent-episode` (episode-level credit per role): sets are (task
 *   group, agent); each sample's score is the average over its agent's samples
 *   of its episode.
 * - `batch`: one set holding every sample of the call.
 */
export type Scope = 'group-agent' | 'group' | 'group-agent-episode' | 'batch';
export const SCOPES: readonly Scope[] = ['group-agent', 'group', 'group-agent-episode', 'batch'];

export interface AdvantageOptions {
  /** Reward-component weights; score = Σ_j w_j r_j, missing weights are 1. */
  weights?: RewardWeights;
  /** Default `group-agent`. */
  scope?: Scope;
  /** Divide by the spread (std, MAD). Only for estimators that declare it; default true. */
  normalizeStd?: boolean;
  /** Discount per turn along the turn graph, 0-1. Only for estimators that declare `discounted`; default DEFAULT_GAMMA. */
  gamma?: number;
}

/** γ of the discounted estimators when a run config sets none. */
export const DEFAULT_GAMMA = 0.95;

export interface ResolvedAdvantageOptions {
  weights: RewardWeights;
  scope: Scope;
  normalizeStd: boolean;
  gamma: number;
}

export interface AdvantageDiagnostics {
  estimator: string;
  scope: Scope;
  samples: number;
  /** Statistics sets (see Scope). */
  sets: number;
  /** Sets with a single sample (their advantage follows the estimator's singleton rule). */
  singletonSets: number;
  /** Sets in which every trained sample has advantage exactly 0. */
  zeroAdvantageSets: number;
  /** Ids of samples not trained on (e.g. MC-GRPO pivots). */
  excludedSampleIds: string[];
}

export interface AdvantageResult {
  advantages: Float64Array;
  excluded: boolean[];
  /**
   * Estimators that group turns by what they saw or did (GiGPO step groups, SALT merged
   * turns): per sample, whether its group held more than one turn.
   */
  sharedStep?: boolean[];
  diagnostics: AdvantageDiagnostics;
}

/** An estimator as the registry holds it. `estimate` trusts validated input. */
export interface AdvantageEstimator {
  name: string;
  /** One line for docs and error messages. */
  summary: string;
  /** Whether `normalizeStd: false` means something for this estimator. */
  supportsNormalizeStd: boolean;
  /**
   * Whether it normalizes each reward component on its own (GDPO), so its input
   * must keep the components: roles with different reward weights cannot share
   * one call on scores weighted beforehand (activities/training/batch.ts).
   */
  perComponent: boolean;
  /** Whether it discounts returns along the turn graph, so `gamma` means something for it; absent means no. */
  discounted?: boolean;
  /** The scopes it accepts; absent means all. Turn-level estimators make their own sets within `group-agent`. */
  scopes?: readonly Scope[];
  estimate(samples: readonly Sample[], options: ResolvedAdvantageOptions): AdvantageResult;
}
