/**
 * A rollout's progress while it runs: what each part (a batched rollout activity, a durable
 * rollout node) reports to its run, and the view the run gives of it (the status query,
 * `troupe status`, the dashboard, the Web UI's Current Details). Here, below activities and
 * workflows, because both send or receive it.
 */
import { defineSignal } from '@temporalio/workflow';
import { failureKind } from './trajectory';

/** A rollout in flight as the status query, `troupe status`, the dashboard and Current Details show it. */
export interface RolloutProgressView {
  step: number;
  split: 'train' | 'eval';
  /** Episodes finished (stored) so far, and planned. */
  done: number;
  planned: number;
  failed: number;
  /** The most common failure so far (numbers masked), with its count. */
  reason: { error: string; count: number } | null;
  /** Agent turns per second since the rollout started; null before any finished. */
  turnsPerSecond: number | null;
  /** Seconds left at the rate so far; null before any finished. */
  etaSeconds: number | null;
}

/**
 * What one part of a rollout (a batched rollout activity, or a durable rollout node) has
 * finished so far; parts report every few seconds while they run.
 */
export interface RolloutPartProgress {
  step: number;
  split: 'train' | 'eval';
  /** The part's first episode index in the plan (its identity). */
  from: number;
  done: number;
  failed: number;
  turns: number;
  /** Failed episodes by error, numbers masked. */
  errors: Record<string, number>;
}

/** Sent by the parts of a rollout in flight (pool activities, rollout nodes) to their run. */
export const rolloutProgressSignal = defineSignal<[RolloutPartProgress]>('rolloutProgress');

/** Adds one finished episode to a part's counts (its error kind masked: schema/trajectory.ts failureKind). */
export function addEpisode(counts: Pick<RolloutPartProgress, 'done' | 'failed' | 'turns' | 'errors'>, e: { status: string; turns?: number; error?: string }) {
  counts.done++;
  counts.turns += e.turns ?? 0;
  if (e.status !== 'failed') return;
  counts.failed++;
  const kind = failureKind(e.error ?? 'failed');
  counts.errors[kind] = (counts.errors[kind] ?? 0) + 1;
}

/**
 * A rollout whose first FAIL_FAST finished episodes all failed the same way (numbers aside) stops
 * there and fails the run naming the error (EpisodesFailing): a team that fails every episode
 * after `limits.cpuMs` (30 s) would otherwise spend minutes per step on it. 4: a healthy team's
 * first finishers complete, and a pool worker runs 4 episode threads.
 */
export const FAIL_FAST = 4;

/** Watches a rollout's first finished episodes; `add` returns the run's failure message once they all died of one error. */
export function firstFailures(total: number, step: number, split: string) {
  const n = Math.min(FAIL_FAST, total);
  const first: string[] = [];
  return {
    add(e: { status: string; error?: string }): string | undefined {
      if (first.length >= n) return undefined;
      first.push(e.status === 'failed' ? (e.error ?? 'failed') : '');
      if (first.length < n || !first[0] || new Set(first.map(failureKind)).size > 1) return undefined;
      return `the first ${n} episodes of step ${step} (${split}) all failed the same way, so the run stops here rather than spend the step on it: ${first[0]}`;
    },
  };
}
