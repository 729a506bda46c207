/**
 * Fork, freeze and init-from (issue #48) on a real Temporal server, PostgreSQL and the built-in engine,
 * every version in checkpoint-store files (TROUPE_CHECKPOINT_INLINE_MAX_BYTES=0):
 * - a two-model math run trains 2 steps; a fork of it at step 1 (the client's forkRun) starts with version 0 of each model
 *   naming the very files of the parent's version after step 1 (same weights and optimizer sha256, no
 *   file written for it), trains on with `frozen: ['verifier']` (the verifier stays at version 0), and
 *   `troupe status`, `troupe list` and the dashboard (its run page, and its curves from the fork point
 *   when compared with the parent; skipped without Chromium) show its lineage; gc pruning the parent's version keeps the fork's files;
 * - a fork at a step that is not committed is refused naming --at and the last committed step;
 * - init-from into a model of another spec is refused naming init.<model>, and no run is stored; a version
 *   the source run lacks is refused naming init.<model>.version.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { getVersion, listVersions } from '../../../activities/store/versions';
import { orphanFiles, pruneVersions } from '../../../activities/store/retention';
import { forkBase } from '../../../control/fork';
import { resumePoint } from '../../../activities/training/resume';
import { innermostCause } from '../../../control/runs';
import { errorMessage } from '../../../infra/errors';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';
import { troupe } from '../../helpers/cli';
import { connectTroupe } from '../../../client';
import { startDashboard } from '../../../dashboard/server';
import { freePort } from '../../helpers';
import { browserSkipReason, launchBrowser } from '../dashboard/browser';

const small = { team: 'math', teamOptions: { models: 'separate' }, groupsPerStep: 1, groupSize: 2, evalEvery: 0, evalTasks: 1 };

describe('fork, freeze and init-from', () => {
  let h: Harness;
  const inline = process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES;
  before(async () => {
    process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES = '0';
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
    if (inline === undefined) delete process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES;
    else process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES = inline;
  });
  const run = (config: Record<string, unknown>) =>
    h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: String(config.runId), args: [config] });
  const row = async (runId: string, model: string, version: number) => {
    const [r] = await h.db.sql`SELECT sha256, optimizer_sha256, weights_file, optimizer_file, weights FROM versions
      WHERE run_id = ${runId} AND model = ${model} AND version = ${version}`;
    assert.ok(r, `${runId} ${model} v${version} stored`);
    return r;
  };

  it('forks a run at a committed step by reference, trains on with a frozen model, and shows the lineage', async () => {
    const parent = await run({ ...small, runId: 'parent', steps: 2 });
    assert.deepEqual(parent.versions, { solver: 2, verifier: 2 });

    // the fork through the client (troupe fork's path: the parent's stored config with changes)
    const saved = { ...process.env };
    Object.assign(process.env, { TEMPORAL_ADDRESS: h.env.address, DATABASE_URL: h.db.url, TROUPE_TASK_QUEUE: h.taskQueue });
    const client = await connectTroupe();
    let forked;
    try {
      await assert.rejects(client.forkRun('parent', 5, { runId: 'too-far' }), {
        message: 'at: step 5 of run parent is not committed (its last committed step is 1)',
      });
      const { runId } = await client.forkRun('parent', 1, { runId: 'forked', steps: 1, frozen: ['verifier'] });
      forked = await client.watchRun(runId);
    } finally {
      await client.close();
      for (const k of ['TEMPORAL_ADDRESS', 'DATABASE_URL', 'TROUPE_TASK_QUEUE']) if (saved[k] === undefined) delete process.env[k];
      Object.assign(process.env, saved);
    }
    assert.equal(forked.status, 'completed');
    assert.deepEqual(forked.versions, { solver: 1, verifier: 0 }, 'the frozen verifier never updates');
    for (const model of ['solver', 'verifier']) {
      // after step 1 each model served the version step 1 committed: version 2
      const theirs = await row('parent', model, 2);
      const ours = await row('forked', model, 0);
      assert.equal(ours.weights, null, 'in files, not inline');
      assert.deepEqual(
        [ours.sha256, ours.optimizer_sha256, ours.weights_file, ours.optimizer_file],
        [theirs.sha256, theirs.optimizer_sha256, theirs.weights_file, theirs.optimizer_file],
        `${model}: version 0 of the fork names the parent's step-1 files`,
      );
    }
    const written = fs.readdirSync(path.join(h.db.checkpoints.dir, 'forked'), { recursive: true }).map(String);
    assert.deepEqual(
      written.filter((f) => /v0-/.test(f)),
      [],
      "no bytes written for the fork's version 0",
    );
    const versions = await listVersions(h.db.sql, 'forked');
    assert.deepEqual(
      versions.map((v) => `${v.model} v${v.version} step ${v.step}`),
      ['solver v0 step -1', 'solver v1 step 0', 'verifier v0 step -1'],
    );
    assert.notEqual(versions[1]?.sha256, versions[0]?.sha256, 'the fork trains on');

    // a resume of the fork restarts after its last step: the frozen verifier (still at version 0) does not hold it back
    assert.equal((await resumePoint(h.db.sql, 'forked', ['solver', 'verifier'], undefined, ['verifier'])).startStep, 1);

    // gc pruning the parent's version keeps the files the fork's version 0 names
    await pruneVersions(h.db.sql, h.db.checkpoints, [{ runId: 'parent', model: 'solver', version: 2, bytes: 0 }]);
    assert.equal((await h.db.sql`SELECT 1 FROM versions WHERE run_id = 'parent' AND model = 'solver' AND version = 2 AND pruned_at IS NOT NULL`).length, 1);
    const kept = await getVersion(h.db.sql, h.db.checkpoints, 'forked', 'solver', 0);
    assert.equal(kept?.sha256, (await row('parent', 'solver', 2)).sha256);
    assert.deepEqual(await orphanFiles(h.db.sql, h.db.checkpoints, 0), []);

    const state = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-fork-'));
    try {
      const env = { ...process.env, TROUPE_STATE_DIR: state, TEMPORAL_ADDRESS: h.env.address, DATABASE_URL: h.db.url, TROUPE_DEBUG: '' };
      const status = await troupe(['status', 'forked'], env);
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, /^ {2}forked from parent at step 1$/m);
      assert.match(status.stdout, /^ {2}frozen: verifier$/m);
      assert.match(status.stdout, /versions: solver v1, verifier v0/);
      const list = await troupe(['list', '--json'], env);
      assert.equal(list.code, 0, list.stderr);
      const rows = list.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { workflowId: string; forkedFrom: unknown });
      assert.deepEqual(rows.find((r) => r.workflowId === 'forked')?.forkedFrom, { run: 'parent', step: 1 });
      assert.equal(rows.find((r) => r.workflowId === 'parent')?.forkedFrom, null);
    } finally {
      fs.rmSync(state, { recursive: true, force: true });
    }

    // the dashboard: the run page names and links the parent; compared with it, the fork's curves start at the fork point
    if (!browserSkipReason()) {
      const dash = await startDashboard({ sql: h.db.sql, port: await freePort(), temporalAddress: h.env.address, namespace: h.env.namespace ?? 'default' });
      const browser = await launchBrowser();
      try {
        const page = await browser.context.newPage();
        const ready = () => page.waitForFunction(() => (globalThis as any).troupe?.ready === true);
        await page.goto(`${dash.url}/#/runs/forked`);
        await ready();
        assert.equal(await page.locator('#run-fork').innerText(), 'forked from parent at step 1');
        await page.locator('a', { hasText: 'curves with it, from the fork point' }).click();
        await page.waitForFunction(() => (globalThis as any).location.hash === '#/compare?runs=parent,forked' && (globalThis as any).troupe?.ready === true);
        const xs: Array<[string, number]> = await page.evaluate(() =>
          (globalThis as any).troupe.views['reward components'].data('points').map((p: any) => [String(p.series).split(':')[0], p.x]),
        );
        const stepsOf = (run: string) => [...new Set(xs.filter(([r]) => r === run).map(([, x]) => x))].sort();
        assert.deepEqual([stepsOf('parent'), stepsOf('forked')], [[1, 2], [3]], "the fork drawn after the parent's step 1");
      } finally {
        await browser.close();
        await dash.close();
      }
    }

    await assert.rejects(forkBase(h.db.sql, 'parent', 2), { message: '--at: step 2 of run parent is not committed (its last committed step is 1)' });
  });

  it('refuses init-from into a model of another spec, naming init.<model>, and stores no run', async () => {
    const runId = 'mismatch';
    await assert.rejects(
      run({ ...small, runId, steps: 1, teamOptions: { models: 'separate', policy: 'transformer' }, init: { solver: { run: 'parent', step: 0 } } }),
      (e: unknown) => {
        assert.ok(e instanceof WorkflowFailedError);
        assert.match(errorMessage(innermostCause(e)), /^init\.solver: model solver of run parent has another spec than this run's solver \(they differ in: /);
        return true;
      },
    );
    assert.equal((await h.db.sql`SELECT 1 FROM runs WHERE run_id = ${runId}`).length, 0);
    await assert.rejects(run({ ...small, runId: 'no-version', steps: 1, init: { verifier: { run: 'parent', version: 9 } } }), (e: unknown) => {
      assert.equal(errorMessage(innermostCause(e)), 'init.verifier.version: run parent has no version 9 of verifier (its newest is 2)');
      return true;
    });
  });
});
