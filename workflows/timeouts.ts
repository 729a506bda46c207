/**
 * Timeouts and retries of every Troupe activity, in one place.
 *
 * A dead worker is noticed only by a timeout: the heartbeat timeout for
 * activities that heartbeat, else the start-to-close timeout. Each number is
 * about 2-3x the time a killed worker needs to poll again (pool worker with
 * its engine ~4 s, control worker ~8-10 s as it bundles the workflows), so a
 * shorter one would not make recovery faster, and at least 50x the normal
 * duration of what it bounds, so a busy machine does not trip it. The chaos
 * test (testing/chaos/) measures kill -> retried activity start; docs/durability.md.
 *
 * - Pool activities of a run (initModel, rolloutBatch, updateModel): heartbeat
 *   10 s. They heartbeat every 2 s while they work (the SDK forwards at most
 *   every 0.8 x 10 s), so a killed or frozen pool worker is noticed after
 *   ~10 s and the activity retried on a live one. Start-to-close 10 min caps
 *   one attempt that keeps heartbeating but never finishes (a rollout chunk of
 *   256 episodes or one update takes seconds on CPU).
 * - A durable episode's turn (generateTurn): start-to-close 15 s, no heartbeat:
 *   one Generate call (~0.1 s; a cold engine builds its session in a few s).
 * - Control activities (planning, scoring, store bookkeeping): start-to-close
 *   15 s; each is a few queries. A step's planStep and finishStep run as local
 *   activities (same limits).
 * - Tool calls of durable episodes: the team's longest tool timeout + 15 s
 *   (executeTool enforces each tool's own timeout and records it as a tool error).
 *
 * Retries: first after 1 s, doubling to at most 10 s, 20 attempts. An outage of
 * a dependency (PostgreSQL restarting, an engine reloading) of up to ~3 min is
 * ridden out; a failure that persists fails the activity with its last error as
 * the cause, and with it the run (which `troupe resume` continues). Errors that
 * retrying cannot fix are non-retryable and fail at once.
 */
import type { ActivityOptions, LocalActivityOptions, RetryPolicy } from '@temporalio/common';

export const activityRetry: RetryPolicy = {
  initialInterval: '1 second',
  backoffCoefficient: 2,
  maximumInterval: '10 seconds',
  maximumAttempts: 20,
  nonRetryableErrorTypes: ['InvalidRunConfig', 'RunConfigMismatch', 'NonFiniteUpdate'],
};

/** Control-queue activities: planning, scoring, store bookkeeping. */
export const controlActivities: ActivityOptions = { startToCloseTimeout: '15 seconds', retry: activityRetry };

/** A pipeline's export stage: a model's files written on the control worker (a large model takes minutes; a retry starts over). */
export const exportActivities: ActivityOptions = { startToCloseTimeout: '1 hour', retry: activityRetry };

/**
 * A step's own bookkeeping (planStep, finishStep) as local activities: run by
 * the control worker inside the workflow task that needs them, saving two
 * task-queue round trips and two workflow tasks per step. Same timeout and
 * retries; a control worker killed meanwhile re-runs them on replay (both are
 * idempotent).
 */
export const controlLocalActivities: LocalActivityOptions = { startToCloseTimeout: '15 seconds', retry: activityRetry };

/** Pool-queue activities of a run (initModel, rolloutBatch, updateModel); they heartbeat while they work. */
export const poolActivities = (taskQueue: string): ActivityOptions => ({
  taskQueue,
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '10 seconds',
  retry: activityRetry,
});

/** One generation segment of a durable episode's turn: one short engine call, no heartbeat. */
export const turnActivities = (taskQueue: string): ActivityOptions => ({ taskQueue, startToCloseTimeout: '15 seconds', retry: activityRetry });

/** Tool calls of a durable episode: the longest tool timeout of the team (ms) + 15 s. */
export const toolActivities = (longestToolTimeoutMs: number): ActivityOptions => ({
  startToCloseTimeout: Math.max(0, longestToolTimeoutMs) + 15_000,
  retry: activityRetry,
});
