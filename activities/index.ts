// Every activity of the control worker (task queue TROUPE_TASK_QUEUE).
// To add yours: write `createXActivities(deps)` in its own file and spread it below.
// Workflows import the type only: `import type { ControlActivities } from '.'`.
import type { CheckpointStore } from '../infra/checkpoint-store';
import type { Sql } from '../infra/db';
import { createPingActivities } from './ping';
import type { TensorBoardDirs } from './store/tensorboard';
import type { MlflowExport } from './store/mlflow';
import { createTrainingControlActivities, type UserCode } from './training/control';
import { createDashboardLinkActivities } from './training/dashboard-link';
import { createPoolQueueActivities } from './training/pool-queues';
import { createStageActivities } from './training/stages';

/** What control activities may use. Extend with more shared clients as needed. */
export interface ControlDeps {
  sql: Sql;
  /** Task queue of the default pool (TROUPE_POOL_TASK_QUEUE; default: the pool's name). */
  poolTaskQueue?: string;
  /** The dashboard's base URL, linked from each run's Current Details; none: no link. */
  dashboardUrl?: string;
  /** The patch ids of the workflow code this worker runs (workflows/patches.ts), recorded on each run it starts or resumes. */
  workflowPatches?: readonly string[];
  /** Threads for durable episodes' tools and scoring (user-code-threads.ts): user code never runs on the worker's own thread. */
  userCode: UserCode;
  /** Where each run's TensorBoard event files go (store/tensorboard.ts); none: no event files. */
  tensorboardDirs?: TensorBoardDirs;
  /** Exports runs to MLflow in the background (store/mlflow.ts); none: no export. */
  mlflow?: MlflowExport;
  /** Where version bytes are (TROUPE_CHECKPOINT_DIR), for pipelines' export stages; none: those stages are refused. */
  checkpoints?: CheckpointStore;
  /** The PyTorch engine's interpreter, for exporting a transformers-layout model (spec.hf). */
  python?: () => string;
}

export function createControlActivities(deps: ControlDeps) {
  return {
    ...createPingActivities(deps),
    ...createTrainingControlActivities(deps),
    ...createPoolQueueActivities(deps),
    ...createDashboardLinkActivities(deps),
    ...createStageActivities(deps),
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
