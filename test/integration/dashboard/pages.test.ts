/**
 * The dashboard's pages in headless Chromium over a real run: the curves drawn
 * are the store's metric rows, the episode graph has a node per turn and tool
 * call and an edge per `after` and call, and a live run's curves gain points
 * without a reload. Screenshots go to .troupe/test-artifacts/.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Page } from 'playwright-core';
import { startDashboard, type Dashboard } from '../../../dashboard/server';
import { freePort } from '../../helpers';
import { pauseSignal, resumeSignal, statusQuery, stopSignal } from '../../../workflows/definitions';
import type { Harness } from '../../../testing/stack';
import { ARTIFACTS, browserSkipReason, launchBrowser } from './browser';
import { RUN, runAndServe } from './fixture';

const skip = browserSkipReason();

/** Symbols drawn as data (not legend) in one chart. */
const drawnPoints = (page: Page, selector: string) => page.locator(`${selector} .mark-symbol.role-mark path`).count();

/** A reward value as the episode page prints it (3 decimals unless whole). */
const fmtValue = (x: number) => (Number.isInteger(x) ? String(x) : x.toFixed(3));

/** The points a panel's view draws (smoothed `value`, stored `raw` where smoothing is on). */
const viewPoints = (page: Page, panel: string): Promise<{ x: number; series: string; value: number; raw?: number }[]> =>
  page.evaluate((p) => (globalThis as any).troupe.views[p].data('points').map((x: any) => ({ x: x.x, series: x.series, value: x.value, raw: x.raw })), panel);

/** Each turn of the episode page: its reward components (name, whether per-turn, text) and advantage. */
const shownTurns = (page: Page) =>
  // the page's DOM, typed loosely: the tests compile without the DOM library
  page.locator('.turn').evaluateAll((turns: any[]) =>
    turns.map((t) => ({
      turn: Number(t.dataset.turn),
      rewards: [...t.querySelectorAll('h4 .reward')].map((r: any) => [r.dataset.component, r.classList.contains('per-turn'), r.innerText]),
      // the per-turn components come last, just before the advantage
      beforeAdvantage: t.querySelector('h4 .advantage')?.previousElementSibling?.dataset.component,
      advantage: t.querySelector('h4 .advantage').innerText,
    })),
  );

async function open(page: Page, url: string) {
  await page.goto(url);
  await page.waitForFunction(() => (globalThis as any).troupe?.ready === true);
}

/** The off-policy panels of an asynchronous run: per panel, its metrics and what their series are suffixed with. */
const OFF_POLICY_PANELS: Record<string, Record<string, string>> = {
  staleness: { staleness: '' },
  'importance weight': { 'isWeight.mean': ' mean', 'isWeight.max': ' max' },
  'tokens truncated / masked': { 'isWeight.truncated': ' truncated', 'isWeight.masked': ' masked' },
  'mismatch KL': { mismatch_kl: '' },
};

/** A partial-rollout run's panels (team rows): per panel, its metrics and their series. */
const PARTIAL_PANELS: Record<string, Record<string, string>> = {
  'carried into the next step': { 'partial.carriedEpisodes': 'episodes', 'partial.carriedGroups': 'groups' },
  "carried episodes' age (steps)": { 'partial.carriedMaxAge': 'oldest', 'partial.trainedMaxAge': 'oldest trained' },
  'rollout tokens (sampled / served from the store)': { 'partial.generatedTokens': 'sampled', 'partial.replayedTokens': 'served from the store' },
  'partial rollout: groups run and lockstep rounds': { 'partial.groups': 'groups', 'partial.rounds': 'rounds', 'partial.heldGroups': 'held at maxCarrySteps' },
};

