/**
 * The trainingRun workflow's control paths in seconds: a real Temporal dev
 * server (the SDK's time-skipping server cannot be downloaded here), the real
 * workflow bundle, and mocked activities on the control and pool queues, as in
 * Temporal's samples. The dev server is told to suggest continue-as-new after
 * 10 history events, so a run continues as new after every step.
 *
 * Covered: setOptimizer validation, pause / stop, changes accepted mid-step
 * carried over continue-as-new, TroupeStatus of continued and invalid
 * executions, a refused start leaving the store alone, a run without
 * trainable signal failing, a resume redoing an interrupted eval, and an
 * accepted setOptimizer change recorded in the store (PostgreSQL) before a terminate.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WorkflowFailedError, WorkflowUpdateFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import type { EvalSummary } from '../../../activities/training/control';
import type { StepPlan } from '../../../activities/training/plan';
import type { ResumePoint } from '../../../activities/training/resume';
import type { UpdateResult } from '../../../activities/training/pool';
import { createPoolQueueActivities } from '../../../activities/training/pool-queues';
import { createDashboardLinkActivities } from '../../../activities/training/dashboard-link';
import type { ResolvedTraining } from '../../../schema/run-config';
import { pauseSignal, resumeSignal, setOptimizerUpdate, statusQuery, stopSignal } from '../../../workflows/definitions';
import type { trainingRun } from '../../../workflows';
import { startTrainingRun } from '../../../control/runs';
import { parseRunConfig } from '../../../schema/run-config';
import { createRun, recordEvent } from '../../../activities/store/runs';
import type { Sql } from '../../../infra/db';
import { startTemporal, uniqueTaskQueue, workflowBundle } from '../../helpers';
import { createTestDatabase } from '../../../testing/database';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await Promise.resolve(fn()).catch(() => undefined);
    if (v !== undefined) return v;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** What the mocked activities saw and what they answer. */
class Fake {
  calls: Array<{ name: string; input: any }> = [];
  point: ResumePoint = { startStep: 0, versions: { policy: 0 }, fresh: true, evals: [], optimizer: null };
  startError: Error | null = null;
  skipUpdates = false;
  /** Holds updateModel of this step until released. */
  holdUpdate: { step: number; release: () => void; reached: boolean } | null = null;
  version = 0;
  /** Where given, recordEvent writes to this store (the real one) as well. */
  store: Sql | null = null;

  events = (kind: string) => this.calls.filter((c) => c.name === 'recordEvent' && c.input.kind === kind).map((c) => c.input);
  named = (name: string) => this.calls.filter((c) => c.name === name).map((c) => c.input);

  control() {
    const log = (name: string, input: any) => void this.calls.push({ name, input });
    return {
      startRun: async (input: any): Promise<ResumePoint> => {
        log('startRun', input);
        if (this.startError) throw this.startError;
        return this.point;
      },
      planStep: async (input: any): Promise<StepPlan> => {
        log('planStep', input);
        return {
          runId: input.runId,
          step: input.step,
          rule: { split: 'train', seed: input.seed, groupsPerStep: input.groupsPerStep, groupSize: input.groupSize },
          episodes: input.groupsPerStep * input.groupSize,
        };
      },
      planEval: async (input: any): Promise<StepPlan> => {
        log('planEval', input);
        return { runId: input.runId, step: input.step, rule: { split: 'eval', seed: input.seed, count: input.count }, episodes: 3 };
      },
      recordEval: async (input: any): Promise<EvalSummary> => {
        log('recordEval', input);
        return { step: input.step, success: 0.5, episodes: 3, rewards: {} };
      },
      finishStep: async (input: any) => void log('finishStep', input),
      setRunStatus: async (input: any) => void log('setRunStatus', input),
      recordEvent: async (input: any) => {
        log('recordEvent', input);
        if (this.store) await recordEvent(this.store, input);
      },
    };
  }

