/**
 * The dashboard's read-only API over a real run's data in a real PostgreSQL:
 * what it returns equals the store, pages are bounded, unknown ids are 404 and
 * malformed parameters 400 naming the parameter.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { MAX_LIMIT } from '../../../dashboard/api';
import type { Dashboard } from '../../../dashboard/server';
import type { Harness } from '../../../testing/stack';
import { getJson, RUN, runAndServe } from './fixture';

/**
 * Each train turn of a step, its stored advantage, and the one an independent GRPO by hand gives
 * (the run's default estimator: per (task group, agent), score = the turn's summed reward,
 * A = (s − mean)/(std + 1e-6), unbiased std, a singleton with mean 0 and std 1); failed episodes none.
 */
async function advantagesOf(sql: Harness['db']['sql'], runId: string, step: number) {
  const rows = await sql`
    SELECT e.episode_id, e.group_index, e.status, t.turn_index, t.agent, t.advantage,
      (SELECT coalesce(sum(r.value), 0) FROM rewards r WHERE r.episode_id = t.episode_id AND r.turn_index = t.turn_index) AS score
    FROM episodes e JOIN turns t USING (episode_id) WHERE e.run_id = ${runId} AND e.step = ${step} AND e.split = 'train'
    ORDER BY e.episode_id, t.turn_index`;
  const sets = new Map<string, number[]>();
  for (const r of rows) if (r.status !== 'failed') sets.set(`${r.group_index}/${r.agent}`, [...(sets.get(`${r.group_index}/${r.agent}`) ?? []), r.score]);
  return rows.map((r) => {
    const s = sets.get(`${r.group_index}/${r.agent}`) ?? [];
    const m = s.length === 1 ? 0 : s.reduce((a, b) => a + b, 0) / s.length;
    const std = s.length === 1 ? 1 : Math.sqrt(s.reduce((a, b) => a + (b - m) ** 2, 0) / (s.length - 1));
    return { id: `${r.episode_id}#${r.turn_index}`, stored: r.advantage as number | null, want: r.status === 'failed' ? null : (r.score - m) / (std + 1e-6) };
  });
}

function assertAdvantages(turns: Awaited<ReturnType<typeof advantagesOf>>) {
  assert.ok(turns.length > 0);
  for (const t of turns) {
    if (t.want === null) assert.equal(t.stored, null, t.id);
    else assert.ok(t.stored !== null && Math.abs(t.stored - t.want) < 1e-9, `${t.id}: stored ${t.stored}, by hand ${t.want}`);
  }
}

/** What an asynchronous run's update stores per model (update) and agent (train) besides a synchronous run's metrics. */
const OFF_POLICY = ['staleness', 'isWeight.mean', 'isWeight.max', 'isWeight.truncated', 'isWeight.masked', 'mismatch_kl'];

