// A run (#/runs/<id>): summary, controls, config and commands, live curves by section,
// events, and a step's episodes.
import type * as vega from 'vega';
import { constantNote, OTHER, onWallTime, panelsOf, SECTIONS, sectionOf, smooth, type LrRow, type MetricRow, type Point, type StepTime } from './curves';
import { api, config, fetchRunMetrics, temporalLink, type EpisodeRow, type RunEvent, type RunRetention, type RunSummary, type StalledAgent } from './data';
import { byId, crumbs, duration, esc, fmt, formStrings, main, message, polling, POLL_MS, render } from './page';
import { type CurveOptions, panelSpec, SMOOTHING } from './panel-spec';

/** The run's commands for the CLI and the Temporal CLI (the stack's own address and namespace). */
function commandsText(runId: string, c: { namespace: string; temporalAddress: string | null }): string {
  const q = (s: string) => (/^[\w.:@/-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);
  const run = q(runId);
  const temporal = `temporal workflow %s ${c.temporalAddress ? `--address ${q(c.temporalAddress)} ` : ''}--namespace ${q(c.namespace)} --workflow-id ${run}`;
  return [
    `npx troupe status ${run}`,
    `npx troupe pause ${run}`,
    `npx troupe resume ${run}`,
    `npx troupe stop ${run}`,
    `npx troupe set ${run} --lr 0.0005`,
    `npx troupe plot ${run}`,
    temporal.replace('%s', 'describe'),
    temporal.replace('%s', 'show'),
  ].join('\n');
}

/** The run page's frame: summary, controls, config and commands, curve options, sections, events and the episodes' filters. */
function runPageHtml(
  runId: string,
  runConfig: unknown,
  cfg: { namespace: string; temporalAddress: string | null },
  opts: CurveOptions,
  params: URLSearchParams,
  retention: RunRetention | null,
): string {
  return `
    <p id="summary"></p>
    <div class="controls" id="controls"></div>
    <div class="run-info">
      <details open><summary>config</summary><pre id="run-config">${esc(JSON.stringify(runConfig, null, 2))}</pre></details>
      <details open><summary>commands</summary><pre id="run-commands">${esc(commandsText(runId, cfg))}</pre></details>
    </div>
    <form class="filters" id="curve-options">smoothing (EMA) <select id="smoothing" name="smoothing">${SMOOTHING.map((a) => `<option value="${a}" ${a === opts.smoothing ? 'selected' : ''}>${a || 'off'}</option>`).join('')}</select>
      x axis <select id="xaxis" name="x"><option value="step">step</option><option value="wall" ${opts.x === 'wall' ? 'selected' : ''}>wall time</option></select>
      <small>panels whose every series is constant are folded (click to open)</small></form>
    <div id="sections">${[...SECTIONS, OTHER].map((s) => `<section class="section" data-section="${s.id}" hidden><h3>${esc(s.title)}</h3><div class="panels"></div></section>`).join('')}</div>
    <h3>Events</h3><table id="events" class="events"></table>
    <h3>Episodes</h3>${retention ? `\n    <p id="retention">${retentionText(retention)}</p>` : ''}
    <form class="filters" id="epfilters">step <input name="step" type="number" min="0" value="${esc(params.get('step') ?? '0')}" style="width:5em">
      split <select name="split"><option>train</option><option>eval</option></select>
      status <select name="status"><option></option><option>completed</option><option>truncated</option><option>failed</option></select>
      task <input name="task" size="10"> min reward <input name="minReward" size="5"> <button>show</button></form>
    <div id="episodes"></div>`;
}

/** "N training episodes pruned (policy ...)": what retention deleted of the run, as text for the page. */
function retentionText(r: RunRetention): string {
  return esc(
    `${r.trainEpisodes} training episode(s) pruned (${r.turns} turn(s); policy: ${r.policy}; last ${new Date(r.lastPrunedAt).toLocaleString()}); eval episodes are all kept.`,
  );
}

/** Agents that stopped learning, as `troupe train` names them (cli/summary.ts problemLines). */
function stalledHtml(stalled: readonly StalledAgent[]): string {
  return stalled
    .map(
      (a) =>
        `<br><span class="stalled">no learning signal: <b>${esc(a.agent)}</b> (model ${esc(a.model)}) for its last ${a.steps} steps (from step ${a.since}): ` +
        `every group's rewards were equal, at ${fmt(a.reward)} against ${fmt(a.firstReward)} at its first step; it cannot recover by itself</span>`,
    )
    .join('');
}

/** The server's live line for a rollout in flight (dashboard/server.ts liveProgress). */
type LiveProgress = { text: string } | null;

type InitSource = { run: string; model?: string; step?: number; version?: number };

/** The run config's lineage (run config fork, init, frozen; docs/running.md): a fork links to the run and step it came from. */
export function lineageHtml(runId: string, config: unknown): string {
  const c = (config ?? {}) as { fork?: { run: string; step: number }; init?: Record<string, InitSource>; frozen?: string[] };
  const link = (run: string) => `<a href="#/runs/${encodeURIComponent(run)}">${esc(run)}</a>`;
  const lines = [
    ...(c.fork
      ? [
          `<span id="run-fork">forked from ${link(c.fork.run)} at step ${c.fork.step}</span> · <a href="#/compare?runs=${encodeURIComponent(c.fork.run)},${encodeURIComponent(runId)}">curves with it, from the fork point</a>`,
        ]
      : []),
    ...Object.entries(c.init ?? {}).map(
      ([m, s]) =>
        `model ${esc(m)} starts from ${link(s.run)}${s.model ? ` model ${esc(s.model)}` : ''} ${s.step !== undefined ? `step ${s.step}` : `version ${s.version ?? 0}`}`,
    ),
    ...(c.frozen?.length ? [`frozen: ${c.frozen.map(esc).join(', ')}`] : []),
  ];
  return lines.map((l) => `<br>${l}`).join('');
}

export async function runPage(runId: string, params: URLSearchParams) {
  crumbs.innerHTML = `/ <a href="#/">runs</a> / ${esc(runId)}`;
  const detail = await api<{
    run: RunSummary;
    config: unknown;
    events: RunEvent[];
    progress: LiveProgress;
    retention: RunRetention | null;
    stalledAgents: StalledAgent[];
  }>(`/api/runs/${encodeURIComponent(runId)}`);
  const t = await temporalLink(runId);
  const cfg = await config();
  const r = detail.run;
  const opts: CurveOptions = { smoothing: Number(params.get('smoothing') ?? 0) || 0, x: params.get('x') === 'wall' ? 'wall' : 'step' };
  main.innerHTML = runPageHtml(runId, detail.config, cfg, opts, params, detail.retention);
  // progress: the rollout in flight, live from the workflow (the server's status query), while the run is open
  const summary = (run: RunSummary, progress: LiveProgress) =>
    (byId('summary').innerHTML =
      `team <b>${esc(run.team)}</b> · status <b id="run-status">${esc(run.status)}</b> · step ${run.step}${run.steps ? ' / ' + run.steps : ''} · eval success ${fmt(run.evalSuccess)} · ${duration(run.durationSeconds)}${t ? ` · <a href="${esc(t)}" target="_blank">Temporal UI</a>` : ''}` +
      lineageHtml(runId, detail.config) +
      stalledHtml(detail.stalledAgents) +
      (progress ? `<br><span id="run-progress">${esc(progress.text)}</span>` : ''));
  summary(r, detail.progress);
  controls(runId, cfg.controls);

  let metrics: MetricRow[] = [];
  let events = detail.events;
  let stepTimes: StepTime[] = [];
  let lrs: LrRow[] = [];
  const views = new Map<string, vega.View>();
  const eventRows = () =>
    events.map((e) => ({ x: opts.x === 'wall' ? (Date.parse(e.at) - Date.parse(r.startedAt)) / 1000 : e.step, step: e.step, kind: e.kind, at: e.at }));
  const drawEvents = () =>
    (byId('events').innerHTML =
      '<tr><th>step</th><th>event</th><th>at</th><th>detail</th></tr>' +
      events
        .map(
          (e) =>
            `<tr><td>${e.step}</td><td>${esc(e.kind)}</td><td>${new Date(e.at).toLocaleString()}</td><td class="detail"><code>${esc(JSON.stringify(e.detail))}</code></td></tr>`,
        )
        .join(''));
  drawEvents();

  async function fetchMetrics(fromStep: number) {
    const got = await fetchRunMetrics(runId, fromStep);
    lrs = [...lrs.filter((x) => x.step < fromStep), ...got.lr];
    stepTimes = [...stepTimes.filter((x) => x.step < fromStep), ...got.stepTimes];
    return got.rows;
  }
  /** A panel's points as the options draw them: on the chosen x axis, smoothed (evals never: they are single measurements). */
  const shown = (title: string, points: Point[]) => {
    const xs = opts.x === 'wall' ? onWallTime(points, stepTimes, r.startedAt) : points;
    return title === 'eval success' ? xs : smooth(xs, opts.smoothing);
  };
  // One drawing at a time: a poll and a change of options do not interleave.
  let drawing = Promise.resolve();
  const queue = (f: () => void | Promise<void>) => (drawing = drawing.catch((e) => console.warn('drawing failed', e)).then(f));
  const draw = () => queue(drawAll);
  async function drawAll() {
    for (const [title, stored] of panelsOf(metrics, lrs)) {
      const points = shown(title, stored);
      // Folded while every series is constant, until the user opens or closes it.
      const note = constantNote(stored) ?? '';
      let el = document.querySelector<HTMLDetailsElement>(`details.panel[data-panel="${CSS.escape(title)}"]`);
      if (!el) {
        el = document.createElement('details');
        el.className = 'panel';
        el.dataset.panel = title;
        el.innerHTML = `<summary><b>${esc(title)}</b> <span class="note"></span></summary><div class="chart"></div>`;
        el.addEventListener('toggle', () => {
          if (el!.open === Boolean(el!.dataset.folded)) el!.dataset.toggled = '1';
        });
        const section = document.querySelector(`section[data-section="${sectionOf(title)}"]`)!;
        section.querySelector('.panels')!.append(el);
        section.removeAttribute('hidden');
      }
      el.querySelector('.note')!.textContent = note;
      if (note) el.dataset.folded = '1';
      else delete el.dataset.folded;
      if (!el.dataset.toggled) el.open = !note;
      let view = views.get(title);
      // The first event: drawn anew, with the events' legend.
      if (view && events.length > 0 && view.data('events').length === 0) {
        view.finalize();
        el.querySelector('.chart')!.innerHTML = '';
        view = undefined;
      }
      if (view) {
        view.data('points', points).data('events', eventRows());
        await view.runAsync();
      } else views.set(title, await render(panelSpec(title, points, eventRows(), opts), el.querySelector('.chart')!, title));
    }
  }
  metrics = await fetchMetrics(-1);
  await draw();

  // Another smoothing or x axis: the same data drawn again (a new spec: the axis changes).
  const optionsForm = byId<HTMLFormElement>('curve-options');
  optionsForm.onchange = () => {
    opts.smoothing = Number(byId<HTMLSelectElement>('smoothing').value);
    opts.x = byId<HTMLSelectElement>('xaxis').value === 'wall' ? 'wall' : 'step';
    void queue(() => {
      for (const v of views.values()) v.finalize();
      views.clear();
      document.querySelectorAll('details.panel .chart').forEach((c) => (c.innerHTML = ''));
    });
    window.troupe.ready = false;
    // draw() shows nothing new on failure; the next poll draws again.
    void draw().then(() => (window.troupe.ready = true));
  };

  // Live: refetch from the newest step on (it may still gain rows) while the run is not over.
  let live = true;
  polling.stop = () => void (live = false);
  // Runs until the page is left; a failed poll is logged and the next one tries again.
  void (async function poll() {
    while (live) {
      await new Promise((res) => setTimeout(res, POLL_MS));
      if (!live) return;
      try {
        const last = metrics.reduce((m, x) => Math.max(m, x.step), -1);
        const before = JSON.stringify([metrics.filter((x) => x.step >= last), lrs, stepTimes, events]);
        const fresh = await fetchMetrics(last);
        metrics = [...metrics.filter((x) => x.step < last), ...fresh];
        const d = await api<{ run: RunSummary; events: RunEvent[]; progress: LiveProgress }>(`/api/runs/${encodeURIComponent(runId)}`);
        events = d.events;
        summary(d.run, d.progress);
        // Drawn again only when something changed: a finished run's page stays idle.
        if (JSON.stringify([fresh, lrs, stepTimes, events]) !== before) {
          drawEvents();
          await draw();
        }
        window.troupe.polls++;
      } catch (e) {
        console.warn('poll failed', e);
      }
    }
  })();

  const epForm = byId<HTMLFormElement>('epfilters');
  // episodes() shows its own errors in the page.
  epForm.onsubmit = (ev) => {
    ev.preventDefault();
    void episodes(runId, new FormData(epForm));
  };
  void episodes(runId, new FormData(epForm));
}

function controls(runId: string, enabled: boolean) {
  const el = byId('controls');
  if (!enabled) {
    el.innerHTML =
      '<small>Controls are off (start the dashboard with TROUPE_DASHBOARD_TOKEN to enable pause / resume / stop / stop now / setOptimizer).</small>';
    return;
  }
  el.innerHTML = `token <input id="token" type="password" size="12"> ${['pause', 'resume', 'stop', 'stop-now'].map((c) => `<button data-c="${c}">${c.replace('-', ' ')}</button>`).join('')}
    optimizer change <input id="optchange" size="30" placeholder='{"all":{"lr":0.01}}'><button data-c="setOptimizer">set</button> <span id="ctlmsg"></span>`;
  el.onclick = async (ev) => {
    const c = ev.target instanceof HTMLElement ? ev.target.dataset.c : undefined;
    if (!c) return;
    const body = c === 'setOptimizer' ? byId<HTMLInputElement>('optchange').value : '';
    const res = await fetch(`/api/runs/${encodeURIComponent(runId)}/${c}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${byId<HTMLInputElement>('token').value}`, 'content-type': 'application/json' },
      body,
    });
    const out = (await res.json()) as { effectiveStep?: number; error?: string };
    byId('ctlmsg').textContent = res.ok
      ? `${c}: ok ${out.effectiveStep !== undefined ? '(from step ' + out.effectiveStep + ')' : ''}`
      : (out.error ?? String(res.status));
  };
}

