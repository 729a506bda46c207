// The control worker process: all workflows (workflows/index.ts) and all control activities
// (activities/index.ts), on the control task queue (TROUPE_TASK_QUEUE, default "troupe").
// `troupe up` starts it in the background:
//   node --import tsx processes/control-worker.ts [--temporal-address H:P] [--namespace N] [--task-queue Q]
// Configuration otherwise comes from the environment (infra/config.ts). It connects to
// Postgres (DATABASE_URL, else the embedded one), applies migrations, then polls until
// SIGINT/SIGTERM, on which it finishes in-flight tasks and exits. Until PostgreSQL and
// Temporal answer it waits for them with capped backoff, saying so in its log.
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from '@temporalio/client';
import { type NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createControlActivities } from '../activities';
import { UserCodeThreads } from '../activities/training/user-code-threads';
import { dashboardUrl } from '../stack/dashboard';
import { untilAvailable } from '../infra/backoff';
import { payloadDataConverter } from '../infra/codec';
import { loadConfig, redactUrl, temporalAddressOf, type PayloadKeysConfig, type TroupeConfig } from '../infra/config';
import type { TensorBoardDirs } from '../activities/store/tensorboard';
import { MlflowExport } from '../activities/store/mlflow';
import { EpisodeRetentionLoop } from '../activities/store/retention-loop';
import { checkpointStoreOf, type CheckpointStore } from '../infra/checkpoint-store';
import { connect, dropPostgresJsStrays, type Sql } from '../infra/db';
import { formatError, isTroupeError, TroupeError } from '../infra/errors';
import { watchProcess } from '../stack/watchdog';
import { assertNamespaceReady } from '../infra/namespace';
import { ensureDatabase } from '../stack/postgres';
import { pythonEnvironment } from '../stack/python-environment';
import { connectTemporalWorker } from '../infra/temporal-connection';
import { migrate } from '../schema/migrate';
import { refuseNewerRuns } from './workflow-compat';
import { Patch } from '../workflows/patches';
import { activeProject, enterProjectFromEnvironment, writeWorkflowsEntry } from './project';
import { EpisodeWatch } from './episode-watch';
import { bundleCache } from './team-bundle';
import { installRuntime, metricsPortArg, prometheusTelemetry } from './prometheus';
import { loadTeamCode, workerIdentity } from './team-code';

export interface ControlWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  sql: Sql;
  /** Task queue of the default pool (config.poolTaskQueue); runs route their pool work by it. */
  poolTaskQueue?: string;
  /** The dashboard's base URL (stack/dashboard.ts dashboardUrl), linked from each run's Current Details. */
  dashboardUrl?: string;
  /** Encrypt payloads with these keys (config.payloadKeys); the clients that start runs need the same. */
  payloadKeys?: PayloadKeysConfig;
  /** A prebuilt bundle (bundleWorkflowCode) to skip bundling, e.g. in tests that create many workers. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  /** Where each run's TensorBoard event files go (tensorboardDirsOf); none: no event files. */
  tensorboardDirs?: TensorBoardDirs;
  /** Exports runs to MLflow (activities/store/mlflow.ts); none: no export. */
  mlflow?: MlflowExport;
  /** The checkpoint store (checkpointStoreOf) and the engine's Python, for pipelines' export stages. */
  checkpoints?: CheckpointStore;
  python?: () => string;
  /** Any other Worker option (identity, concurrency limits, interceptors...). */
  workerOptions?: Partial<WorkerOptions>;
}

/** Path handed to Temporal's bundler: the workflows with the entered project's teams registered (processes/project.ts), else Troupe's own. */
export function workflowsPath(): string {
  const project = activeProject();
  return project ? writeWorkflowsEntry(project) : require.resolve('../workflows');
}

/** How long workflow code may run without yielding: the SDK's isolate execution timeout, fixed at 5 s (WorkerOptionsWithDefaults). */
const ISOLATE_TIMEOUT_MS = 5000;

/** The PyTorch engine's interpreter where one is ready (a worker never installs it), for exporting a transformers-layout model. */
function enginePython(): string {
  const env = pythonEnvironment({ install: false });
  if ('missing' in env) throw new TroupeError(`a transformers-layout model's export needs the PyTorch engine's Python: ${env.missing}`);
  return env.python;
}