describe('dashboard API', () => {
  let h: Harness;
  let dash: Dashboard;
  const runId = 'dash-api-1';
  before(async () => {
    ({ h, dash } = await runAndServe(runId));
  });
  after(async () => {
    await dash?.close();
    await h?.shutdown();
  });

  it('lists runs with step, eval success and duration, filtered by team and status', async () => {
    const { status, body } = await getJson(`${dash.url}/api/runs`);
    assert.equal(status, 200);
    assert.equal(body.total, 1);
    const [r] = body.runs;
    assert.equal(r.runId, runId);
    assert.equal(r.team, 'math');
    assert.equal(r.status, 'completed');
    assert.equal(r.step, RUN.steps);
    assert.equal(r.steps, RUN.steps);
    const [ev] = await h.db
      .sql`SELECT value FROM metrics WHERE run_id = ${runId} AND kind = 'eval' AND scope = 'team' AND name = 'success' AND step = ${RUN.steps}`;
    assert.equal(r.evalStep, RUN.steps);
    assert.equal(r.evalSuccess, ev!.value);
    assert.ok(r.durationSeconds > 0);
    assert.equal((await getJson(`${dash.url}/api/runs?team=research`)).body.total, 0);
    assert.equal((await getJson(`${dash.url}/api/runs?status=running`)).body.runs.length, 0);
    assert.equal((await getJson(`${dash.url}/api/runs?team=math&status=completed`)).body.runs.length, 1);
    assert.equal((await getJson(`${dash.url}/api/runs?offset=1`)).body.runs.length, 0);
  });

  it('gives a run with its events, and its metric rows exactly as stored, page by page', async () => {
    const detail = await getJson(`${dash.url}/api/runs/${runId}`);
    assert.equal(detail.status, 200);
    assert.equal(detail.body.config.steps, RUN.steps);
    assert.deepEqual(detail.body.stalledAgents, [], 'every agent of a healthy run still learns');
    const events = await h.db.sql`SELECT kind, step FROM run_events WHERE run_id = ${runId} ORDER BY id`;
    assert.deepEqual(
      detail.body.events.map((e: any) => [e.kind, e.step]),
      events.map((e) => [e.kind, e.step]),
    );

    const stored = await h.db.sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${runId} ORDER BY step, kind, scope, name`;
    assert.ok(stored.length > 40, `a real run has many metric rows (${stored.length})`);
    const pageSize = 17;
    const got: any[] = [];
    let offset: number | null = 0;
    let pages = 0;
    while (offset !== null) {
      const { body }: { body: any } = await getJson(`${dash.url}/api/runs/${runId}/metrics?limit=${pageSize}&offset=${offset}`);
      assert.ok(body.metrics.length <= pageSize);
      got.push(...body.metrics);
      offset = body.nextOffset;
      pages++;
    }
    assert.equal(pages, Math.ceil(stored.length / pageSize));
    assert.deepEqual(
      got,
      stored.map((r) => ({ ...r })),
    );
    const settings = await h.db.sql`SELECT step, settings FROM steps WHERE run_id = ${runId} ORDER BY step`;
    const lr = settings.flatMap((r) => Object.entries(r.settings as Record<string, { lr: number }>).map(([model, s]) => ({ step: r.step, model, lr: s.lr })));
    assert.ok(lr.length >= RUN.steps);
    assert.deepEqual((await getJson(`${dash.url}/api/runs/${runId}/metrics`)).body.lr, lr);
    const from1 = (await getJson(`${dash.url}/api/runs/${runId}/metrics?fromStep=1&kind=eval&limit=${MAX_LIMIT}`)).body.metrics;
    assert.deepEqual(
      from1,
      stored.filter((r) => r.step >= 1 && r.kind === 'eval').map((r) => ({ ...r })),
    );
  });

  it("lists a step's episodes with their summed reward, filtered by status, task and reward", async () => {
    const { body } = await getJson(`${dash.url}/api/runs/${runId}/steps/0/episodes?limit=${MAX_LIMIT}`);
    assert.equal(body.total, RUN.groupsPerStep * RUN.groupSize);
    const sums = await h.db.sql`
      SELECT e.episode_id, coalesce(sum(r.value), 0) AS total FROM episodes e LEFT JOIN rewards r USING (episode_id)
      WHERE e.run_id = ${runId} AND e.step = 0 AND e.split = 'train' GROUP BY e.episode_id`;
    const want = new Map(sums.map((s) => [s.episode_id, s.total]));
    for (const e of body.episodes) assert.equal(e.reward, want.get(e.episodeId), e.episodeId);
    const task = body.episodes[0].taskId;
    const byTask = (await getJson(`${dash.url}/api/runs/${runId}/steps/0/episodes?task=${encodeURIComponent(task)}`)).body;
    assert.equal(byTask.total, RUN.groupSize);
    assert.ok(byTask.episodes.every((e: any) => e.taskId === task));
    const threshold = [...want.values()].sort((a, b) => a - b)[Math.floor(want.size / 2)];
    const high = (await getJson(`${dash.url}/api/runs/${runId}/steps/0/episodes?minReward=${threshold}`)).body;
    assert.equal(high.total, [...want.values()].filter((v) => v >= threshold).length);
    const completed = (await getJson(`${dash.url}/api/runs/${runId}/steps/0/episodes?status=completed`)).body;
    const { n } = (
      await h.db.sql`SELECT count(*)::int AS n FROM episodes WHERE run_id = ${runId} AND step = 0 AND split = 'train' AND status = 'completed'`
    )[0]!;
    assert.equal(completed.total, n);
    const evals = (await getJson(`${dash.url}/api/runs/${runId}/steps/0/episodes?split=eval`)).body;
    assert.equal(evals.total, RUN.evalTasks);
    const paged = (await getJson(`${dash.url}/api/runs/${runId}/steps/0/episodes?limit=3&offset=3`)).body;
    assert.deepEqual(
      paged.episodes.map((e: any) => e.episodeId),
      body.episodes.slice(3, 6).map((e: any) => e.episodeId),
    );
  });

  it('gives an episode with its turns (tokens, log-probs, loss mask), rewards and turn graph', async () => {
    const [ep] = await h.db.sql`SELECT episode_id FROM episodes WHERE run_id = ${runId} AND split = 'train' ORDER BY episode_id LIMIT 1`;
    const { status, body } = await getJson(`${dash.url}/api/episodes/${encodeURIComponent(ep!.episode_id)}`);
    assert.equal(status, 200);
    const turns = await h.db
      .sql`SELECT turn_index, agent, parents, context_tokens, response_tokens, logprobs, loss_mask FROM turns WHERE episode_id = ${ep!.episode_id} ORDER BY turn_index`;
    const calls = await h.db.sql`SELECT count(*)::int AS n FROM tool_calls WHERE episode_id = ${ep!.episode_id}`;
    assert.equal(body.turns.length, turns.length);
    for (const [i, t] of turns.entries()) {
      assert.deepEqual(body.turns[i].responseTokens, t.response_tokens);
      assert.deepEqual(body.turns[i].logprobs, t.logprobs);
      assert.deepEqual(body.turns[i].lossMask, t.loss_mask);
      assert.equal(body.turns[i].agent, t.agent);
    }
    // The advantage each turn received in its step's update, as stored.
    const stored = await h.db.sql`SELECT advantage FROM turns WHERE episode_id = ${ep!.episode_id} ORDER BY turn_index`;
    assert.deepEqual(
      body.turns.map((t: any) => t.advantage),
      stored.map((t) => t.advantage),
    );
    assert.equal(body.graph.nodes.length, turns.length + calls[0]!.n);
    assert.equal(body.graph.edges.length, turns.reduce((s, t) => s + t.parents.length, 0) + calls[0]!.n);
  });

  it("keeps each trained turn's advantage with its step's update (batched), none on eval turns", async () => {
    for (let step = 0; step < RUN.steps; step++) assertAdvantages(await advantagesOf(h.db.sql, runId, step));
    const { n } = (
      await h.db
        .sql`SELECT count(*)::int AS n FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${runId} AND e.split = 'eval' AND t.advantage IS NOT NULL`
    )[0]!;
    assert.equal(n, 0);
  });

  it('stores per agent: episode length, and the advantage mean and std before and after normalization', async () => {
    const rows = await h.db.sql`SELECT step, scope, name, value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND scope <> 'team'`;
    const agents = [...new Set(rows.map((r) => r.scope))];
    assert.ok(agents.length >= 1);
    for (let step = 0; step < RUN.steps; step++) {
      for (const agent of agents) {
        const value = (name: string) => rows.find((r) => r.step === step && r.scope === agent && r.name === name)?.value;
        for (const name of ['episodeTurns', 'episodeTokens', 'score.mean', 'score.std', 'advantage.mean', 'advantage.std'])
          assert.equal(typeof value(name), 'number', `${agent} step ${step} ${name}`);
        // The agent's turns per episode, by hand from the store.
        const [len] = await h.db.sql`
          SELECT count(*)::float8 / count(DISTINCT t.episode_id) AS turns, sum(cardinality(t.response_tokens))::float8 / count(DISTINCT t.episode_id) AS tokens
          FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${runId} AND e.step = ${step} AND e.split = 'train' AND t.agent = ${agent}`;
        assert.ok(Math.abs(value('episodeTurns')! - len!.turns) < 1e-9);
        assert.ok(Math.abs(value('episodeTokens')! - len!.tokens) < 1e-9);
        // Before normalization: the mean score of the agent's turns (after: advantage.mean, checked turn by turn above).
        const [sc] = await h.db.sql`
          SELECT avg(coalesce((SELECT sum(r.value) FROM rewards r WHERE r.episode_id = t.episode_id AND r.turn_index = t.turn_index), 0)) AS mean
          FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${runId} AND e.step = ${step} AND e.split = 'train' AND e.status <> 'failed' AND t.agent = ${agent}`;
        assert.ok(Math.abs(value('score.mean')! - sc!.mean) < 1e-9, `${agent} step ${step}: score.mean ${value('score.mean')} vs ${sc!.mean}`);
      }
    }
  });

  it('links the run from its Current Details to its dashboard page', async () => {
    const meta = (await h.env.client.workflow.getHandle(runId).query('__temporal_workflow_metadata')) as { currentDetails?: string };
    assert.ok(meta.currentDetails?.includes(`[dashboard](${dash.url}/#/runs/${runId})`), meta.currentDetails);
  });

  it("keeps each trained turn's advantage in durable mode too", async () => {
    const durable = 'dash-api-durable';
    await h.env.client.workflow.execute('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: durable,
      args: [{ ...RUN, steps: 1, evalEvery: 0, rollout: 'durable' }],
    });
    const { mode } = (await h.db.sql`SELECT DISTINCT mode FROM episodes WHERE run_id = ${durable} AND split = 'train'`)[0]!;
    assert.equal(mode, 'durable');
    assertAdvantages(await advantagesOf(h.db.sql, durable, 0));
    const [ep] = await h.db
      .sql`SELECT episode_id FROM episodes WHERE run_id = ${durable} AND split = 'train' AND status <> 'failed' ORDER BY episode_id LIMIT 1`;
    const { body } = await getJson(`${dash.url}/api/episodes/${encodeURIComponent(ep!.episode_id)}`);
    assert.ok(body.turns.every((t: any) => typeof t.advantage === 'number'));
  });

  it("gives an asynchronous run's staleness and importance-weight rows as stored", async () => {
    const stale = 'dash-api-stale';
    await h.env.client.workflow.execute('trainingRun', { taskQueue: h.taskQueue, workflowId: stale, args: [{ ...RUN, evalEvery: 0, staleness: 1 }] });
    const got = (await getJson(`${dash.url}/api/runs/${stale}/metrics?limit=${MAX_LIMIT}`)).body.metrics.filter((r: any) => OFF_POLICY.includes(r.name));
    const stored = await h.db
      .sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${stale} AND name IN ${h.db.sql(OFF_POLICY)} ORDER BY step, kind, scope, name`;
    assert.deepEqual(
      got,
      stored.map((r) => ({ ...r })),
    );
    // Per step: the model's update row and one train row per agent of each, staleness min(step, 1) in all.
    assert.equal(stored.length, RUN.steps * OFF_POLICY.length * 3);
    for (const r of stored.filter((x) => x.name === 'staleness')) assert.equal(r.value, Math.min(r.step, 1), `${r.kind} ${r.scope} step ${r.step}`);
    // A synchronous run stores none of them.
    assert.equal(
      (await getJson(`${dash.url}/api/runs/${runId}/metrics?limit=${MAX_LIMIT}`)).body.metrics.filter((r: any) => OFF_POLICY.includes(r.name)).length,
      0,
    );
  });

  it('serves the page Vite built, and no file outside it', async () => {
    const page = await fetch(`${dash.url}/`);
    assert.equal(page.status, 200);
    const html = await page.text();
    const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    assert.ok(
      assets.some((a) => a.endsWith('.js')),
      html,
    );
    for (const a of assets) assert.equal((await fetch(dash.url + a)).status, 200, a);
    for (const p of ['/server.ts', '/assets/../server.ts', '/assets/%2e%2e%2fserver.ts', '/web/main.js', '/assets/none.js'])
      assert.equal((await fetch(dash.url + p)).status, 404, p);
  });

  it('answers unknown ids with 404 and malformed parameters with 400 naming the parameter', async () => {
    const cases: Array<[string, number, RegExp]> = [
      ['/api/runs/no-such-run', 404, /run "no-such-run" not found/],
      ['/api/runs/no-such-run/metrics', 404, /run "no-such-run" not found/],
      ['/api/runs/no-such-run/steps/0/episodes', 404, /run "no-such-run" not found/],
      ['/api/episodes/nope', 404, /episode "nope" not found/],
      ['/api/nothing', 404, /no such API path/],
      ['/api/runs?limit=abc', 400, /^limit: must be an integer/],
      [`/api/runs?limit=${MAX_LIMIT + 1}`, 400, new RegExp(`^limit: must be between 1 and ${MAX_LIMIT}`)],
      ['/api/runs?offset=-1', 400, /^offset: must be between 0/],
      ['/api/runs?status=sleeping', 400, /^status: must be one of running, paused/],
      [`/api/runs/${runId}/metrics?fromStep=x`, 400, /^fromStep: must be an integer/],
      [`/api/runs/${runId}/metrics?kind=loss`, 400, /^kind: must be one of train, eval, update/],
      [`/api/runs/${runId}/steps/first/episodes`, 400, /^step: must be an integer/],
      [`/api/runs/${runId}/steps/0/episodes?minReward=high`, 400, /^minReward: must be a finite number/],
      [`/api/runs/${runId}/steps/0/episodes?split=test`, 400, /^split: must be one of train, eval/],
      [`/api/runs/${runId}?eventLimit=0`, 400, /^eventLimit: must be between 1/],
    ];
    for (const [path, status, message] of cases) {
      const r = await getJson(dash.url + path);
      assert.equal(r.status, status, path);
      assert.match(r.body.error, message, path);
    }
  });
});
