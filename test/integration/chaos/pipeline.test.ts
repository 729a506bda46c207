/**
 * Chaos in a pipeline (issue #48): the pool worker process is killed -9 during each stage of a
 * pipeline, and the control worker is replaced during its last stage; every stage's run ends
 * bit-identical to the same stage of an uninterrupted twin pipeline (versions' weights and
 * optimizer state, stored trajectories, one version per step), and each stage ran in one
 * execution (a kill is survived inside the stage, never by rerunning it).
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { after, before, it } from 'node:test';
import type { Worker } from '@temporalio/worker';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { createControlWorker } from '../../../processes/control-worker';
import { compareRuns, loadStoredRun } from '../../../testing/chaos/compare';
import type { PipelineInput } from '../../../schema/pipeline';
import type { pipeline } from '../../../workflows';
import { createTestDatabase, startTemporal, uniqueTaskQueue, workflowBundle, type TestDatabase } from '../../helpers';
import { poolProcess } from '../fixtures/pool-kill';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const small = { team: 'math', teamOptions: { models: 'separate' }, groupsPerStep: 2, groupSize: 2, evalEvery: 0, evalTasks: 2, seed: 7 };
const STAGES: PipelineInput['stages'] = [
  { name: 'teacher', run: { ...small, steps: 2 } },
  { name: 'student', run: { ...small, steps: 2, init: { solver: { run: { $run: 'teacher' }, step: { $step: 'teacher' } } } } },
];
const MODELS = ['solver', 'verifier'];

let env: TestWorkflowEnvironment;
let db: TestDatabase;
const savedDir = process.env.TROUPE_CHECKPOINT_DIR;

before(async () => {
  env = await startTemporal();
  db = await createTestDatabase();
  process.env.TROUPE_CHECKPOINT_DIR = db.checkpoints.dir; // where loadStoredRun reads the versions' files
});
after(async () => {
  if (savedDir === undefined) delete process.env.TROUPE_CHECKPOINT_DIR;
  else process.env.TROUPE_CHECKPOINT_DIR = savedDir;
  await db?.drop();
  await env?.teardown();
});

it('kills during every stage of a pipeline change nothing about any stage', { timeout: 600_000 }, async (t) => {
  const taskQueue = uniqueTaskQueue('troupe');
  const bundle = await workflowBundle();
  const startControl = async () => {
    const w = await createControlWorker({ connection: env.nativeConnection, namespace: 'default', taskQueue, sql: db.sql, workflowBundle: bundle });
    return { worker: w, running: w.run() };
  };
  let control: { worker: Worker; running: Promise<void> } = await startControl();
  let pool: ChildProcess = poolProcess(env, db);
  const killPool = async () => {
    pool.kill('SIGKILL');
    await new Promise((r) => pool.once('exit', r));
    pool = poolProcess(env, db);
  };
  const committed = async (runId: string) =>
    ((await db.sql`SELECT count(*)::int AS n FROM steps WHERE run_id = ${runId} AND status = 'completed'`)[0]?.n as number) ?? 0;
  const stored = async (runId: string) => ((await db.sql`SELECT count(*)::int AS n FROM episodes WHERE run_id = ${runId}`)[0]?.n as number) ?? 0;
  const waitFor = async (what: string, ok: () => Promise<boolean>) => {
    for (const deadline = Date.now() + 120_000; !(await ok()); await sleep(50)) assert.ok(Date.now() < deadline, `${what} within 120 s`);
  };
  const start = (id: string) =>
    env.client.workflow.start<typeof pipeline>('pipeline', { taskQueue, workflowId: id, args: [{ name: 'chaos', stages: STAGES }] });
  const kills: string[] = [];
  try {
    await (await start('calm')).result();

    const handle = await start('chaos');
    // teacher: mid-rollout of its first step (some episodes stored, no step committed)
    await waitFor('the teacher stores an episode of step 0', async () => (await stored('chaos.teacher')) > 2);
    kills.push(`pool worker at teacher, ${await committed('chaos.teacher')} steps committed`);
    await killPool();
    // student: once its run started, the pool worker again, then the control worker replaced mid-step
    await waitFor('the student stores an episode', async () => (await stored('chaos.student')) > 0);
    kills.push(`pool worker at student, ${await committed('chaos.student')} steps committed`);
    await killPool();
    await waitFor('the student commits a step', async () => (await committed('chaos.student')) >= 1);
    kills.push(`control worker at student, ${await committed('chaos.student')} steps committed`);
    control.worker.shutdown();
    await control.running;
    control = await startControl();
    const summary = await handle.result();
    for (const k of kills) t.diagnostic(`killed: ${k}`);
    assert.deepEqual(
      summary.stages.map((s) => [s.name, s.state, s.steps]),
      [
        ['teacher', 'completed', 2],
        ['student', 'completed', 2],
      ],
      kills.join('; '),
    );
    for (const stage of ['teacher', 'student']) {
      const cmp = compareRuns(await loadStoredRun(db.sql, `calm.${stage}`), await loadStoredRun(db.sql, `chaos.${stage}`), 2, MODELS);
      assert.deepEqual(cmp.problems, [], `stage ${stage} (${kills.join('; ')})`);
      assert.ok(
        cmp.versionsCompared >= 6 && cmp.episodesCompared > 0,
        `stage ${stage}: compared ${cmp.versionsCompared} versions, ${cmp.episodesCompared} episodes`,
      );
      const [ex] = await db.sql`SELECT count(*)::int AS n FROM run_executions WHERE run_id = ${`chaos.${stage}`}`;
      assert.equal(ex?.n, 1, `stage ${stage} ran in one execution`);
    }
  } finally {
    pool.kill('SIGTERM');
    if (control.worker.getState() === 'RUNNING') control.worker.shutdown();
    await control.running.catch(() => undefined);
  }
});
