/**
 * Chaos in a pipeline (issue #48): teacher RL → SFT of fresh models on the teacher's episodes →
 * RL from the SFT run. The pool worker process is killed -9 during the SFT stage and the RL
 * stage, and the control worker replaced during the RL stage; every stage's run ends
 * bit-identical to the same stage of an uninterrupted twin pipeline (versions' weights and
 * optimizer state, stored trajectories, one version per step), and each stage ran in one
 * execution (a kill is survived inside the stage, never by rerunning it).
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { after, it } from 'node:test';
import type { Worker } from '@temporalio/worker';
import { createControlWorker } from '../../../processes/control-worker';
import { compareRuns, loadStoredRun } from '../../../testing/chaos/compare';
import type { PipelineInput } from '../../../schema/pipeline';
import type { pipeline } from '../../../workflows';
import { fileStack, uniqueTaskQueue, workflowBundle } from '../../helpers';
import { poolProcess } from '../fixtures/pool-kill';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const small = { team: 'math', teamOptions: { models: 'separate' }, groupsPerStep: 2, groupSize: 2, evalEvery: 0, evalTasks: 2, seed: 7 };
const from = (stage: string) => ({ run: { $run: stage }, step: { $step: stage } });
const STAGES: PipelineInput['stages'] = [
  { name: 'teacher', run: { ...small, steps: 2 } },
  { name: 'sft', run: { ...small, steps: 2, sft: { from: { run: { $run: 'teacher' } }, batch: 8 } } },
  { name: 'rl', run: { ...small, steps: 2, init: { solver: from('sft'), verifier: from('sft') } } },
];
const STAGE_NAMES = ['teacher', 'sft', 'rl'];
const MODELS = ['solver', 'verifier'];

const stack = fileStack();
const savedDir = process.env.TROUPE_CHECKPOINT_DIR;
after(() => {
  if (savedDir === undefined) delete process.env.TROUPE_CHECKPOINT_DIR;
  else process.env.TROUPE_CHECKPOINT_DIR = savedDir;
});

it('kills during every stage of a pipeline change nothing about any stage', { timeout: 600_000 }, async (t) => {
  const { env, db } = stack;
  process.env.TROUPE_CHECKPOINT_DIR = db.checkpoints.dir; // where loadStoredRun reads the versions' files
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
    // sft: once its initial eval is stored, so in its updates on the teacher's turns
    await waitFor('the sft stage evaluates its start', async () => (await stored('chaos.sft')) >= 2);
    kills.push(`pool worker at sft, ${await committed('chaos.sft')} steps committed`);
    await killPool();
    // rl: mid-rollout of its first step, then the control worker replaced once a step is committed
    await waitFor('the rl stage stores a training episode', async () => (await stored('chaos.rl')) > 2);
    kills.push(`pool worker at rl, ${await committed('chaos.rl')} steps committed`);
    await killPool();
    await waitFor('the rl stage commits a step', async () => (await committed('chaos.rl')) >= 1);
    kills.push(`control worker at rl, ${await committed('chaos.rl')} steps committed`);
    control.worker.shutdown();
    await control.running;
    control = await startControl();
    const summary = await handle.result();
    for (const k of kills) t.diagnostic(`killed: ${k}`);
    assert.deepEqual(
      summary.stages.map((s) => [s.name, s.state, s.steps]),
      STAGE_NAMES.map((n) => [n, 'completed', 2]),
      kills.join('; '),
    );
    for (const stage of STAGE_NAMES) {
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
