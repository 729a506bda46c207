/** The activities a training run calls, with their timeouts (workflows/timeouts.ts). */
import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { TrainingControlActivities } from '../../activities/training/control';
import type { TrainingPoolActivities } from '../../activities/training/pool';
import type { PoolQueueActivities } from '../../activities/training/pool-queues';
import type { DashboardLinkActivities } from '../../activities/training/dashboard-link';
import { controlActivities, controlLocalActivities, poolActivities } from '../timeouts';

export const control = proxyActivities<TrainingControlActivities>(controlActivities);
export const controlLocal = proxyLocalActivities<TrainingControlActivities>(controlLocalActivities);
export const poolQueueLookup = proxyLocalActivities<PoolQueueActivities>(controlLocalActivities);
export const dashboardLookup = proxyLocalActivities<DashboardLinkActivities>(controlLocalActivities);
/** Recording a failure must not hang a failing run on a store that stays down: a few tries only. */
export const finalBookkeeping = proxyActivities<TrainingControlActivities>({ ...controlActivities, retry: { ...controlActivities.retry, maximumAttempts: 3 } });

/** Store bookkeeping, as ordinary or local activities (which one depends on the history). */
export type Bookkeeping = typeof control;

/** The pool activities on one task queue. */
export const poolAt = (taskQueue: string) => proxyActivities<TrainingPoolActivities>(poolActivities(taskQueue));
