/**
 * A whole Troupe stack in this process, for integration tests and benchmarks: a real Temporal
 * dev server, a fresh Postgres database, the control worker, and a pool worker
 * with its engine child process on CPU.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import assert from 'node:assert/strict';
import type { Worker } from '@temporalio/worker';
import type { TensorBoardDirs } from '../activities/store/tensorboard';
import type { MlflowExport } from '../activities/store/mlflow';
import { listVersions } from '../activities/store/versions';
import { createPoolWorker, type PoolWorker, type PoolWorkerOptions } from '../processes/pool-worker';
import { createControlWorker } from '../processes/control-worker';
import { createTestDatabase, type TestDatabase } from './database';
import { startTemporal, uniqueTaskQueue, workflowBundle } from './temporal';

export interface Harness {
  env: TestWorkflowEnvironment;
  db: TestDatabase;
  taskQueue: string;
  control: Worker;
  pool: PoolWorker;
  /** Stops and restarts the pool worker (and its engine), as after a crash. */
  restartPool(): Promise<void>;
  shutdown(): Promise<void>;
}

/** What a test may change about the stack: the pool's task queue, and any pool worker option (log, hang limit...). */
export interface HarnessOptions {
  env?: TestWorkflowEnvironment;
  dashboardUrl?: string;
  /** The pool's task queue, served by the pool worker and configured on the control worker (default troupe-gpu). */
  poolTaskQueue?: string;
  pool?: Partial<PoolWorkerOptions>;
  /** Where the control worker writes each run's TensorBoard event files; none: no event files. */
  tensorboardDirs?: TensorBoardDirs;
  /** The control worker's MLflow export, made on the harness's database; none: no export. */
  mlflow?: (sql: TestDatabase['sql'], checkpoints: TestDatabase['checkpoints']) => MlflowExport;
}

export async function startPool(
  env: TestWorkflowEnvironment,
  db: TestDatabase,
  opts: Pick<HarnessOptions, 'poolTaskQueue' | 'pool'> = {},
): Promise<PoolWorker> {
  const pool = await createPoolWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue: opts.poolTaskQueue ?? 'troupe-gpu',
    device: 'cpu',
    quietEngine: true,
    sql: db.sql,
    checkpoints: db.checkpoints,
    ...opts.pool,
  });
  void pool.run();
  return pool;
}

export async function startHarness(opts: HarnessOptions = {}): Promise<Harness> {
  const env = opts.env ?? (await startTemporal());
  const db = await createTestDatabase();
  const taskQueue = uniqueTaskQueue('troupe');
  const control = await createControlWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    sql: db.sql,
    poolTaskQueue: opts.poolTaskQueue,
    dashboardUrl: opts.dashboardUrl,
    tensorboardDirs: opts.tensorboardDirs,
    mlflow: opts.mlflow?.(db.sql, db.checkpoints),
    checkpoints: db.checkpoints,
    workflowBundle: await workflowBundle(),
  });
  const controlRun = control.run();
  const h: Harness = {
    env,
    db,
    taskQueue,
    control,
    pool: await startPool(env, db, opts),
    async restartPool() {
      await h.pool.shutdown();
      h.pool = await startPool(env, db, opts);
    },
    async shutdown() {
      // Temporal's runtime shuts the workers down itself on SIGINT/SIGTERM; a second shutdown() would throw.
      if (control.getState() === 'RUNNING') control.shutdown();
      await controlRun.catch(() => undefined);
      await h.pool.shutdown();
      await db.drop();
      if (!opts.env) await env.teardown();
    },
  };
  return h;
}

/** Every model has versions 0..steps, one per step, and every step has metrics per agent. */
export async function checkRunBookkeeping(h: Harness, runId: string, steps: number, agents: string[], models: string[]) {
  const versions = await listVersions(h.db.sql, runId);
  for (const m of models) {
    const mine = versions.filter((v) => v.model === m);
    assert.deepEqual(
      mine.map((v) => v.version),
      Array.from({ length: steps + 1 }, (_, i) => i),
      `${m}: contiguous versions`,
    );
    assert.deepEqual(
      mine.map((v) => v.step),
      Array.from({ length: steps + 1 }, (_, i) => i - 1),
      `${m}: one version per step`,
    );
  }
  const metrics = await h.db.sql`SELECT step, scope, name FROM metrics WHERE run_id = ${runId} AND kind = 'train'`;
  for (let s = 0; s < steps; s++) {
    for (const a of agents) {
      const names = metrics.filter((r) => r.step === s && r.scope === a).map((r) => r.name);
      for (const n of ['advantage.mean', 'advantage.std', 'gradNorm', 'loss', 'clipFraction', 'approxKl', 'entropy', 'truncatedShare', 'failedShare'])
        assert.ok(names.includes(n), `step ${s} agent ${a}: ${n}`);
      assert.ok(
        names.some((n) => n.startsWith('reward.')),
        `step ${s} agent ${a}: reward components`,
      );
    }
    // Committed with the update itself, so a step interrupted after its commit still has them.
    const team = metrics.filter((r) => r.step === s && r.scope === 'team').map((r) => r.name);
    assert.ok(team.includes('rolloutSeconds') && team.includes('episodes'), `step ${s}: rollout time and episodes`);
    const update = await h.db.sql`SELECT scope FROM metrics WHERE run_id = ${runId} AND step = ${s} AND kind = 'update' AND name = 'updateMs'`;
    assert.deepEqual(update.map((r) => r.scope).sort(), [...models].sort(), `step ${s}: update time per model`);
  }
}