/** The user code threads' wiring (./user-code-thread.ts, beside this file). */
const USER_CODE_THREAD = path.join(__dirname, 'user-code-thread.ts');

export async function createControlWorker(opts: ControlWorkerOptions): Promise<Worker> {
  const teams = loadTeamCode();
  for (const [team, why] of Object.entries(teams.failed)) console.warn(`troupe control worker: team ${team} is unusable: ${why}`);
  // idle threads are unref'd: they neither keep the process alive nor need closing
  const userCode = new UserCodeThreads(USER_CODE_THREAD);
  const cache = opts.workflowBundle ? undefined : bundleCache();
  try {
    return await Worker.create({
      identity: workerIdentity(teams.hash),
      connection: opts.connection,
      namespace: opts.namespace,
      taskQueue: opts.taskQueue,
      ...(opts.workflowBundle
        ? { workflowBundle: opts.workflowBundle }
        : { workflowsPath: workflowsPath(), bundlerOptions: { webpackConfigHook: cache!.hook } }),
      activities: createControlActivities({
        sql: opts.sql,
        poolTaskQueue: opts.poolTaskQueue,
        dashboardUrl: opts.dashboardUrl,
        workflowPatches: Object.values(Patch),
        userCode,
        tensorboardDirs: opts.tensorboardDirs,
        mlflow: opts.mlflow,
        checkpoints: opts.checkpoints,
        python: opts.python,
      }),
      dataConverter: payloadDataConverter(opts.payloadKeys),
      ...opts.workerOptions,
    });
  } finally {
    cache?.release(); // Worker.create has bundled by now
  }
}

/**
 * Each run's TensorBoard folder: `<TROUPE_TENSORBOARD_DIR>/<run>` when set, else
 * `<state>/runs/<run>/tensorboard` beside its curves; TROUPE_TENSORBOARD_DIR=off: none.
 */
export function tensorboardDirsOf(config: Pick<TroupeConfig, 'stateDir' | 'tensorboardDir'>): TensorBoardDirs | undefined {
  const root = config.tensorboardDir;
  if (root === 'off') return undefined;
  return root ? (runId) => path.join(root, runId) : (runId) => path.join(config.stateDir, 'runs', runId, 'tensorboard');
}

export const READY_LINE = 'troupe control worker: ready';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'temporal-address': { type: 'string' },
      namespace: { type: 'string' },
      'task-queue': { type: 'string' },
      'metrics-port': { type: 'string' },
    },
  });
  await runControlWorkerProcess({
    temporalAddress: values['temporal-address'],
    namespace: values.namespace,
    taskQueue: values['task-queue'],
    metricsPort: metricsPortArg(values['metrics-port']),
  });
}

/** The background pruning of TROUPE_RETENTION_EPISODE_* (its policy, and how often). */
function retentionLoop(sql: Sql, { intervalMinutes, ...policy }: NonNullable<TroupeConfig['episodeRetention']>): EpisodeRetentionLoop {
  return new EpisodeRetentionLoop(sql, policy, { intervalMs: intervalMinutes * 60_000, log: (line) => console.log(line) });
}

/**
 * The control worker as a process (this file's entry, `troupe worker control`): runs until
 * SIGINT/SIGTERM. `onReady` gets the worker once it exists (before it polls).
 */
