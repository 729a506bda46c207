/**
 * Controlling a live run: pause, change the learning rate, resume, stop; the
 * Temporal CLI starting a run the way the Web UI does; resuming a terminated
 * run from its last committed step.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { type WorkflowUpdateFailedError } from '@temporalio/client';
import { resumeRun } from '../../../control/runs';
import { loadTasks } from '../../../activities/tasks';
import { planEvalEpisodes } from '../../../activities/training/plan';
import { loadTeam } from '../../../agents/team-registry';
import { ensureTemporalBinary } from '../../../stack/temporal';
import { pauseSignal, resumeSignal, setOptimizerUpdate, statusQuery, stopSignal } from '../../../workflows/definitions';
import type { trainingRun } from '../../../workflows';
import { checkRunBookkeeping, startHarness, type Harness } from '../../../testing/stack';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 120_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    await sleep(200);
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('controlling runs', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });

  it('pauses after the current step, changes lr (validated, recorded with its step), resumes, and stops with a final eval', async () => {
    const handle = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: 'controlled',
      args: [{ team: 'math', steps: 50, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 4 }],
    });
    await until('step 1', async () => ((await handle.query(statusQuery)).step >= 1 ? true : undefined));
    await handle.signal(pauseSignal);
    const paused = await until('paused', async () => {
      const s = await handle.query(statusQuery);
      return s.status === 'paused' ? s : undefined;
    });
    await sleep(1500);
    assert.equal((await handle.query(statusQuery)).step, paused.step, 'no step runs while paused');
    const [row] = await h.db.sql`SELECT status FROM runs WHERE run_id = 'controlled'`;
    assert.equal(row!.status, 'paused');

    // An invalid change is rejected naming the field, and changes nothing.
    await assert.rejects(handle.executeUpdate(setOptimizerUpdate, { args: [{ models: { policy: { lr: -1 } } }] }), (e: WorkflowUpdateFailedError) =>
      /lr: must be > 0/.test(String((e.cause as Error)?.message ?? e.message)),
    );
    await assert.rejects(handle.executeUpdate(setOptimizerUpdate, { args: [{ agents: { judge: { lr: 0.1 } } }] }), (e: WorkflowUpdateFailedError) =>
      /: agents\.judge: unknown agent/.test(String((e.cause as Error)?.message)),
    );
    const { effectiveStep } = await handle.executeUpdate(setOptimizerUpdate, { args: [{ models: { policy: { lr: 0.05 } } }] });
    assert.equal(effectiveStep, paused.step);

    await handle.signal(resumeSignal);
    await until('two more steps', async () => ((await handle.query(statusQuery)).step >= paused.step + 2 ? true : undefined));
    await handle.signal(stopSignal);
    const summary = await handle.result();
    assert.equal(summary.status, 'stopped');
    assert.ok(summary.steps >= paused.step + 2 && summary.steps < 50);
    assert.equal(summary.finalEval?.step, summary.steps);
    await checkRunBookkeeping(h, 'controlled', summary.steps, ['solver', 'verifier'], ['policy']);

    const events = await h.db.sql`SELECT step, kind, detail FROM run_events WHERE run_id = 'controlled' ORDER BY id`;
    const changed = events.find((e) => e.kind === 'optimizer-changed');
    assert.equal(changed?.step, paused.step);
    assert.ok(events.some((e) => e.kind === 'resumed-from-pause' && e.step === paused.step));
    const settings = await h.db.sql`SELECT step, settings FROM steps WHERE run_id = 'controlled' ORDER BY step`;
    for (const s of settings) assert.equal(s.settings.policy.lr, s.step < paused.step ? 0.02 : 0.05, `lr in force at step ${s.step}`);
    const [status] = await h.db.sql`SELECT status FROM runs WHERE run_id = 'controlled'`;
    assert.equal(status!.status, 'stopped');
  });

  it('starts from the Temporal CLI with one JSON input (as the Web UI does), and rejects a bad one naming the fields', async () => {
    const bin = (await ensureTemporalBinary()).path;
    const startFromCli = (workflowId: string, input: object) =>
      run(bin, [
        'workflow',
        'start',
        '--address',
        h.env.address,
        '--namespace',
        'default',
        '--type',
        'trainingRun',
        '--task-queue',
        h.taskQueue,
        '--workflow-id',
        workflowId,
        '--input',
        JSON.stringify(input),
      ]);
    await startFromCli('from-cli', { team: 'math', steps: 1, groupsPerStep: 2, groupSize: 2, evalTasks: 4 });
    const summary = await h.env.client.workflow.getHandle<typeof trainingRun>('from-cli').result();
    assert.equal(summary.status, 'completed');
    assert.equal(summary.versions.policy, 1);

    // a field the input leaves out takes the team's run default (lookout: steps 48), one it sets is kept
    await startFromCli('from-cli-team-defaults', { team: 'lookout', groupsPerStep: 1, groupSize: 2, evalEvery: 0, evalTasks: 2 });
    const defaulted = h.env.client.workflow.getHandle<typeof trainingRun>('from-cli-team-defaults');
    const view = await until('status', () => defaulted.query(statusQuery));
    assert.equal(view.steps, 48);
    await defaulted.signal(stopSignal);
    assert.equal((await defaulted.result()).status, 'stopped');
    const [stored] = await h.db.sql`SELECT config FROM runs WHERE run_id = 'from-cli-team-defaults'`;
    assert.deepEqual([stored!.config.steps, stored!.config.groupsPerStep], [48, 1]);

    await startFromCli('from-cli-bad', { team: 'math', groupSize: 0, estimatr: 'grpo' });
    await assert.rejects(h.env.client.workflow.getHandle('from-cli-bad').result(), (e: Error) => {
      const message = String((e.cause as Error)?.message);
      assert.match(message, /groupSize: must be >= 1/);
      assert.match(message, /estimatr: unknown field/);
      return true;
    });
  });

  it('resumes a terminated run from its last committed step; the finished run has one version per step', async () => {
    const config = { team: 'math', steps: 5, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 4, seed: 9 };
    const first = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: 'resumable', args: [config] });
    await until('step 3', async () => ((await first.query(statusQuery)).step >= 3 ? true : undefined));
    await first.terminate('test: simulated crash');
    const [{ n }] = (await h.db.sql`SELECT count(*)::int AS n FROM versions WHERE run_id = 'resumable'`) as unknown as [{ n: number }];
    assert.ok(n >= 4 && n < 6, `some but not all versions committed before the crash (${n})`);

    // `troupe resume`: a new execution of the same workflow id with the stored config.
    const second = await resumeRun(h.env.client, h.db.sql, h.taskQueue, 'resumable');
    const summary = await second.result();
    assert.equal(summary.status, 'completed');
    assert.equal(summary.steps, 5);
    await checkRunBookkeeping(h, 'resumable', 5, ['solver', 'verifier'], ['policy']);
    const executions = await h.db.sql`SELECT start_step FROM run_executions WHERE run_id = 'resumable' ORDER BY started_at`;
    assert.equal(executions.length, 2);
    assert.equal(executions[0]!.start_step, 0);
    assert.ok(executions[1]!.start_step >= 3);
    // The resumed run ends exactly where an uninterrupted run with the same seed ends.
    const clean = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: 'uninterrupted',
      args: [config],
    });
    assert.equal(clean.steps, 5);
    const [a] = await h.db.sql`SELECT sha256 FROM versions WHERE run_id = 'resumable' AND version = 5`;
    const [b] = await h.db.sql`SELECT sha256 FROM versions WHERE run_id = 'uninterrupted' AND version = 5`;
    assert.equal(a!.sha256, b!.sha256, 'final weights bit-identical to an uninterrupted run');
  });

  it('a run terminated during an eval and resumed redoes that eval: complete, counted once, never half', async () => {
    const config = { team: 'math', steps: 3, groupsPerStep: 2, groupSize: 2, evalEvery: 2, evalTasks: 0, seed: 4 };
    const planned = planEvalEpisodes(loadTasks(loadTeam('math', {})), { runId: 'eval-cut', step: 2, seed: 4, count: 0 }).length;
    const stored = async (step: number) =>
      (
        (await h.db.sql`SELECT count(*)::int AS n FROM episodes WHERE run_id = 'eval-cut' AND step = ${step} AND split = 'eval'`) as unknown as [{ n: number }]
      )[0].n;
    const first = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: 'eval-cut', args: [config] });
    // Terminate as soon as the step-2 eval has stored some of its episodes.
    const deadline = Date.now() + 120_000;
    let partial = 0;
    while (Date.now() < deadline && !(partial > 0 && partial < planned)) {
      partial = await stored(2);
      await sleep(10);
    }
    await first.terminate('test: crash during the step-2 eval');
    assert.ok(partial > 0 && partial < planned, `cut part-way (${partial} of ${planned})`);

    const summary = await (await resumeRun(h.env.client, h.db.sql, h.taskQueue, 'eval-cut')).result();
    assert.equal(summary.status, 'completed');
    assert.equal(await stored(2), planned, 'every eval episode of step 2 stored once');
    const evals = await h.db
      .sql`SELECT step, value FROM metrics WHERE run_id = 'eval-cut' AND kind = 'eval' AND scope = 'team' AND name = 'episodes' ORDER BY step`;
    assert.deepEqual(
      evals.map((r) => [r.step, r.value]),
      [
        [0, planned],
        [2, planned],
        [3, planned],
      ],
      'each eval recorded, over all its episodes',
    );
  });

  it('starting a completed run id again (same config or another) is refused and leaves the completed run as it was', async () => {
    const config = { team: 'math', steps: 1, groupsPerStep: 2, groupSize: 2, evalEvery: 0, evalTasks: 4, seed: 5 };
    const done = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: 'math-x', args: [config] });
    assert.equal(done.status, 'completed');
    const record = async () => ({
      run: (await h.db.sql`SELECT status, team, config FROM runs WHERE run_id = 'math-x'`)[0],
      events: (await h.db.sql`SELECT kind FROM run_events WHERE run_id = 'math-x' ORDER BY id`).map((r) => r.kind),
      versions: (await h.db.sql`SELECT count(*)::int AS n FROM versions WHERE run_id = 'math-x'`)[0]!.n,
    });
    const before = await record();
    for (const again of [config, { ...config, team: 'research', steps: 3 }]) {
      await assert.rejects(
        h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: 'math-x', args: [again] }),
        (e: Error) => /already exists \(completed\)/.test(String(((e.cause as Error)?.cause as Error | undefined)?.message)),
      );
    }
    assert.deepEqual(await record(), before, 'store untouched: still completed, no run-failed event, no new execution');
    assert.equal(before.run!.status, 'completed');
    await assert.rejects(resumeRun(h.env.client, h.db.sql, h.taskQueue, 'math-x'), /run math-x completed/);
  });
});
