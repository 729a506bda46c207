// The control worker: all workflows (workflows/index.ts) and all control activities
// (activities/index.ts), on the control task queue (TROUPE_TASK_QUEUE, default "troupe").
import { NativeConnection, Worker, WorkerOptions } from '@temporalio/worker';
import { createControlActivities } from '../activities';
import { payloadDataConverter } from './codec';
import type { PayloadKeysConfig } from './config';
import type { Sql } from './db';
import { isolateTeamBuildErrors } from './team-bundle';
import { loadTeamCode, workerIdentity } from './team-code';

export interface ControlWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  sql: Sql;
  /** Task queue of the default pool (config.poolTaskQueue); runs route their pool work by it. */
  poolTaskQueue?: string;
  /** The dashboard's base URL (dashboard/service.ts dashboardUrl), linked from each run's Current Details. */
  dashboardUrl?: string;
  /** Encrypt payloads with these keys (config.payloadKeys); the clients that start runs need the same. */
  payloadKeys?: PayloadKeysConfig;
  /** A prebuilt bundle (bundleWorkflowCode) to skip bundling, e.g. in tests that create many workers. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  /** Any other Worker option (identity, concurrency limits, interceptors...). */
  workerOptions?: Partial<WorkerOptions>;
}

/** Path handed to Temporal's bundler. */
export const WORKFLOWS_PATH = require.resolve('../workflows');

export async function createControlWorker(opts: ControlWorkerOptions): Promise<Worker> {
  const teams = loadTeamCode();
  for (const [team, why] of Object.entries(teams.failed)) console.warn(`troupe control worker: team ${team} is unusable: ${why}`);
  return Worker.create({
    identity: workerIdentity(teams.hash),
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath: WORKFLOWS_PATH, bundlerOptions: { webpackConfigHook: isolateTeamBuildErrors } }),
    activities: createControlActivities({ sql: opts.sql, poolTaskQueue: opts.poolTaskQueue, dashboardUrl: opts.dashboardUrl }),
    dataConverter: payloadDataConverter(opts.payloadKeys),
    ...opts.workerOptions,
  });
}