  pool() {
    const log = (name: string, input: any) => void this.calls.push({ name, input });
    return {
      initModel: async (input: any) => {
        log('initModel', input);
        return { version: 0 as const };
      },
      rolloutBatch: async (input: any) => {
        log('rolloutBatch', input);
        return { episodes: input.to - input.from, skipped: 0, failed: this.skipUpdates ? input.to - input.from : 0 };
      },
      updateModel: async (input: { step: number; settings: ResolvedTraining }): Promise<UpdateResult> => {
        log('updateModel', input);
        const hold = this.holdUpdate;
        if (hold && hold.step === input.step && !hold.reached) {
          hold.reached = true;
          await new Promise<void>((r) => (hold.release = r));
        }
        if (this.skipUpdates) return { version: this.version, committed: false, skipped: 'no trainable tokens', metrics: {}, rewards: {} };
        return { version: ++this.version, committed: true, metrics: {}, rewards: { solver: { correct: 0.5 } } };
      },
    };
  }
}

describe('trainingRun control paths (mocked activities)', () => {
  let env: TestWorkflowEnvironment;
  let fake: Fake;
  let taskQueue: string;
  let stop: () => Promise<void>;
  const config = (over: Record<string, unknown> = {}) => ({ team: 'math', steps: 6, groupsPerStep: 2, groupSize: 2, evalEvery: 0, ...over });
  let n = 0;
  const start = (cfg: Record<string, unknown>, workflowId = `wf-${++n}`, args: unknown[] = [cfg]) =>
    env.client.workflow.start('trainingRun', { taskQueue, workflowId, args }) as Promise<WorkflowHandle<typeof trainingRun>>;

  before(async () => {
    env = await startTemporal({ extraArgs: ['--dynamic-config-value', 'limit.historyCount.suggestContinueAsNew=10'] });
  });
  after(async () => {
    await env?.teardown();
  });

  // A fresh fake and fresh workers per test.
  const withWorkers = (fn: () => Promise<void>) => async () => {
    fake = new Fake();
    taskQueue = uniqueTaskQueue('run-wf');
    const bundle = await workflowBundle();
    const control = await Worker.create({
      connection: env.nativeConnection,
      taskQueue,
      workflowBundle: bundle,
      activities: { ...fake.control(), ...createPoolQueueActivities({}), ...createDashboardLinkActivities({}) },
    });
    const pool = await Worker.create({ connection: env.nativeConnection, taskQueue: 'troupe-gpu', activities: fake.pool() });
    const running = Promise.all([control.run(), pool.run()]);
    stop = async () => {
      fake.holdUpdate?.release(); // a failed test must not leave an activity holding the worker's shutdown
      control.shutdown();
      pool.shutdown();
      await running;
    };
    try {
      await fn();
    } finally {
      await stop();
    }
  };

  it(
    'setOptimizer rejects junk before recording it, one message per problem at the path sent, not retryable',
    withWorkers(async () => {
      fake.holdUpdate = { step: 0, release: () => undefined, reached: false };
      const handle = await start(config({ steps: 2 }));
      await until('step 0 update', () => (fake.holdUpdate!.reached ? true : undefined));
      const reject = async (change: unknown, pattern: RegExp) => {
        const e = (await handle.executeUpdate(setOptimizerUpdate, { args: [change as never] }).then(
          () => assert.fail(`accepted ${JSON.stringify(change)}`),
          (err) => err,
        )) as WorkflowUpdateFailedError;
        assert.ok(e instanceof WorkflowUpdateFailedError, String(e));
        const cause = e.cause as ApplicationFailure;
        assert.equal(cause.type, 'InvalidOptimizerChange', `${JSON.stringify(change)}: ${cause.message}`);
        assert.equal(cause.nonRetryable, true);
        assert.match(cause.message, pattern);
        return cause;
      };
      await reject(42, /\(change\): must be a JSON object/);
      await reject('lr=0.01', /\(change\): must be a JSON object/);
      await reject([], /\(change\): must be a JSON object/);
      await reject(null, /\(change\): must be a JSON object/);
      await reject({ model: { policy: { lr: 0.01 } } }, /^invalid optimizer change: model: unknown field/);
      await reject({ models: { policy: { lrr: 0.01 } } }, /models\.policy\.lrr: unknown setting/);
      const wrong = await reject({ models: { policy: { lr: -1 } } }, /models\.policy\.lr: must be > 0/);
      assert.equal(wrong.message.match(/must be > 0/g)?.length, 1, `one message: ${wrong.message}`);
      assert.deepEqual(wrong.details?.[0], [{ path: 'models.policy.lr', message: 'must be > 0' }]);
      await reject({ agents: { judge: { lr: 0.1 } } }, /agents\.judge: unknown agent/);
      fake.holdUpdate!.release();
      await handle.result();
      assert.deepEqual(fake.events('optimizer-changed'), [], 'nothing rejected was recorded');
    }),
  );

  it(
    'pause holds steps, stop ends with a final eval; a change accepted mid-step survives continue-as-new and reaches the next update',
    withWorkers(async () => {
      fake.holdUpdate = { step: 2, release: () => undefined, reached: false };
      const handle = await start(config({ steps: 8 }));
      await until('step 2 update', () => (fake.holdUpdate!.reached ? true : undefined));
      // Accepted after step 2 applied its pending list; step 2 then ends with continue-as-new (history > 10 events).
      const { effectiveStep } = await handle.executeUpdate(setOptimizerUpdate, { args: [{ models: { policy: { lr: 0.05 } } }] });
      assert.equal(effectiveStep, 3);
      fake.holdUpdate!.release();
      await until('step 3 update', () => fake.named('updateModel').find((u) => u.step === 3));
      const changed = fake.events('optimizer-changed');
      assert.equal(changed.length, 1, 'the change was applied once, after continue-as-new');
      assert.equal(changed[0].step, 3);
      assert.equal(changed[0].detail.optimizer.models.policy.lr, 0.05);
      assert.equal(fake.named('updateModel').find((u) => u.step === 3).settings.models.policy.lr, 0.05);

      const executions: string[] = [];
      for await (const w of env.client.workflow.list({ query: `WorkflowId = '${handle.workflowId}'` }))
        executions.push(`${w.status.name}:${w.typedSearchAttributes.getAll().find((p) => p.key.name === 'TroupeStatus')?.value}`);
      assert.ok(
        executions.some((e) => e.startsWith('CONTINUED_AS_NEW')),
        `continued as new: ${executions}`,
      );
      for (const e of executions.filter((x) => x.startsWith('CONTINUED_AS_NEW')))
        assert.equal(e, 'CONTINUED_AS_NEW:continued', 'a closed execution does not say running');

      await handle.signal(pauseSignal);
      const paused = await until('paused', async () => {
        const s = await handle.query(statusQuery);
        return s.status === 'paused' ? s : undefined;
      });
      const updates = fake.named('updateModel').length;
      await sleep(500);
      assert.equal(fake.named('updateModel').length, updates, 'no step runs while paused');
      await handle.signal(resumeSignal);
      await until('a step after the pause', async () => ((await handle.query(statusQuery)).step > paused.step ? true : undefined));
      await handle.signal(stopSignal);
      const summary = await handle.result();
      assert.ok(summary.status === 'stopped' || summary.steps === 8, summary.status);
      assert.equal(fake.named('recordEval').at(-1).step, summary.steps, 'final eval at the last step');
    }),
  );

  it(
    'a setOptimizer change is in the store when the update returns: terminating the run before the step that applies it loses nothing',
    withWorkers(async () => {
      const db = await createTestDatabase();
      try {
        fake.store = db.sql;
        fake.holdUpdate = { step: 0, release: () => undefined, reached: false };
        const runId = `accepted-${Date.now()}`;
        await createRun(db.sql, { runId, team: 'math', config: {} });
        const handle = await start(config({ steps: 3 }), runId);
        await until('step 0 update', () => (fake.holdUpdate!.reached ? true : undefined));
        const { effectiveStep } = await handle.executeUpdate(setOptimizerUpdate, { args: [{ models: { policy: { lr: 0.05 } } }] });
        assert.equal(effectiveStep, 1);
        await handle.terminate('test: terminated before the change applies');
        assert.deepEqual(fake.events('optimizer-changed'), [], 'not applied yet');
        const rows = await db.sql`SELECT step, detail FROM run_events WHERE run_id = ${runId} AND kind = 'optimizer-change-accepted'`;
        assert.deepEqual(
          rows.map((r) => ({ step: r.step, detail: r.detail })),
          [{ step: 0, detail: { change: { models: { policy: { lr: 0.05 } } }, effectiveStep: 1 } }],
        );
      } finally {
        fake.holdUpdate?.release();
        await db.drop();
      }
    }),
  );

  it(
    'a run whose updates are all skipped fails with the cause after maxStepsWithoutSignal steps',
    withWorkers(async () => {
      fake.skipUpdates = true;
      const handle = await start(config({ steps: 20, maxStepsWithoutSignal: 3 }));
      const e = await handle.result().then(
        () => assert.fail('completed without any trainable signal'),
        (err) => err,
      );
      assert.ok(e instanceof WorkflowFailedError);
      const cause = e.cause as ApplicationFailure;
      assert.equal(cause.type, 'NoTrainableSignal');
      assert.match(cause.message, /no trainable signal for 3 consecutive steps \(steps 0-2.*policy: no trainable tokens.*4 of 4 episodes failed/);
      assert.equal(fake.named('updateModel').length, 3);
      assert.equal(fake.events('run-failed').length, 1);
      assert.deepEqual(fake.named('setRunStatus').at(-1), { runId: handle.workflowId, status: 'failed' });
    }),
  );

  it(
    'a refused start (the run id is taken) writes nothing to the store; an invalid config still sets TroupeStatus and TroupeTeam',
    withWorkers(async () => {
      fake.startError = ApplicationFailure.nonRetryable('run x already exists (completed)', 'RunExists');
      const refused = await start(config());
      await assert.rejects(refused.result(), WorkflowFailedError);
      assert.deepEqual(
        fake.calls.map((c) => c.name),
        ['startRun'],
        'no run-failed event, no status change',
      );
      const sa = (await refused.describe()).typedSearchAttributes.getAll();
      assert.equal(
        sa.find((p) => p.key.name === 'TroupeRunId'),
        undefined,
        'does not claim the run',
      );
      assert.equal(sa.find((p) => p.key.name === 'TroupeStatus')?.value, 'failed');

      const invalid = await start({ team: 'math', steps: -1 });
      await assert.rejects(invalid.result(), WorkflowFailedError);
      const attrs = (await invalid.describe()).typedSearchAttributes.getAll();
      assert.equal(attrs.find((p) => p.key.name === 'TroupeStatus')?.value, 'failed');
      assert.equal(attrs.find((p) => p.key.name === 'TroupeTeam')?.value, 'math');
    }),
  );

  it(
    'a resume redoes an eval the resume point does not list as finished (initial and at the resume step)',
    withWorkers(async () => {
      // Steps 0-3 committed; the evals at 0 and 4 were cut short (not recorded).
      fake.point = { startStep: 4, versions: { policy: 4 }, fresh: false, evals: [], optimizer: { all: { lr: 0.02 }, models: {}, agents: {} } };
      const handle = await start(config({ steps: 5, evalEvery: 2 }), 'resumed', [config({ steps: 5, evalEvery: 2 }), null, { resume: true }]);
      await handle.result();
      const order = fake.calls.filter((c) => ['planEval', 'recordEval', 'planStep'].includes(c.name)).map((c) => `${c.name}@${c.input.step}`);
      assert.deepEqual(order, ['planEval@0', 'recordEval@0', 'planEval@4', 'recordEval@4', 'planStep@4', 'planEval@5', 'recordEval@5']);
      assert.equal(fake.named('startRun')[0].resume, true);
      assert.equal(fake.named('updateModel')[0].settings.models.policy.lr, 0.02, 'continues with the optimizer its last change made effective');
    }),
  );

  it(
    'a run started by the CLI has a static summary, and Current Details is markdown with its per-agent lines as a list, final when the run ends',
    withWorkers(async () => {
      const handle = await startTrainingRun(env.client, taskQueue, parseRunConfig(config({ runId: 'summarised', steps: 2 })));
      await handle.result();
      // On the execution the CLI started (continue-as-new cannot carry user metadata; Current Details names the run on every execution).
      const first = env.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId);
      assert.equal(await (await first.describe()).staticSummary(), 'math: 2 steps x 2 groups x 2 episodes (batched), run summarised');
      const meta = (await handle.query('__temporal_workflow_metadata')) as { currentDetails?: string };
      assert.equal(meta.currentDetails, '**math** run `summarised`: step 2/2 (completed) · eval 0.500 at step 2 (from 0.500)\n\n- solver: correct 0.500');
    }),
  );
});