describe('dashboard pages', { skip }, () => {
  let h: Harness;
  let dash: Dashboard;
  let browser: Awaited<ReturnType<typeof launchBrowser>>;
  let page: Page;
  const runId = 'dash-pages-1';
  before(async () => {
    ({ h, dash } = await runAndServe(runId));
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => process.stderr.write(`page error: ${e.message}\n`));
  });
  after(async () => {
    await browser?.close();
    await dash?.close();
    await h?.shutdown();
  });

  it('lists the run with its step and eval success', async () => {
    await open(page, `${dash.url}/#/`);
    const row = page.locator(`#runs tr[data-run="${runId}"]`);
    assert.equal(await row.count(), 1);
    const cells = await row.locator('td').allInnerTexts();
    assert.equal(cells[1], 'math');
    assert.equal(cells[2], 'completed');
    assert.equal(cells[3], `${RUN.steps} / ${RUN.steps}`);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-runs.png') });
  });

  it("draws a run's curves with one point per stored metric row", async () => {
    await open(page, `${dash.url}/#/runs/${runId}`);
    const rewards = await h.db
      .sql`SELECT step, scope, name, value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND name LIKE 'reward.%' ORDER BY step, scope, name`;
    assert.ok(rewards.length > 0);
    const drawn = await page.evaluate(() => (globalThis as any).troupe.views['reward components'].data('points').map((p: any) => [p.x, p.series, p.value]));
    assert.deepEqual(drawn.sort(), rewards.map((r) => [r.step + 1, `${r.scope} ${r.name.slice('reward.'.length)}`, r.value]).sort());
    assert.equal(await drawnPoints(page, '[data-panel="reward components"]'), rewards.length);
    const evals = await h.db
      .sql`SELECT step, value FROM metrics WHERE run_id = ${runId} AND kind = 'eval' AND scope = 'team' AND name = 'success' ORDER BY step`;
    assert.equal(evals.length, RUN.steps + 1, 'an eval before training and after each step');
    assert.equal(await drawnPoints(page, '[data-panel="eval success"]'), evals.length);
    assert.equal(await page.locator('[data-panel="eval success"] .mark-line').count(), 0, 'evals are points, not a line');
    const grad = await h.db.sql`SELECT count(*)::int AS n FROM metrics WHERE run_id = ${runId} AND name = 'gradNorm'`;
    assert.equal(await drawnPoints(page, '[data-panel="gradNorm"]'), grad[0]!.n);
    const lr = await h.db.sql`SELECT count(*)::int AS n FROM steps s, jsonb_each(s.settings) m WHERE s.run_id = ${runId} AND m.value ? 'lr'`;
    assert.ok(lr[0]!.n >= RUN.steps);
    assert.equal(await drawnPoints(page, '[data-panel="learning rate"]'), lr[0]!.n);
    for (const panel of ['truncated / failed shares', 'entropy', 'episode length (turns)', 'episode length (tokens)'])
      assert.equal(await page.locator(`[data-panel="${panel}"]`).count(), 1, panel);
    // Advantage mean and std per agent, before (the scores) and after normalization, one point per stored row.
    for (const [panel, names] of [
      ['advantage mean', ['score.mean', 'advantage.mean']],
      ['advantage std', ['score.std', 'advantage.std']],
    ] as const) {
      const rows = await h.db
        .sql`SELECT step, scope, name, value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND name IN ${h.db.sql(names as unknown as string[])}`;
      const drawnRows = await page.evaluate((p) => (globalThis as any).troupe.views[p].data('points').map((x: any) => [x.x, x.series, x.value]), panel);
      const label = (name: string) => (name.startsWith('score.') ? ' before normalization' : ' after');
      assert.deepEqual(drawnRows.sort(), rows.map((r) => [r.step + 1, `${r.scope}${label(r.name)}`, r.value]).sort(), panel);
      assert.ok(rows.length >= 2 * RUN.steps, panel);
    }
    const turnsLen = await h.db.sql`SELECT count(*)::int AS n FROM metrics WHERE run_id = ${runId} AND name = 'episodeTurns'`;
    assert.equal(await drawnPoints(page, '[data-panel="episode length (turns)"]'), turnsLen[0]!.n);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-run.png'), fullPage: true });
  });

  it('groups the panels in sections, each a heading over a grid of its panels', async () => {
    await open(page, `${dash.url}/#/runs/${runId}`);
    const sections = await page.evaluate(() =>
      [...(globalThis as any).document.querySelectorAll('section.section:not([hidden])')].map((s: any) => ({
        heading: s.querySelector('h3').textContent,
        grid: (globalThis as any).getComputedStyle(s.querySelector('.panels')).display,
        panels: [...s.querySelectorAll('[data-panel]')].map((p: any) => p.dataset.panel),
      })),
    );
    assert.deepEqual(
      sections.map((s) => s.heading),
      ['Rewards and eval', 'Per-agent policy', 'Optimization', 'System'],
      'a synchronous run has no off-policy section',
    );
    assert.ok(sections.every((s) => s.grid === 'grid'));
    // Every chart has a finite size (an empty legend once made Vega draw one 1.8e308 px tall, and the page hung).
    const sizes = await page
      .locator('details.panel .chart svg')
      .evaluateAll((svgs: any[]) => svgs.map((x) => [Number(x.getAttribute('width')), Number(x.getAttribute('height'))]));
    assert.ok(sizes.length > 0 && sizes.flat().every((v) => v > 0 && v < 2000), JSON.stringify(sizes));
    const inSection = (heading: string) => sections.find((s) => s.heading === heading)!.panels;
    const has = (heading: string, panels: string[]) =>
      assert.deepEqual(
        panels.filter((p) => !inSection(heading).includes(p)),
        [],
        heading,
      );
    has('Rewards and eval', ['reward components', 'eval success', 'truncated / failed shares']);
    has('Per-agent policy', ['entropy', 'advantage mean', 'advantage std', 'episode length (turns)', 'episode length (tokens)']);
    has('Optimization', ['loss', 'gradNorm', 'learning rate', 'clipFraction']);
    has('System', ['step time split (s)', 'update tokens/s']);
    // The step's time split: the rollout's seconds and each model's update, in seconds, one point per stored row.
    const timing = await h.db.sql`SELECT step, scope, name, value FROM metrics WHERE run_id = ${runId} AND name IN ('rolloutSeconds', 'updateMs')`;
    assert.deepEqual(
      (await viewPoints(page, 'step time split (s)')).map((p) => [p.x, p.series, p.value]).sort(),
      timing.map((r) => [r.step + 1, r.name === 'updateMs' ? `${r.scope} update` : 'rollout', r.name === 'updateMs' ? r.value / 1000 : r.value]).sort(),
    );
  });

  it('folds the panels whose every series is constant, with the value in a note', async () => {
    await open(page, `${dash.url}/#/runs/${runId}`);
    // This run never changes its learning rate: that panel is folded and says the value.
    const lrs = await h.db
      .sql`SELECT DISTINCT (m.value->>'lr')::float8 AS lr FROM steps s, jsonb_each(s.settings) m WHERE s.run_id = ${runId} AND m.value ? 'lr'`;
    assert.equal(lrs.length, 1);
    const lrPanel = page.locator('details.panel[data-panel="learning rate"]');
    assert.equal(await lrPanel.evaluate((d: any) => d.open), false);
    assert.equal(await lrPanel.locator('.chart svg').isVisible(), false, 'folded: the chart is hidden');
    assert.equal(await lrPanel.locator('summary .note').innerText(), `constant: ${lrs[0]!.lr}`);
    // Every panel: folded exactly when each of its series keeps one stored value over several steps.
    const panels = await page.evaluate(() =>
      [...(globalThis as any).document.querySelectorAll('details.panel')].map((d: any) => ({ title: d.dataset.panel, open: d.open })),
    );
    let folded = 0;
    for (const { title, open: isOpen } of panels) {
      const points = await viewPoints(page, title);
      const values = new Map<string, Set<number>>();
      for (const p of points) values.set(p.series, (values.get(p.series) ?? new Set()).add(p.raw ?? p.value));
      const constant = new Set(points.map((p) => p.x)).size > 1 && [...values.values()].every((v) => v.size === 1);
      assert.equal(isOpen, !constant, title);
      folded += constant ? 1 : 0;
    }
    assert.ok(folded >= 1 && folded < panels.length, `${folded} of ${panels.length} folded`);
    // Opened by a click, it shows its chart.
    await lrPanel.locator('summary').click();
    assert.equal(await lrPanel.evaluate((d: any) => d.open), true);
    assert.equal(await lrPanel.locator('.chart svg').isVisible(), true);
    assert.equal(await drawnPoints(page, '[data-panel="learning rate"]'), (await viewPoints(page, 'learning rate')).length);
  });

  it('keeps coinciding series apart (a dash pattern per series) and legend labels whole', async () => {
    await open(page, `${dash.url}/#/runs/${runId}`);
    for (const panel of ['advantage mean', 'advantage std']) {
      const series = [...new Set((await viewPoints(page, panel)).map((p) => p.series))].sort();
      assert.ok(series.length >= 4, `${panel}: before and after, per agent`);
      // Each series' line has its own dash pattern, so one drawn on another still shows.
      const dashes = await page
        .locator(`[data-panel="${panel}"] .mark-line.role-mark path`)
        .evaluateAll((ps: any[]) => ps.map((p) => p.getAttribute('stroke-dasharray') ?? 'solid'));
      assert.equal(dashes.length, series.length, panel);
      assert.equal(new Set(dashes).size, series.length, `${panel}: ${dashes.join(' | ')}`);
      // The legend names each series in full (e.g. "solver before normalization"), nothing cut with an ellipsis.
      const labels = await page.locator(`[data-panel="${panel}"] .role-legend-label text`).allTextContents();
      assert.deepEqual([...new Set(labels)].sort(), series, panel);
    }
  });

  it("shows the run's config and its CLI and Temporal commands", async () => {
    await open(page, `${dash.url}/#/runs/${runId}`);
    const [stored] = await h.db.sql`SELECT config FROM runs WHERE run_id = ${runId}`;
    assert.deepEqual(JSON.parse(await page.locator('#run-config').innerText()), stored!.config);
    const commands = (await page.locator('#run-commands').innerText()).split('\n');
    for (const c of ['pause', 'resume', 'stop', 'status']) assert.ok(commands.includes(`npx troupe ${c} ${runId}`), c);
    assert.ok(commands.includes(`npx troupe set ${runId} --lr 0.0005`));
    assert.ok(commands.includes(`temporal workflow describe --address ${h.env.address} --namespace default --workflow-id ${runId}`), commands.join('\n'));
  });

  it('smooths the curves by the chosen EMA and draws them on a wall-time axis', async () => {
    await open(page, `${dash.url}/#/runs/${runId}`);
    const panel = 'step time split (s)';
    const rows = await h.db.sql`SELECT step, scope, value FROM metrics WHERE run_id = ${runId} AND name = 'rolloutSeconds' ORDER BY step`;
    assert.ok(rows.length >= 2 && new Set(rows.map((r) => r.value)).size > 1, 'rollout times that differ');
    const rollout = async () => (await viewPoints(page, panel)).filter((p) => p.series === 'rollout').sort((a, b) => a.x - b.x);
    assert.deepEqual(
      (await rollout()).map((p) => p.value),
      rows.map((r) => r.value),
    );
    await page.locator('#smoothing').selectOption('0.9');
    await page.waitForFunction(() => (globalThis as any).troupe?.ready === true);
    // Debiased EMA: s_t = 0.9 s_{t-1} + 0.1 v_t, divided by 1 - 0.9^t.
    let s = 0;
    const expected = rows.map((r, i) => (s = 0.9 * s + 0.1 * r.value) / (1 - 0.9 ** (i + 1)));
    const smoothed = await rollout();
    assert.deepEqual(
      smoothed.map((p) => p.raw),
      rows.map((r) => r.value),
    );
    smoothed.forEach((p, i) => assert.ok(Math.abs(p.value - expected[i]!) < 1e-9, `${p.value} vs ${expected[i]}`));
    assert.notDeepEqual(
      smoothed.map((p) => p.value),
      rows.map((r) => r.value),
    );
    // The drawn line follows: its path changed with the values.
    await page.locator('#xaxis').selectOption('wall');
    await page.waitForFunction(() => (globalThis as any).troupe?.ready === true);
    const [run] = await h.db.sql`SELECT created_at FROM runs WHERE run_id = ${runId}`;
    const steps = await h.db.sql`SELECT step, finished_at FROM steps WHERE run_id = ${runId} ORDER BY step`;
    const at = new Map(steps.map((x) => [x.step + 1, (x.finished_at.getTime() - run!.created_at.getTime()) / 1000]));
    assert.deepEqual(
      (await rollout()).map((p) => p.x),
      rows.map((r) => at.get(r.step + 1)),
    );
    assert.match((await page.locator(`[data-panel="${panel}"] .role-axis-title text`).first().textContent()) ?? '', /seconds since the run started/);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-run-options.png'), fullPage: true });
  });

  it('draws an episode graph with a node per turn and tool call and an edge per after and call', async () => {
    const [ep] = await h.db.sql`
      SELECT e.episode_id, (SELECT count(*)::int FROM turns t WHERE t.episode_id = e.episode_id) AS turns,
        (SELECT coalesce(sum(cardinality(parents)), 0)::int FROM turns t WHERE t.episode_id = e.episode_id) AS afters,
        (SELECT count(*)::int FROM tool_calls c WHERE c.episode_id = e.episode_id) AS calls
      FROM episodes e WHERE e.run_id = ${runId} AND e.split = 'train' ORDER BY turns DESC, e.episode_id LIMIT 1`;
    assert.ok(ep!.turns >= 2, 'an episode with several turns');
    await open(page, `${dash.url}/#/episodes/${encodeURIComponent(ep!.episode_id)}`);
    assert.equal(await drawnPoints(page, '#graph'), ep!.turns + ep!.calls);
    assert.equal(await page.locator('#graph .mark-rule.role-mark line').count(), ep!.afters + ep!.calls);
    assert.equal(await page.locator('.turn').count(), ep!.turns);
    // Each turn shows the advantage it received in its step's update.
    const advantages = await h.db.sql`SELECT advantage FROM turns WHERE episode_id = ${ep!.episode_id} ORDER BY turn_index`;
    assert.ok(
      advantages.every((a) => typeof a.advantage === 'number'),
      'a train turn of a completed step has its advantage',
    );
    assert.deepEqual(
      await page.locator('.turn .advantage').allInnerTexts(),
      advantages.map((a) => (a.advantage as number).toFixed(4)),
    );
    // Every generated token is shown, shaded by its loss mask.
    const { trained, untrained } = (
      await h.db.sql`
      SELECT sum((SELECT count(*) FROM unnest(loss_mask) m WHERE m = 1))::int AS trained,
             sum((SELECT count(*) FROM unnest(loss_mask) m WHERE m = 0))::int AS untrained
      FROM turns WHERE episode_id = ${ep!.episode_id}`
    )[0]!;
    assert.equal(await page.locator('#turns .tok.masked').count(), trained);
    assert.equal(await page.locator('#turns .tok.unmasked').count(), untrained);
    // The task's data and what the episode returned, as stored.
    const [stored] = await h.db.sql`SELECT task, outcome FROM episodes WHERE episode_id = ${ep!.episode_id}`;
    assert.ok(stored!.outcome !== null && typeof stored!.task === 'object');
    assert.deepEqual(JSON.parse(await page.locator('#episode-task').innerText()), stored!.task);
    assert.deepEqual(JSON.parse(await page.locator('#episode-outcome').innerText()), stored!.outcome);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-episode.png'), fullPage: true });
  });

  it("adds a live run's new points without a reload", async () => {
    const live = 'dash-live-1';
    const handle = await h.env.client.workflow.start('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: live,
      // Far more steps than the test waits for, so the run is still live at the pause; the stop signal ends it.
      args: [{ ...RUN, steps: 100_000, evalEvery: 0 }],
    });
    const until = async (what: string, f: () => Promise<boolean>) => {
      const deadline = Date.now() + 120_000;
      while (!(await f())) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    };
    const trainRows = async () =>
      (await h.db.sql`SELECT count(*)::int AS n FROM metrics WHERE run_id = ${live} AND kind = 'train' AND name LIKE 'reward.%'`)[0]!.n as number;
    await until('the first step', async () => (await trainRows()) > 0);
    await open(page, `${dash.url}/#/runs/${live}`);
    await page.evaluate(() => ((globalThis as any).notReloaded = true));
    const selector = '[data-panel="reward components"]';
    const first = await drawnPoints(page, selector);
    assert.ok(first > 0);
    await until('more points on the page', async () => (await drawnPoints(page, selector)) > first);
    assert.equal(await page.evaluate(() => (globalThis as any).notReloaded), true, 'the page was not reloaded');
    // A pause and resume appear as an event rule on the curves' step axis, also without a reload.
    await handle.signal(pauseSignal);
    await until('the pause', async () => (await handle.query(statusQuery)).status === 'paused');
    await handle.signal(resumeSignal);
    const eventRules = (kind: string) =>
      page.evaluate(([p, k]) => (globalThis as any).troupe.views[p].data('events').filter((e: any) => e.kind === k).length, [
        'reward components',
        kind,
      ] as const);
    await until('the pause and resume on the curves', async () => (await eventRules('paused')) === 1 && (await eventRules('resumed-from-pause')) === 1);
    assert.equal(
      await page.locator(`${selector} .mark-rule.role-mark line`).count(),
      (await h.db.sql`SELECT count(*)::int AS n FROM run_events WHERE run_id = ${live}`)[0]!.n,
    );
    assert.equal(await page.evaluate(() => (globalThis as any).notReloaded), true, 'the page was not reloaded');
    // The events table shows each event's whole detail, wrapped inside the page's width.
    const stored = await h.db.sql`SELECT detail FROM run_events WHERE run_id = ${live} ORDER BY id`;
    const cells = page.locator('#events td.detail');
    assert.deepEqual(
      (await cells.allInnerTexts()).map((t) => JSON.parse(t)),
      stored.map((e) => e.detail),
    );
    assert.equal(await cells.first().evaluate((td: any) => (globalThis as any).getComputedStyle(td).whiteSpace), 'normal');
    await handle.signal(stopSignal);
    await handle.result();
    // After the run's end the page catches up with everything stored.
    const total = await trainRows();
    await until('the page to show every stored point', async () => (await drawnPoints(page, selector)) === total);
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-live.png'), fullPage: true });
  });

  it('refuses controls without the token, and shows none where the dashboard has no token', async () => {
    await open(page, `${dash.url}/#/runs/${runId}`);
    assert.equal(await page.locator('#controls button').count(), 0);
    assert.match(await page.locator('#controls').innerText(), /Controls are off/);
    const guarded = await startDashboard({ sql: h.db.sql, port: await freePort(), client: h.env.client, token: 'page-token' });
    try {
      await open(page, `${guarded.url}/#/runs/${runId}`);
      for (const token of ['', 'wrong']) {
        await page.locator('#token').fill(token);
        await page.locator('#controls button[data-c="pause"]').click();
        await page.waitForFunction(() => (globalThis as any).document.getElementById('ctlmsg').textContent !== '');
        assert.match(await page.locator('#ctlmsg').innerText(), /controls need the header "Authorization: Bearer/);
        await page.evaluate(() => ((globalThis as any).document.getElementById('ctlmsg').textContent = ''));
      }
      await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-controls.png') });
      const events = await h.db.sql`SELECT count(*)::int AS n FROM run_events WHERE run_id = ${runId} AND kind LIKE '%pause%'`;
      assert.equal(events[0]!.n, 0, 'nothing reached the run');
    } finally {
      await guarded.close();
    }
  });

  it("draws an asynchronous run's staleness and importance weights, one point per stored row; a synchronous run has no such panels", async () => {
    const stale = 'dash-pages-stale';
    await h.env.client.workflow.execute('trainingRun', { taskQueue: h.taskQueue, workflowId: stale, args: [{ ...RUN, evalEvery: 0, staleness: 1 }] });
    await open(page, `${dash.url}/#/runs/${stale}`);
    for (const [panel, names] of Object.entries(OFF_POLICY_PANELS)) {
      const rows = await h.db.sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${stale} AND name IN ${h.db.sql(Object.keys(names))}`;
      assert.equal(rows.length, RUN.steps * Object.keys(names).length * 3, `${panel}: the model and both agents, each step`);
      const drawn = await page.evaluate((p) => (globalThis as any).troupe.views[p].data('points').map((x: any) => [x.x, x.series, x.value]), panel);
      const series = (r: (typeof rows)[number]) => `${r.scope}${r.kind === 'update' ? ' (model)' : ''}${names[r.name]}`;
      assert.deepEqual(drawn.sort(), rows.map((r) => [r.step + 1, series(r), r.value]).sort(), panel);
      assert.equal(await drawnPoints(page, `[data-panel="${panel}"]`), rows.length, panel);
    }
    // The staleness histogram: a series per agent (and model) and lag; k = 1 gives lag 0 at step 0, lag 1 after.
    const lags = await h.db.sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${stale} AND name LIKE 'staleness.tokens.%'`;
    assert.equal(lags.length, RUN.steps * 3, 'one lag per step, for the model and both agents');
    for (const r of lags) assert.equal(r.name, `staleness.tokens.${Math.min(r.step, 1)}`);
    const histogram = await page.evaluate(() =>
      (globalThis as any).troupe.views['tokens by staleness'].data('points').map((x: any) => [x.x, x.series, x.value]),
    );
    const lagSeries = (r: (typeof lags)[number]) => `${r.scope}${r.kind === 'update' ? ' (model)' : ''} lag ${r.name.slice('staleness.tokens.'.length)}`;
    assert.deepEqual(histogram.sort(), lags.map((r) => [r.step + 1, lagSeries(r), r.value]).sort());
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-run-async.png'), fullPage: true });
    await open(page, `${dash.url}/#/runs/${runId}`);
    for (const panel of [...Object.keys(OFF_POLICY_PANELS), 'tokens by staleness', ...Object.keys(PARTIAL_PANELS)])
      assert.equal(await page.locator(`[data-panel="${panel}"]`).count(), 0, panel);
  });

  it("marks a chain episode's per-turn reward components and shows them next to each turn's advantage", async () => {
    const chain = 'dash-pages-chain';
    await h.env.client.workflow.execute('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: chain,
      args: [{ ...RUN, team: 'chain', steps: 1, evalEvery: 0 }],
    });
    // the episode with the most per-turn reward, so the values shown are not all 0
    const [ep] = await h.db.sql`
      SELECT e.episode_id FROM episodes e WHERE e.run_id = ${chain} AND e.split = 'train'
      ORDER BY (SELECT coalesce(sum(value), 0) FROM rewards r WHERE r.episode_id = e.episode_id AND r.per_turn) DESC, e.episode_id LIMIT 1`;
    await open(page, `${dash.url}/#/episodes/${encodeURIComponent(ep!.episode_id)}`);
    const stored = await h.db.sql`
      SELECT t.turn_index, t.advantage, r.component, r.value, r.per_turn
      FROM turns t JOIN rewards r ON r.episode_id = t.episode_id AND r.turn_index = t.turn_index
      WHERE t.episode_id = ${ep!.episode_id} ORDER BY t.turn_index, r.component`;
    // chain: four turns, each with its episode's 'final' and its own 'step'
    assert.deepEqual(
      stored.map((r) => [r.turn_index, r.component, r.per_turn]),
      [0, 1, 2, 3].flatMap((k) => [
        [k, 'final', false],
        [k, 'step', true],
      ]),
    );
    assert.deepEqual(
      await shownTurns(page),
      [0, 1, 2, 3].map((k) => {
        const row = (c: string) => stored.find((r) => r.turn_index === k && r.component === c)!;
        return {
          turn: k,
          rewards: [
            ['final', false, `final ${fmtValue(row('final').value)}`],
            ['step', true, `step ${fmtValue(row('step').value)} (turn)`],
          ],
          beforeAdvantage: 'step',
          advantage: (row('step').advantage as number).toFixed(4),
        };
      }),
    );
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-episode-chain.png'), fullPage: true });
  });

  it("shows each lookout turn's own reward terms and its advantage, for the walker and the lookout; stores their mean by turn position", async () => {
    const lookout = 'dash-pages-lookout';
    // The team's default estimator, turn-return: each turn its own advantage. Seed 4: its untrained
    // lookout vetoes 7 of the 80 proposals (seed 3's, one), so vetoes are there to show. Durable
    // rollout (an activity per turn), where the chain run above is batched: per-turn credit in both.
    await h.env.client.workflow.execute('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: lookout,
      args: [{ ...RUN, team: 'lookout', steps: 1, evalEvery: 0, seed: 4, rollout: 'durable' }],
    });
    // the episode with the most kinds, then the most, of non-zero per-turn rewards (closing moves, vetoes)
    const [ep] = await h.db.sql`
      SELECT e.episode_id FROM episodes e JOIN rewards r ON r.episode_id = e.episode_id AND r.per_turn AND r.value <> 0
      WHERE e.run_id = ${lookout} AND e.split = 'train'
      GROUP BY e.episode_id ORDER BY count(DISTINCT r.component) DESC, count(*) DESC, e.episode_id LIMIT 1`;
    await open(page, `${dash.url}/#/episodes/${encodeURIComponent(ep!.episode_id)}`);
    const turns = await h.db.sql`SELECT turn_index, agent, advantage FROM turns WHERE episode_id = ${ep!.episode_id} ORDER BY turn_index`;
    const rewards = await h.db.sql`
      SELECT turn_index, component, value, per_turn FROM rewards WHERE episode_id = ${ep!.episode_id} ORDER BY turn_index, component`;
    // the walker and the lookout take turns, at least the goal's distance (8) each
    assert.ok(turns.length >= 16, `${turns.length} turns`);
    const [stored] = await h.db.sql`SELECT mode FROM episodes WHERE episode_id = ${ep!.episode_id}`;
    assert.equal(stored!.mode, 'durable');
    turns.forEach((t, k) => assert.equal(t.agent, k % 2 === 0 ? 'walker' : 'lookout'));
    const own = { walker: ['closer'], lookout: ['blocked', 'caught'] } as Record<string, string[]>;
    for (const t of turns) {
      const mine = rewards.filter((r) => r.turn_index === t.turn_index);
      assert.deepEqual(
        mine.map((r) => [r.component, r.per_turn]),
        [['arrived', false], ...own[t.agent]!.map((c) => [c, true])],
        `turn ${t.turn_index} (${t.agent}): arrived for the episode, its role's terms per turn`,
      );
      assert.equal(typeof t.advantage, 'number', `turn ${t.turn_index} was trained on`);
    }
    // each role earned a per-turn reward somewhere in this episode, so the values shown are not all 0
    for (const agent of ['walker', 'lookout'])
      assert.ok(
        rewards.some((r) => r.per_turn && r.value !== 0 && turns[r.turn_index]!.agent === agent),
        `${agent} has a non-zero per-turn reward`,
      );
    // turn-level credit: a role's turns do not all share one advantage
    for (const agent of ['walker', 'lookout'])
      assert.ok(new Set(turns.filter((t) => t.agent === agent).map((t) => t.advantage)).size > 1, `${agent}'s advantages differ by turn`);
    assert.deepEqual(
      await shownTurns(page),
      turns.map((t) => {
        const value = (c: string) => rewards.find((r) => r.turn_index === t.turn_index && r.component === c)!.value as number;
        return {
          turn: t.turn_index,
          rewards: [['arrived', false, `arrived ${fmtValue(value('arrived'))}`], ...own[t.agent]!.map((c) => [c, true, `${c} ${fmtValue(value(c))} (turn)`])],
          beforeAdvantage: own[t.agent]!.at(-1),
          advantage: (t.advantage as number).toFixed(4),
        };
      }),
    );
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-episode-lookout.png'), fullPage: true });
    // The step's metric per agent and turn position (the role's k-th turns) is the mean of the stored turns' advantages.
    const trained = await h.db.sql`
      SELECT t.agent, row_number() OVER (PARTITION BY t.episode_id, t.agent ORDER BY t.turn_index) - 1 AS position, t.advantage
      FROM turns t JOIN episodes e ON e.episode_id = t.episode_id
      WHERE e.run_id = ${lookout} AND e.split = 'train' AND t.advantage IS NOT NULL`;
    const metrics = await h.db.sql`
      SELECT scope, name, value FROM metrics WHERE run_id = ${lookout} AND kind = 'train' AND name LIKE 'advantage.position.%'`;
    const expected = new Map<string, number[]>();
    for (const t of trained) {
      const key = `${t.agent} advantage.position.${t.position}`;
      expected.set(key, [...(expected.get(key) ?? []), t.advantage as number]);
    }
    assert.deepEqual(metrics.map((m) => `${m.scope} ${m.name}`).sort(), [...expected.keys()].sort());
    for (const m of metrics) {
      const xs = expected.get(`${m.scope} ${m.name}`)!;
      const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
      assert.ok(Math.abs((m.value as number) - mean) < 1e-9, `${m.scope} ${m.name}: ${m.value} vs ${mean}`);
    }
    for (const agent of ['walker', 'lookout']) assert.ok(metrics.filter((m) => m.scope === agent).length >= 8, `${agent}: a metric per turn position`);
  });

  it("draws a partial-rollout run's carried episodes, their age and tokens in the off-policy section, one point per stored row", async () => {
    const partial = 'dash-pages-partial';
    const config = {
      team: 'chain',
      teamOptions: { longTail: 0.5 },
      steps: 2,
      groupsPerStep: 2,
      groupSize: 2,
      evalEvery: 0,
      evalTasks: 4,
      seed: 5,
      partialRollouts: { overProvision: 2, minFinished: 1 },
    };
    await h.env.client.workflow.execute('trainingRun', { taskQueue: h.taskQueue, workflowId: partial, args: [config] });
    await open(page, `${dash.url}/#/runs/${partial}`);
    const offPolicy = await page.evaluate(() =>
      [...(globalThis as any).document.querySelectorAll('section[data-section="off-policy"]:not([hidden]) [data-panel]')].map((p: any) => p.dataset.panel),
    );
    assert.deepEqual(offPolicy, Object.keys(PARTIAL_PANELS), 'the off-policy section holds the partial-rollout panels only (staleness 0)');
    for (const [panel, names] of Object.entries(PARTIAL_PANELS)) {
      const rows = await h.db
        .sql`SELECT step, name, value FROM metrics WHERE run_id = ${partial} AND kind = 'train' AND scope = 'team' AND name IN ${h.db.sql(Object.keys(names))}`;
      assert.equal(rows.length, 2 * Object.keys(names).length, `${panel}: each metric, each step`);
      const drawn = await page.evaluate((p) => (globalThis as any).troupe.views[p].data('points').map((x: any) => [x.x, x.series, x.value]), panel);
      assert.deepEqual(drawn.sort(), rows.map((r) => [r.step + 1, names[r.name], r.value]).sort(), panel);
    }
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-run-partial.png'), fullPage: true });
  });

  it("overlays two runs' curves, checked in the runs list", async () => {
    await open(page, `${dash.url}/#/`);
    for (const id of [runId, 'dash-live-1']) await page.locator(`#runs tr[data-run="${id}"] input[name=cmp]`).check();
    await page.locator('#compare').click();
    await page.waitForFunction(() => (globalThis as any).location.hash.startsWith('#/compare') && (globalThis as any).troupe?.ready === true);
    const rows = await h.db
      .sql`SELECT run_id, count(*)::int AS n FROM metrics WHERE run_id IN (${runId}, 'dash-live-1') AND kind = 'train' AND name LIKE 'reward.%' GROUP BY run_id`;
    assert.equal(rows.length, 2);
    assert.equal(await drawnPoints(page, '[data-panel="reward components"]'), rows[0]!.n + rows[1]!.n);
    const series: string[] = await page.evaluate(
      () => [...new Set((globalThis as any).troupe.views['reward components'].data('points').map((p: any) => p.series))] as string[],
    );
    assert.ok(series.some((x) => x.startsWith(`${runId}: `)) && series.some((x) => x.startsWith('dash-live-1: ')), series.join(','));
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-compare.png'), fullPage: true });
  });
});