async function episodes(runId: string, form: FormData) {
  const el = byId('episodes');
  const q = new URLSearchParams(formStrings(form).filter(([k, v]) => v && k !== 'step'));
  q.set('limit', '200');
  try {
    const { episodes: eps, total } = await api<{ episodes: EpisodeRow[]; total: number }>(
      `/api/runs/${encodeURIComponent(runId)}/steps/${encodeURIComponent(String(form.get('step') || '0'))}/episodes?${q}`,
    );
    el.innerHTML =
      `<p>${total} episode(s)${total > eps.length ? `, first ${eps.length}` : ''}</p><table><tr><th>episode</th><th>task</th><th>group</th><th>status</th><th>success</th><th>reward</th><th>turns</th><th>error</th></tr>` +
      eps
        .map(
          (e) =>
            `<tr><td><a href="#/episodes/${encodeURIComponent(e.episodeId)}">${esc(e.episodeId)}</a></td><td>${esc(e.taskId)}</td><td>${e.groupIndex}.${e.episodeIndex}</td><td>${esc(e.status)}</td><td>${fmt(e.success)}</td><td>${fmt(e.reward)}</td><td>${e.turns}</td><td class="detail error">${esc(e.error)}</td></tr>`,
        )
        .join('') +
      '</table>';
  } catch (e) {
    el.innerHTML = `<p class="error">${esc(message(e))}</p>`;
  }
}
