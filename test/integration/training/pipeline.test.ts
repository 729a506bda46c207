/**
 * Pipelines (issue #48) on a real Temporal server, PostgreSQL and the built-in engine, through the client:
 * - a pipeline (teacher → student → eval, the student's solver initialised from the teacher's last step by
 *   reference) runs both stages as child runs `<id>.<stage>`; the student's version 0 is the teacher's final
 *   version (same sha256), and `troupe status <pipeline>` lists the stages;
 * - a pipeline terminated during its second stage continues with resume: the first stage is kept (one
 *   execution, never rerun), the second resumes at its last committed step and no step is committed twice;
 * - a third stage of `steps: 0` evaluates the student's last version (an eval stage: no update);
 * - an export stage writes a run stage's last version in the Hugging Face layout, is kept when run again
 *   into the same directory, and is refused, the directory untouched, for another version;
 * - a stage whose run config is bad is refused before anything starts, naming the stage and the field.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connectTroupe, type TroupeClient } from '../../../client';
import { watchToEnd } from '../../../control/pipelines';
import type { TroupeError } from '../../../infra/errors';
import { startDashboard } from '../../../dashboard/server';
import { freePort } from '../../helpers';
import { browserSkipReason, launchBrowser } from '../dashboard/browser';
import { startHarness, type Harness } from '../../../testing/stack';
import { troupe } from '../../helpers/cli';

const small = { team: 'math', teamOptions: { models: 'separate' }, groupsPerStep: 1, groupSize: 2, evalEvery: 0, evalTasks: 1 };

describe('pipelines', () => {
  let h: Harness;
  let client: TroupeClient;
  const saved = { ...process.env };
  before(async () => {
    h = await startHarness();
    Object.assign(process.env, { TEMPORAL_ADDRESS: h.env.address, DATABASE_URL: h.db.url, TROUPE_TASK_QUEUE: h.taskQueue });
    client = await connectTroupe();
  });
  after(async () => {
    await client?.close();
    for (const k of ['TEMPORAL_ADDRESS', 'DATABASE_URL', 'TROUPE_TASK_QUEUE']) if (saved[k] === undefined) delete process.env[k];
    Object.assign(process.env, saved);
    await h?.shutdown();
  });
  const executions = async (runId: string) => (await h.db.sql`SELECT count(*)::int AS n FROM run_executions WHERE run_id = ${runId}`)[0]?.n as number;

  it('runs stages as child runs, resolving references to the earlier stage', async () => {
    const { pipelineId } = await client.startPipeline(
      {
        name: 'warm',
        stages: [
          { name: 'teacher', run: { ...small, steps: 2 } },
          { name: 'student', run: { ...small, steps: 1, frozen: ['verifier'], init: { solver: { run: { $run: 'teacher' }, step: { $step: 'teacher' } } } } },
          // steps 0: an eval of the student's last version, nothing trained
          { name: 'eval', run: { ...small, steps: 0, evalTasks: 5, init: { solver: { run: { $run: 'student' }, step: { $step: 'student' } } } } },
        ],
      },
      { id: 'pl-warm' },
    );
    const summary = await client.watchPipeline(pipelineId);
    assert.deepEqual(summary.stages, [
      { name: 'teacher', runId: 'pl-warm.teacher', state: 'completed', steps: 2 },
      { name: 'student', runId: 'pl-warm.student', state: 'completed', steps: 1 },
      { name: 'eval', runId: 'pl-warm.eval', state: 'completed', steps: 0 },
    ]);
    const [stored] = await h.db.sql`SELECT config FROM runs WHERE run_id = 'pl-warm.student'`;
    assert.deepEqual((stored?.config as { init: unknown }).init, { solver: { run: 'pl-warm.teacher', step: 1 } });
    const sha = async (runId: string, version: number) =>
      (await h.db.sql`SELECT sha256 FROM versions WHERE run_id = ${runId} AND model = 'solver' AND version = ${version}`)[0]?.sha256 as string;
    assert.equal(await sha('pl-warm.student', 0), await sha('pl-warm.teacher', 2), "the student starts from the teacher's last version");
    assert.equal(await sha('pl-warm.eval', 0), await sha('pl-warm.student', 1), "the eval stage's model is the student's last version");
    const evalRows = await h.db.sql`SELECT step, split, count(*)::int AS n FROM episodes WHERE run_id = 'pl-warm.eval' GROUP BY step, split`;
    assert.deepEqual(
      evalRows.map((r) => [r.step, r.split, r.n]),
      [[0, 'eval', 5]],
      'one eval of 5 held-out tasks, no training episode',
    );
    const [versions] = await h.db.sql`SELECT max(version)::int AS v FROM versions WHERE run_id = 'pl-warm.eval'`;
    assert.equal(versions?.v, 0, 'no update');

    const env = { ...process.env, TROUPE_DEBUG: '' };
    const status = await troupe(['status', 'pl-warm'], env);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /^pipeline pl-warm \(warm\): completed$/m);
    assert.match(status.stdout, /^ {2}student +completed +pl-warm\.student {2}1 step {2}eval \d\.\d{3} {2}after teacher$/m);

    // the dashboard draws the stages as a graph, each linking to its run
    if (!browserSkipReason()) {
      const dash = await startDashboard({ sql: h.db.sql, port: await freePort(), client: h.env.client, namespace: h.env.namespace ?? 'default' });
      const browser = await launchBrowser();
      try {
        const page = await browser.context.newPage();
        await page.goto(`${dash.url}/#/pipelines/pl-warm`);
        await page.waitForFunction(() => (globalThis as any).troupe?.ready === true);
        assert.equal(await page.locator('#pipeline-status').innerText(), 'completed');
        const stages = await page.locator('[data-stage]').evaluateAll((els) => els.map((e) => [e.getAttribute('data-stage'), e.getAttribute('data-state')]));
        assert.deepEqual(stages, [
          ['teacher', 'completed'],
          ['student', 'completed'],
          ['eval', 'completed'],
        ]);
        assert.equal(await page.locator('#pipeline-graph line').count(), 2, 'two edges: teacher → student → eval');
        await page.locator('[data-stage="student"]').click();
        await page.waitForFunction(() => (globalThis as any).location.hash === '#/runs/pl-warm.student' && (globalThis as any).troupe?.ready === true);
      } finally {
        await browser.close();
        await dash.close();
      }
    }
  });

  it('continues a terminated pipeline at the stage and step where it stopped', async () => {
    const { pipelineId } = await client.startPipeline(
      {
        name: 'chain',
        stages: [
          { name: 'a', run: { ...small, steps: 1 } },
          { name: 'b', run: { ...small, steps: 3 } },
        ],
      },
      { id: 'pl-chain' },
    );
    // terminate once stage b has committed a step: its child run is terminated with it
    for (let i = 0; ; i++) {
      const [r] = await h.db.sql`SELECT count(*)::int AS n FROM steps WHERE run_id = 'pl-chain.b' AND status = 'completed'`;
      if ((r?.n as number) >= 1) break;
      assert.ok(i < 600, 'stage b commits a step within 60 s');
      await new Promise((res) => setTimeout(res, 100));
    }
    await h.env.client.workflow.getHandle(pipelineId).terminate('test: kill the pipeline mid-stage');
    await assert.rejects(client.watchPipeline(pipelineId), /kill the pipeline mid-stage/);

    await client.resume(pipelineId);
    const summary = await client.watchPipeline(pipelineId);
    assert.deepEqual(
      summary.stages.map((s) => [s.name, s.state, s.steps]),
      [
        ['a', 'kept', 1],
        ['b', 'completed', 3],
      ],
    );
    assert.equal(await executions('pl-chain.a'), 1, 'a finished stage is never rerun');
    assert.equal(await executions('pl-chain.b'), 2, 'the unfinished stage resumed in a new execution');
    const steps = await h.db.sql`SELECT step FROM steps WHERE run_id = 'pl-chain.b' AND status = 'completed' ORDER BY step`;
    assert.deepEqual(
      steps.map((s) => s.step as number),
      [0, 1, 2],
    );
    const [v] = await h.db.sql`SELECT max(version)::int AS v FROM versions WHERE run_id = 'pl-chain.b' AND model = 'solver'`;
    assert.equal(v?.v, 3, 'three updates, none repeated');
  });

  it("exports a stage's last version in the Hugging Face layout once: kept when run again, refused over another version", async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pl-export-'));
    const dir = path.join(out, 'policy');
    try {
      const recall = { team: 'recall', steps: 1, groupsPerStep: 1, groupSize: 2, evalEvery: 0, evalTasks: 1 };
      const started = await client.startPipeline(
        {
          name: 'ship',
          stages: [
            { name: 'train', run: recall },
            { name: 'out', export: { run: { $run: 'train' }, model: 'policy', out: dir } },
          ],
        },
        { id: 'pl-ship' },
      );
      const summary = await client.watchPipeline(started.pipelineId);
      assert.deepEqual(summary.stages[1], {
        name: 'out',
        runId: 'pl-ship.train',
        state: 'completed',
        steps: 0,
        export: { model: 'policy', version: 1, out: dir },
      });
      const files = fs.readdirSync(dir).sort();
      assert.ok(files.includes('config.json') && files.includes('model.safetensors') && files.includes('troupe-export.json'), files.join(', '));
      assert.deepEqual(fs.readdirSync(out), ['policy'], 'no partial directory left beside it');
      const written = fs.statSync(path.join(dir, 'model.safetensors')).mtimeMs;

      // the same version into the same directory: kept, not written again
      const again = await client.startPipeline(
        { name: 'ship', stages: [{ name: 'out', export: { run: 'pl-ship.train', model: 'policy', out: dir } }] },
        { id: 'pl-ship-again' },
      );
      const kept = await client.watchPipeline(again.pipelineId);
      assert.equal(kept.stages[0]?.state, 'kept');
      assert.equal(fs.statSync(path.join(dir, 'model.safetensors')).mtimeMs, written);
      // another version into it: refused naming the field, the directory untouched
      const other = await client.startPipeline(
        { name: 'ship', stages: [{ name: 'out', export: { run: 'pl-ship.train', model: 'policy', version: 0, out: dir } }] },
        { id: 'pl-ship-other' },
      );
      await assert.rejects(client.watchPipeline(other.pipelineId), (e: Error) => {
        assert.match(String(e.cause), /stage out failed: stage out: export\.out: .* holds run pl-ship\.train model policy version 1; name another directory/);
        return true;
      });
      // as `troupe pipeline` and `troupe resume` report it: the stage's reason and the way on
      await assert.rejects(
        watchToEnd(h.env.client.workflow.getHandle('pl-ship-other'), () => undefined, false),
        (e: TroupeError) => {
          assert.match(e.message, /^pipeline pl-ship-other failed: stage out failed: stage out: export\.out: /);
          assert.equal(e.hint, 'after fixing the cause: npx troupe resume pl-ship-other');
          return true;
        },
      );
      assert.equal(fs.statSync(path.join(dir, 'model.safetensors')).mtimeMs, written);

      const status = await troupe(['status', 'pl-ship'], { ...process.env, TROUPE_DEBUG: '' });
      assert.match(
        status.stdout,
        new RegExp(`^ {2}out +completed +pl-ship\\.train {2}policy v1 → ${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} {2}after train$`, 'm'),
      );
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });

  it('refuses a pipeline whose stage has a bad run config before starting anything', async () => {
    await assert.rejects(
      client.startPipeline(
        {
          name: 'bad',
          stages: [
            { name: 'ok', run: { ...small, steps: 1 } },
            { name: 'broken', run: { ...small, steps: -1 } },
          ],
        },
        { id: 'pl-bad' },
      ),
      /^TroupeError: stage broken: invalid run config: steps: /,
    );
    const rows = await h.db.sql`SELECT run_id FROM runs WHERE run_id LIKE 'pl-bad%'`;
    assert.equal(rows.length, 0);
  });
});
