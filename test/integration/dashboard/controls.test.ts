/**
 * The dashboard's run controls go through the workflow's own handlers and are
 * refused without the access token: no token configured → 403, a missing or
 * wrong token → 401, and the run goes on untouched. With the token, pause,
 * setOptimizer (validated by the workflow: a bad value is a 400 naming the
 * field and records nothing), resume and stop act on the run; a control for an
 * unknown run is a 404.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startDashboard, type Dashboard } from '../../../dashboard/server';
import { statusQuery } from '../../../workflows/definitions';
import { freePort } from '../../helpers';
import { startHarness, type Harness } from '../../../testing/stack';
import { getJson } from './fixture';

const until = async <T>(what: string, f: () => Promise<T | undefined>): Promise<T> => {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
};

describe('dashboard controls', () => {
  let h: Harness;
  let open: Dashboard;
  let guarded: Dashboard;
  const token = 'test-token-123';
  before(async () => {
    h = await startHarness();
    open = await startDashboard({ sql: h.db.sql, port: await freePort(), client: h.env.client });
    guarded = await startDashboard({ sql: h.db.sql, port: await freePort(), client: h.env.client, token });
  });
  after(async () => {
    await open?.close();
    await guarded?.close();
    await h?.shutdown();
  });

  it('refuses controls without the token and acts through the workflow handlers with it', async () => {
    const runId = 'dash-controlled';
    const handle = await h.env.client.workflow.start('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: runId,
      args: [{ team: 'math', steps: 50, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 4 }],
    });
    await until('step 1', async () => ((await handle.query(statusQuery)).step >= 1 ? true : undefined));
    const post = (d: Dashboard, what: string, headers: Record<string, string> = {}, body?: unknown) =>
      getJson(`${d.url}/api/runs/${runId}/${what}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      });

    assert.equal((await getJson(`${open.url}/api/config`)).body.controls, false);
    for (const what of ['pause', 'stop', 'setOptimizer']) {
      const r = await post(open, what, { authorization: `Bearer ${token}` }, what === 'setOptimizer' ? { all: { lr: 0.5 } } : undefined);
      assert.equal(r.status, 403, what);
      assert.match(r.body.error, /controls are disabled: start the dashboard with TROUPE_DASHBOARD_TOKEN/);
    }
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: token }] as Record<string, string>[]) {
      const r = await post(guarded, 'stop', headers);
      assert.equal(r.status, 401);
      assert.match(r.body.error, /Authorization: Bearer/);
    }
    assert.equal((await post(guarded, 'reboot', { authorization: `Bearer ${token}` })).status, 405, 'only the known controls');
    await new Promise((r) => setTimeout(r, 1000));
    const s = await handle.query(statusQuery);
    assert.equal(s.status, 'running', 'refused controls changed nothing');
    assert.equal((await h.db.sql`SELECT count(*)::int AS n FROM run_events WHERE run_id = ${runId} AND kind = 'optimizer-changed'`)[0]!.n, 0);

    const auth = { authorization: `Bearer ${token}` };
    assert.equal((await post(guarded, 'pause', auth)).status, 200);
    const paused = await until('paused', async () => {
      const st = await handle.query(statusQuery);
      return st.status === 'paused' ? st : undefined;
    });
    const bad = await post(guarded, 'setOptimizer', auth, { models: { policy: { lr: -1 } } });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /^setOptimizer: .*models\.policy\.lr: must be > 0/);
    const notJson = await getJson(`${guarded.url}/api/runs/${runId}/setOptimizer`, { method: 'POST', headers: auth, body: '{lr' });
    assert.equal(notJson.status, 400);
    assert.match(notJson.body.error, /^body: not JSON/);
    assert.equal(
      (await h.db.sql`SELECT count(*)::int AS n FROM run_events WHERE run_id = ${runId} AND kind = 'optimizer-changed'`)[0]!.n,
      0,
      'a rejected change records nothing',
    );
    const good = await post(guarded, 'setOptimizer', auth, { models: { policy: { lr: 0.05 } } });
    assert.equal(good.status, 200);
    assert.equal(good.body.effectiveStep, paused.step);
    assert.equal((await post(guarded, 'resume', auth)).status, 200);
    await until('a step after the pause', async () => ((await handle.query(statusQuery)).step > paused.step ? true : undefined));
    assert.equal((await post(guarded, 'stop', auth)).status, 200);
    const summary: any = await handle.result();
    assert.equal(summary.status, 'stopped');
    const settings = await h.db.sql`SELECT step, settings FROM steps WHERE run_id = ${runId} AND step >= ${paused.step} ORDER BY step`;
    assert.ok(settings.length > 0);
    for (const row of settings) assert.equal(row.settings.policy.lr, 0.05, `lr at step ${row.step}`);
    // The run page shows the pause and the change as events.
    const kinds = (await getJson(`${open.url}/api/runs/${runId}`)).body.events.map((e: any) => e.kind);
    assert.ok(kinds.includes('paused') && kinds.includes('optimizer-changed') && kinds.includes('resumed-from-pause'), kinds.join(','));
  });

  it('a control for a run that does not exist is a 404 naming it', async () => {
    for (const what of ['pause', 'stop', 'setOptimizer']) {
      const r = await getJson(`${guarded.url}/api/runs/no-such-run/${what}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: what === 'setOptimizer' ? '{"all": {"lr": 0.01}}' : undefined,
      });
      assert.equal(r.status, 404, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, 'run "no-such-run" not found');
    }
  });
});
