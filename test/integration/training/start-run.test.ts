/**
 * startRun against the real store (PostgreSQL): a start never modifies a run it
 * does not own, only a resume continues a run, and the resume point carries the
 * finished evals and the effective optimizer of the last setOptimizer change;
 * a step whose updates committed before the execution ended is completed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type ApplicationFailure } from '@temporalio/common';
import { createTrainingControlActivities } from '../../../activities/training/control';
import { parseRunConfig } from '../../../schema/run-config';
import { createTestDatabase, type TestDatabase } from '../../helpers';

describe('startRun and the resume point', () => {
  let db: TestDatabase;
  let control: ReturnType<typeof createTrainingControlActivities>;
  before(async () => {
    db = await createTestDatabase();
    control = createTrainingControlActivities({ sql: db.sql });
  });
  after(async () => {
    await db?.drop();
  });

  const config = (over: Record<string, unknown> = {}) => parseRunConfig({ team: 'math', runId: 'math-x', steps: 4, ...over });
  const start = (executionId: string, over: Record<string, unknown> = {}, resume = false) =>
    control.startRun({ runId: 'math-x', config: config(over), workflowId: 'math-x', executionId, models: ['policy'], ...(resume ? { resume } : {}) });
  const snapshot = async () => ({
    run: (await db.sql`SELECT status, config, team FROM runs WHERE run_id = 'math-x'`)[0],
    events: (await db.sql`SELECT kind FROM run_events WHERE run_id = 'math-x' ORDER BY id`).map((r) => r.kind),
    executions: (await db.sql`SELECT execution_id FROM run_executions WHERE run_id = 'math-x' ORDER BY started_at`).map((r) => r.execution_id),
  });
  const refused = (pattern: RegExp) => (e: ApplicationFailure) => {
    assert.equal(e.type, 'RunExists', e.message);
    assert.equal(e.nonRetryable, true);
    assert.match(e.message, pattern);
    return true;
  };

  it('refuses a second start of a run id (same config or not), leaving the run as it was; a retry of its own start goes on', async () => {
    const first = await start('exec-1');
    assert.equal(first.fresh, true);
    assert.equal((await start('exec-1')).startStep, 0, "a retried startRun of the run's own execution");
    await db.sql`UPDATE runs SET status = 'completed' WHERE run_id = 'math-x'`;
    const before = await snapshot();

    await assert.rejects(
      start('exec-2'),
      refused(/run math-x already exists \(completed\); a new start never continues or changes an existing run: start it under a new run id/),
    );
    await assert.rejects(start('exec-3', { steps: 9, seed: 3 }), refused(/already exists/));
    await assert.rejects(start('exec-4', {}, true), refused(/run math-x is completed; only a failed, terminated or timed-out run can be resumed/));
    assert.deepEqual(await snapshot(), before, 'the completed run is untouched');
  });

  it('resumes a failed run only through a resume, with its config; the point lists finished evals and the effective optimizer', async () => {
    await db.sql`UPDATE runs SET status = 'failed' WHERE run_id = 'math-x'`;
    await assert.rejects(start('exec-5'), refused(/start a new run id, or continue this one with troupe resume math-x/));
    await assert.rejects(start('exec-6', { steps: 9 }, true), (e: ApplicationFailure) => e.type === 'RunConfigMismatch');

    // Steps 0 and 1 committed; the initial eval finished (recorded), the eval at 2 was cut short (episodes only).
    for (const [version, step] of [
      [0, -1],
      [1, 0],
      [2, 1],
    ] as const) {
      await db.sql`INSERT INTO versions (run_id, model, version, step, spec, weights, optimizer_state, sha256) VALUES ('math-x', 'policy', ${version}, ${step}, '{}', '\\x00', '\\x00', 'x')`;
    }
    await db.sql`INSERT INTO metrics (run_id, step, kind, scope, name, value) VALUES ('math-x', 0, 'eval', 'team', 'episodes', 515), ('math-x', 0, 'eval', 'team', 'success', 0.5)`;
    await db.sql`INSERT INTO run_events (run_id, step, kind, detail) VALUES
      ('math-x', 1, 'optimizer-changed', ${db.sql.json({ changes: [{ all: { lr: 0.1 } }], optimizer: { all: { lr: 0.1 }, models: {}, agents: {} } })}),
      ('math-x', 2, 'optimizer-changed', ${db.sql.json({ changes: [{ models: { policy: { lr: 0.05 } } }], optimizer: { all: { lr: 0.1 }, models: { policy: { lr: 0.05 } }, agents: {} } })})`;

    const point = await start('exec-7', {}, true);
    assert.deepEqual(point, {
      startStep: 2,
      versions: { policy: 2 },
      fresh: false,
      evals: [0],
      optimizer: { all: { lr: 0.1 }, models: { policy: { lr: 0.05 } }, agents: {} },
    });
    const after = await snapshot();
    assert.equal(after.run!.status, 'running');
    assert.deepEqual(after.executions, ['exec-1', 'exec-7']);
    assert.equal(after.events.at(-1), 'resumed');
  });

  it('folds in the changes accepted after the last step that applied changes (terminated before theirs), and only those', async () => {
    await db.sql`UPDATE runs SET status = 'terminated' WHERE run_id = 'math-x'`;
    // Accepted during step 1, applied at step 2 (the optimizer-changed event above): already in the optimizer.
    // Accepted during step 2, effective at step 3: the run was terminated before step 3 applied it.
    await db.sql`INSERT INTO run_events (run_id, step, kind, detail) VALUES
      ('math-x', 1, 'optimizer-change-accepted', ${db.sql.json({ change: { models: { policy: { lr: 0.05 } } }, effectiveStep: 2 })}),
      ('math-x', 2, 'optimizer-change-accepted', ${db.sql.json({ change: { all: { lr: 0.2 } }, effectiveStep: 3 })}),
      ('math-x', 2, 'optimizer-change-accepted', ${db.sql.json({ change: { agents: { solver: { clipLow: 0.1 } } }, effectiveStep: 3 })})`;
    const point = await start('exec-8', {}, true);
    assert.deepEqual(point.optimizer, { all: { lr: 0.2 }, models: { policy: { lr: 0.05 } }, agents: { solver: { clipLow: 0.1 } } });
  });

  it('completes the steps whose updates all committed before the execution ended, and says so in the resumed event', async () => {
    const runId = 'math-z';
    const cfg = parseRunConfig({ team: 'math', runId, steps: 4 });
    const startZ = (executionId: string, resume = false) =>
      control.startRun({ runId, config: cfg, workflowId: runId, executionId, models: ['policy'], ...(resume ? { resume } : {}) });
    await startZ('exec-1');
    // step 0 finished; step 1's update committed, then the run was terminated before its bookkeeping
    for (const [version, step] of [
      [1, 0],
      [2, 1],
    ] as const)
      await db.sql`INSERT INTO versions (run_id, model, version, step, spec, weights, optimizer_state, sha256) VALUES (${runId}, 'policy', ${version}, ${step}, '{}', '\\x00', '\\x00', 'x')`;
    await db.sql`INSERT INTO steps (run_id, step, status, metrics) VALUES
      (${runId}, 0, 'completed', ${db.sql.json({ updateSeconds: 0.5 })}), (${runId}, 1, 'committed', ${db.sql.json({ counts: { episodes: 8 } })})`;
    await db.sql`UPDATE runs SET status = 'terminated' WHERE run_id = ${runId}`;
    assert.equal((await startZ('exec-2', true)).startStep, 2);
    const steps = await db.sql`SELECT step, status, metrics FROM steps WHERE run_id = ${runId} ORDER BY step`;
    assert.deepEqual(
      steps.map((r) => [r.step, r.status, r.metrics]),
      [
        [0, 'completed', { updateSeconds: 0.5 }],
        [1, 'completed', { counts: { episodes: 8 } }],
      ],
    );
    const [resumed] = await db.sql`SELECT step, detail FROM run_events WHERE run_id = ${runId} AND kind = 'resumed' ORDER BY id DESC LIMIT 1`;
    assert.equal(resumed?.step, 2);
    assert.deepEqual((resumed?.detail as { completedSteps?: number[] }).completedSteps, [1]);
  });

  it("folds changes accepted before any step applied one into the run config's optimizer", async () => {
    const runId = 'math-y';
    const cfg = parseRunConfig({ team: 'math', runId, steps: 4, optimizer: { all: { lr: 0.01 } } });
    const startY = (executionId: string, resume = false) =>
      control.startRun({ runId, config: cfg, workflowId: runId, executionId, models: ['policy'], ...(resume ? { resume } : {}) });
    assert.equal((await startY('exec-1')).optimizer, null);
    await db.sql`INSERT INTO run_events (run_id, step, kind, detail) VALUES
      (${runId}, 0, 'optimizer-change-accepted', ${db.sql.json({ change: { models: { policy: { lr: 0.03 } } }, effectiveStep: 1 })})`;
    await db.sql`UPDATE runs SET status = 'terminated' WHERE run_id = ${runId}`;
    assert.deepEqual((await startY('exec-2', true)).optimizer, { all: { lr: 0.01 }, models: { policy: { lr: 0.03 } }, agents: {} });
  });
});