export async function runControlWorkerProcess(opts: {
  temporalAddress?: string;
  namespace?: string;
  taskQueue?: string;
  /** Port of the Prometheus endpoint (default TROUPE_CONTROL_METRICS_PORT; none: no endpoint). */
  metricsPort?: number;
  onReady?: (worker: Worker) => void;
}): Promise<void> {
  // the project's teams and stack defaults first: loadConfig reads what it sets
  const project = enterProjectFromEnvironment({ required: false });
  if (project) {
    console.log(`troupe control worker: project ${project.dir}, teams ${Object.keys(project.config.teams).join(', ') || '(none)'}`);
    for (const w of project.warnings) console.warn(`troupe control worker: ${w}`);
  }
  const config = loadConfig();
  const address = opts.temporalAddress ?? temporalAddressOf(config);
  const namespace = opts.namespace ?? config.namespace;
  const taskQueue = opts.taskQueue ?? config.taskQueue;
  const watchdog = watchProcess({ what: 'troupe control worker', blockedLoopMs: config.blockedLoopS * 1000 });
  // Before the first connection: the SDK's logger is where a durable episode that never yields shows.
  const episodes = new EpisodeWatch({ limitMs: ISOLATE_TIMEOUT_MS });
  const metrics = prometheusTelemetry({ host: config.metrics.host, port: opts.metricsPort ?? config.metrics.controlPort });
  installRuntime({ logger: episodes.logger(), telemetryOptions: { logging: { forward: {} }, ...(metrics ? { metrics } : {}) } });
  dropPostgresJsStrays((e) => console.log(JSON.stringify({ ts: new Date().toISOString(), ...e })));

  // PostgreSQL and Temporal may be down or still starting: wait for each (capped backoff)
  // instead of exiting, so the worker comes up by itself once they do.
  const waiting = (line: string) => console.log(`troupe control worker: ${line}`);
  let stopping = false;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void (stopping = true));
  const wait = { log: waiting, stopped: () => stopping };
  const db = await untilAvailable('PostgreSQL', () => ensureDatabase(config, console.log), wait);
  const sql = connect(db.url, { max: 10, applicationName: 'troupe-control-worker' });
  const { from, to } = await untilAvailable('PostgreSQL (migrations)', () => migrate(sql, { log: console.log }), wait);
  console.log(`troupe control worker: database ${redactUrl(db.url)} (schema ${from} -> ${to})`);
  await refuseNewerRuns(sql);

  // Runs export to MLflow in the background, on a connection of their own (a slow server never
  // holds one the activities need); exports a previous worker left unfinished catch up now.
  const exportSql = connect(db.url, { max: 1, applicationName: 'troupe-mlflow-export' });
  const mlflow = new MlflowExport(exportSql, checkpointStoreOf(config), { defaultUri: config.mlflowTrackingUri });
  await mlflow.catchUp();
  // Episode retention (TROUPE_RETENTION_EPISODE_*), on a timer and a connection of its own: off every run's path.
  const retentionSql = config.episodeRetention && connect(db.url, { max: 1, applicationName: 'troupe-retention' });
  const retention = retentionSql && config.episodeRetention && retentionLoop(retentionSql, config.episodeRetention);
  const { connection, worker } = await untilAvailable(
    `Temporal at ${address} (namespace ${namespace})`,
    async () => {
      const connection = await connectTemporalWorker(address, config);
      try {
        await assertNamespaceReady(connection, namespace, address);
        return {
          connection,
          worker: await createControlWorker({
            connection,
            namespace,
            taskQueue,
            sql,
            poolTaskQueue: config.poolTaskQueue,
            dashboardUrl: dashboardUrl(config),
            payloadKeys: config.payloadKeys,
            tensorboardDirs: tensorboardDirsOf(config),
            mlflow,
            checkpoints: checkpointStoreOf(config),
            python: enginePython,
          }),
        };
      } catch (e) {
        await connection.close().catch(() => undefined);
        throw e;
      }
    },
    // A namespace that is not ready is a fix for the operator (the error says which), not an outage.
    { ...wait, retryable: (e) => !isTroupeError(e) },
  );
  try {
    episodes.attach(new Client({ connection, namespace, dataConverter: payloadDataConverter(config.payloadKeys) }));
    retention?.start();
    console.log(`${READY_LINE} (temporal ${address}, namespace ${namespace}, task queue ${taskQueue})`);
    opts.onReady?.(worker);
    await worker.run();
  } finally {
    await mlflow.stop();
    await exportSql.end({ timeout: 5 });
    await retention?.stop();
    await retentionSql?.end({ timeout: 5 });
    await connection.close();
    await sql.end({ timeout: 5 });
    await watchdog.stop();
  }
  console.log('troupe control worker: stopped');
}

if (require.main === module) {
  main().catch((err) => {
    console.error(formatError(err, { debug: true }));
    process.exit(1);
  });
}
