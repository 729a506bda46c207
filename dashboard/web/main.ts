// The dashboard page: hash routes #/ (runs), #/runs/<id> (live curves, events, a step's
// episodes), #/episodes/<id> (turn graph and tokens). Charts are Vega-Lite specs rendered
// by Vega, the turn graph laid out by dagre; Vite bundles them (see infra/install.js).
// `window.troupe` exposes the views so tests can read what was drawn.
import dagre from '@dagrejs/dagre';
import * as vega from 'vega';
import * as vegaLite from 'vega-lite';
import type { TopLevelSpec } from 'vega-lite';
import { constantNote, OTHER, onWallTime, panelsOf, SECTIONS, sectionOf, smooth, type LrRow, type MetricRow, type Point, type StepTime } from './curves';

// What the page reads from dashboard/api.ts's answers (JSON: dates are strings).
interface RunSummary {
  runId: string;
  team: string;
  status: string;
  step: number;
  steps: number | null;
  evalSuccess: number | null;
  evalStep: number | null;
  startedAt: string;
  durationSeconds: number;
}
interface RunEvent {
  step: number;
  kind: string;
  at: string;
  detail: unknown;
}
interface EpisodeRow {
  episodeId: string;
  taskId: string;
  groupIndex: number;
  episodeIndex: number;
  status: string;
  success: number | null;
  reward: number | null;
  turns: number;
  error: string | null;
}
interface Turn {
  index: number;
  agent: string;
  model: string;
  version: number;
  parents: number[];
  stopReason: string;
  advantage: number | null;
  toolCalls: { tool: string; input: unknown; output: unknown; error?: string }[];
  contextText: string[] | null;
  contextTokens: number[];
  responseText: string[] | null;
  responseTokens: number[];
  logprobs: number[];
  lossMask: number[];
}
interface TurnRewards {
  turn: number;
  components: Record<string, number>;
  /** The components that reward this turn itself (the reward function's `turn` part). */
  perTurn?: string[];
}
interface GraphNode {
  id: string;
  agent: string;
  kind: string;
  label: string;
}
interface GraphEdge {
  from: string;
  to: string;
  kind: string;
}
interface Episode {
  runId: string;
  step: number;
  taskId: string;
  /** The task as the team's task source gave it, and what the episode function returned. */
  task: unknown;
  outcome: unknown;
  split: string;
  status: string;
  success: number | null;
  seed: number;
  error: string | null;
  decodeError: string | null;
  rewards: TurnRewards[];
  turns: Turn[];
  graph: { nodes: GraphNode[]; edges: GraphEdge[] };
}

declare global {
  interface Window {
    /** The views drawn and the polls done, for the browser tests. */
    troupe: { views: Record<string, vega.View>; polls: number; ready?: boolean };
  }
}

/** The element with this id; the page's HTML has it. */
function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} is not on the page`);
  return el as T;
}

const main = byId('main');
const crumbs = byId('crumbs');
const POLL_MS = 2000;
window.troupe = { views: {}, polls: 0 };
let stopPolling = (): void => {};

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const esc = (s: unknown): string => String(s ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
const fmt = (x: unknown, d = 3): string =>
  x === null || x === undefined ? '–' : typeof x === 'number' ? (Number.isInteger(x) ? String(x) : x.toFixed(d)) : esc(x);
const duration = (s: number): string => (s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${(s / 60).toFixed(1)}m` : `${(s / 3600).toFixed(1)}h`);
const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

async function api<T>(path: string): Promise<T> {
  const res = await fetch(path);
  const body = (await res.json()) as T & { error?: string };
  if (!res.ok) throw new Error(body.error ?? `${res.status}`);
  return body;
}

let configPromise: Promise<{ temporalUiUrl: string | null; namespace: string; temporalAddress: string | null; controls: boolean }> | undefined;
const config = () => (configPromise ??= api('/api/config'));
const temporalLink = async (runId: string) => {
  const c = await config();
  return c.temporalUiUrl ? `${c.temporalUiUrl}/namespaces/${encodeURIComponent(c.namespace)}/workflows/${encodeURIComponent(runId)}` : null;
};

async function render(spec: TopLevelSpec, el: HTMLElement, name: string): Promise<vega.View> {
  const compiled = vegaLite.compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'svg', container: el, hover: true });
  await view.runAsync();
  window.troupe.views[name] = view;
  return view;
}

// ---- runs list ----
async function runsPage(params: URLSearchParams) {
  crumbs.textContent = '/ runs';
  const team = params.get('team') ?? '';
  const status = params.get('status') ?? '';
  const q = new URLSearchParams({ limit: '100', ...(team ? { team } : {}), ...(status ? { status } : {}) });
  const { runs, total } = await api<{ runs: RunSummary[]; total: number }>(`/api/runs?${q}`);
  const rows = await Promise.all(
    runs.map(async (r) => {
      const t = await temporalLink(r.runId);
      return `<tr data-run="${esc(r.runId)}"><td><input type="checkbox" name="cmp" value="${esc(r.runId)}"> <a href="#/runs/${encodeURIComponent(r.runId)}">${esc(r.runId)}</a></td><td>${esc(r.team)}</td><td>${esc(r.status)}</td>
        <td>${r.step}${r.steps ? ' / ' + r.steps : ''}</td><td>${fmt(r.evalSuccess)}${r.evalStep !== null ? ` (step ${r.evalStep})` : ''}</td>
        <td>${new Date(r.startedAt).toLocaleString()}</td><td>${duration(r.durationSeconds)}</td><td>${t ? `<a href="${esc(t)}" target="_blank">Temporal UI</a>` : ''}</td></tr>`;
    }),
  );
  main.innerHTML = `
    <form class="filters" id="filters">team <input name="team" value="${esc(team)}" size="10">
      status <select name="status">${['', 'running', 'paused', 'completed', 'stopped', 'failed', 'terminated', 'timed-out', 'cancelled'].map((s) => `<option ${s === status ? 'selected' : ''}>${s}</option>`).join('')}</select>
      <button>filter</button> <span>${total} run(s)</span> <button type="button" id="compare">compare checked runs</button></form>
    <table id="runs"><tr><th>run</th><th>team</th><th>status</th><th>step</th><th>eval success</th><th>started</th><th>duration</th><th></th></tr>${rows.join('')}</table>`;
  byId('compare').onclick = () => {
    const ids = [...document.querySelectorAll<HTMLInputElement>('input[name=cmp]:checked')].map((x) => x.value);
    if (ids.length >= 2) location.hash = `#/compare?runs=${ids.map(encodeURIComponent).join(',')}`;
  };
  const filters = byId<HTMLFormElement>('filters');
  filters.onsubmit = (ev) => {
    ev.preventDefault();
    location.hash = `#/?${new URLSearchParams(formStrings(new FormData(filters)).filter(([, v]) => v))}`;
  };
}

/** A form's fields as [name, text] pairs (the page's forms have no file inputs). */
const formStrings = (f: FormData): [string, string][] => [...f].map(([k, v]) => [k, String(v)]);

/** Every metric row of a run from `fromStep` on, page by page, and the learning rates. */
async function fetchRunMetrics(runId: string, fromStep: number): Promise<{ rows: MetricRow[]; lr: LrRow[]; stepTimes: StepTime[] }> {
  const rows: MetricRow[] = [];
  let lr: LrRow[] = [];
  let stepTimes: StepTime[] = [];
  for (let offset: number | null = 0; offset !== null;) {
    const page: { metrics: MetricRow[]; lr: LrRow[]; stepTimes: StepTime[]; nextOffset: number | null } = await api(
      `/api/runs/${encodeURIComponent(runId)}/metrics?fromStep=${fromStep}&limit=20000&offset=${offset}`,
    );
    rows.push(...page.metrics);
    if (offset === 0) ({ lr, stepTimes } = page);
    offset = page.nextOffset;
  }
  return { rows, lr, stepTimes };
}

// ---- a run: curves ----
interface CurveOptions {
  /** EMA weight of the past (0: none). */
  smoothing: number;
  x: 'step' | 'wall';
}
const SMOOTHING = [0, 0.5, 0.8, 0.9, 0.95, 0.99];

function panelSpec(title: string, points: readonly Point[], events: readonly { x: number; kind: string; at: string }[], opts: CurveOptions): TopLevelSpec {
  const isEval = title === 'eval success';
  // Series told apart by colour and dash pattern (evals: marker shape), so coinciding lines stay
  // visible; one legend below the chart, labels never cut (labelLimit 0).
  const series = { field: 'series', type: 'nominal', title: null, legend: { orient: 'bottom', direction: 'vertical', labelLimit: 0 } } as const;
  return {
    width: 380,
    height: 150,
    layer: [
      {
        data: { name: 'points', values: [...points] },
        // Evals are points only: nothing is known between two evals.
        mark: isEval
          ? { type: 'point', filled: true, size: 60, tooltip: true }
          : { type: 'line', strokeWidth: 1.5, point: { filled: false, size: 36 }, tooltip: true },
        encoding: {
          x:
            opts.x === 'wall'
              ? { field: 'x', type: 'quantitative', title: 'seconds since the run started' }
              : { field: 'x', type: 'quantitative', title: 'step', axis: { tickMinStep: 1 } },
          y: { field: 'value', type: 'quantitative', title: null, scale: { zero: false }, axis: { format: '~g' } },
          color: series,
          ...(isEval ? { shape: series } : { strokeDash: series }),
          tooltip: [
            { field: 'series' },
            { field: 'step' },
            { field: 'value', format: '.4f', title: opts.smoothing ? 'smoothed' : 'value' },
            ...(opts.smoothing ? [{ field: 'raw', format: '.4f', title: 'stored' }] : []),
          ],
        },
      },
      {
        data: { name: 'events', values: [...events] },
        // Run events (pauses, optimizer changes, failures, resumes) on the same x axis.
        mark: { type: 'rule', strokeDash: [4, 3], strokeWidth: 1.5 },
        encoding: {
          x: { field: 'x', type: 'quantitative' },
          // A legend only where there are events (an empty one is drawn with no finite size).
          stroke: {
            field: 'kind',
            type: 'nominal',
            title: 'event',
            scale: { scheme: 'set1' },
            legend: events.length > 0 ? { orient: 'bottom', labelLimit: 0 } : null,
          },
          tooltip: [{ field: 'kind' }, { field: 'x' }, { field: 'at' }],
        },
      },
    ],
  };
}

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

async function runPage(runId: string, params: URLSearchParams) {
  crumbs.innerHTML = `/ <a href="#/">runs</a> / ${esc(runId)}`;
  const detail = await api<{ run: RunSummary; config: unknown; events: RunEvent[] }>(`/api/runs/${encodeURIComponent(runId)}`);
  const t = await temporalLink(runId);
  const cfg = await config();
  const r = detail.run;
  const opts: CurveOptions = { smoothing: Number(params.get('smoothing') ?? 0) || 0, x: params.get('x') === 'wall' ? 'wall' : 'step' };
  main.innerHTML = `
    <p id="summary"></p>
    <div class="controls" id="controls"></div>
    <div class="run-info">
      <details open><summary>config</summary><pre id="run-config">${esc(JSON.stringify(detail.config, null, 2))}</pre></details>
      <details open><summary>commands</summary><pre id="run-commands">${esc(commandsText(runId, cfg))}</pre></details>
    </div>
    <form class="filters" id="curve-options">smoothing (EMA) <select id="smoothing" name="smoothing">${SMOOTHING.map((a) => `<option value="${a}" ${a === opts.smoothing ? 'selected' : ''}>${a || 'off'}</option>`).join('')}</select>
      x axis <select id="xaxis" name="x"><option value="step">step</option><option value="wall" ${opts.x === 'wall' ? 'selected' : ''}>wall time</option></select>
      <small>panels whose every series is constant are folded (click to open)</small></form>
    <div id="sections">${[...SECTIONS, OTHER].map((s) => `<section class="section" data-section="${s.id}" hidden><h3>${esc(s.title)}</h3><div class="panels"></div></section>`).join('')}</div>
    <h3>Events</h3><table id="events" class="events"></table>
    <h3>Episodes</h3>
    <form class="filters" id="epfilters">step <input name="step" type="number" min="0" value="${esc(params.get('step') ?? '0')}" style="width:5em">
      split <select name="split"><option>train</option><option>eval</option></select>
      status <select name="status"><option></option><option>completed</option><option>truncated</option><option>failed</option></select>
      task <input name="task" size="10"> min reward <input name="minReward" size="5"> <button>show</button></form>
    <div id="episodes"></div>`;
  const summary = (run: RunSummary) =>
    (byId('summary').innerHTML =
      `team <b>${esc(run.team)}</b> · status <b id="run-status">${esc(run.status)}</b> · step ${run.step}${run.steps ? ' / ' + run.steps : ''} · eval success ${fmt(run.evalSuccess)} · ${duration(run.durationSeconds)}${t ? ` · <a href="${esc(t)}" target="_blank">Temporal UI</a>` : ''}`);
  summary(r);
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
  stopPolling = () => void (live = false);
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
        const d = await api<{ run: RunSummary; events: RunEvent[] }>(`/api/runs/${encodeURIComponent(runId)}`);
        events = d.events;
        summary(d.run);
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
    el.innerHTML = '<small>Controls are off (start the dashboard with TROUPE_DASHBOARD_TOKEN to enable pause / resume / stop / setOptimizer).</small>';
    return;
  }
  el.innerHTML = `token <input id="token" type="password" size="12"> ${['pause', 'resume', 'stop'].map((c) => `<button data-c="${c}">${c}</button>`).join('')}
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

// ---- compare: several runs' curves overlaid ----
async function comparePage(params: URLSearchParams) {
  const ids = (params.get('runs') ?? '').split(',').filter(Boolean);
  crumbs.innerHTML = `/ <a href="#/">runs</a> / compare ${ids.map(esc).join(', ')}`;
  main.innerHTML = '<div class="panels" id="panels"></div>';
  const merged = new Map<string, Point[]>();
  for (const id of ids) {
    const { rows, lr } = await fetchRunMetrics(id, -1);
    for (const [title, points] of panelsOf(rows, lr)) {
      if (!merged.has(title)) merged.set(title, []);
      merged.get(title)!.push(...points.map((p) => ({ ...p, run: id, series: `${id}: ${p.series}` })));
    }
  }
  for (const [title, points] of merged) {
    const el = document.createElement('div');
    el.className = 'panel';
    el.dataset.panel = title;
    el.innerHTML = `<b>${esc(title)}</b><div class="chart"></div>`;
    byId('panels').append(el);
    await render(panelSpec(title, points, [], { smoothing: 0, x: 'step' }), el.querySelector<HTMLElement>('.chart')!, title);
  }
}

// ---- an episode: turn graph and tokens ----
const NODE = { width: 120, height: 36 };

/** The turn DAG laid out top to bottom by dagre: each node's centre and each edge's end points, in pixels. */
export function layout(graph: Episode['graph']) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 24, ranksep: 48, marginx: 70, marginy: 30 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of graph.nodes) g.setNode(n.id, { ...NODE });
  for (const e of graph.edges) g.setEdge(e.from, e.to);
  dagre.layout(g);
  const at = (id: string) => g.node(id);
  const nodes = graph.nodes.map((n) => ({ ...n, x: at(n.id).x, y: at(n.id).y }));
  const edges = graph.edges.map((e) => ({ ...e, x: at(e.from).x, y: at(e.from).y, x2: at(e.to).x, y2: at(e.to).y }));
  const { width, height } = g.graph();
  return { nodes, edges, width, height };
}

async function episodePage(episodeId: string) {
  const ep = await api<Episode>(`/api/episodes/${encodeURIComponent(episodeId)}`);
  crumbs.innerHTML = `/ <a href="#/">runs</a> / <a href="#/runs/${encodeURIComponent(ep.runId)}?step=${ep.step}">${esc(ep.runId)}</a> / step ${ep.step} / ${esc(episodeId)}`;
  const rewardsOf = new Map(ep.rewards.map((r) => [r.turn, r]));
  main.innerHTML = `
    <p>task <b>${esc(ep.taskId)}</b> · ${esc(ep.split)} · status <b>${esc(ep.status)}</b> · success ${fmt(ep.success)} · seed ${ep.seed}${ep.error ? ` · <span class="error">${esc(ep.error)}</span>` : ''}</p>
    <div class="run-info">
      <div><b>task</b> (what the team's task source gave the episode)<pre id="episode-task">${esc(JSON.stringify(ep.task, null, 2))}</pre></div>
      <div><b>outcome</b> (what the episode function returned; the rewards score it)<pre id="episode-outcome">${ep.outcome === null ? 'none: the episode returned nothing' + (ep.error ? ' (it failed)' : '') : esc(JSON.stringify(ep.outcome, null, 2))}</pre></div>
    </div>
    <div class="panel" id="graph"></div>
    <p class="legend"><span class="tok ctx">context</span><span class="tok masked">generated, trained (loss mask 1)</span><span class="tok">generated, not trained</span> — hover a token for its log-prob; darker = less likely</p>
    <div id="turns">${ep.turns.map((t) => turnHtml(t, rewardsOf.get(t.index), ep.decodeError)).join('')}</div>`;
  const { nodes, edges, width, height } = layout(ep.graph);
  // dagre's pixel positions as they are (scale null): the chart only draws them.
  const ys = { field: 'y', type: 'quantitative', axis: null, scale: null } as const;
  const xs = { field: 'x', type: 'quantitative', axis: null, scale: null } as const;
  const spec: TopLevelSpec = {
    width: Math.max(240, width),
    height: Math.max(120, height),
    title: 'turn graph (after edges; tool calls as squares)',
    layer: [
      {
        data: { name: 'edges', values: edges },
        mark: { type: 'rule', color: '#9ca3af' },
        encoding: { x: xs, y: ys, x2: { field: 'x2' }, y2: { field: 'y2' }, strokeDash: { field: 'kind', type: 'nominal', legend: null } },
      },
      {
        data: { name: 'nodes', values: nodes },
        mark: { type: 'point', filled: true, size: 400, tooltip: true },
        encoding: {
          x: xs,
          y: ys,
          color: { field: 'agent', type: 'nominal', title: 'agent' },
          shape: { field: 'kind', type: 'nominal', scale: { domain: ['turn', 'tool'], range: ['circle', 'square'] }, title: null },
          tooltip: [{ field: 'label' }],
        },
      },
      { data: { name: 'labels', values: nodes }, mark: { type: 'text', dy: -18, fontSize: 11 }, encoding: { x: xs, y: ys, text: { field: 'label' } } },
    ],
  };
  await render(spec, byId('graph'), 'graph');
}

function tokensHtml(pieces: string[] | null, ids: number[], cls: string, logprobs?: number[], mask?: number[]) {
  return ids
    .map((id, i) => {
      const text = pieces?.[i] ?? `[${id}]`;
      if (!logprobs || !mask) return `<span class="tok ${cls}">${esc(text)}</span>`;
      // Shade by probability: a likely token is pale, an unlikely one dark.
      const lp = logprobs[i] ?? 0;
      const alpha = Math.min(0.85, Math.max(0.08, 1 - Math.exp(lp)));
      const bg = mask[i] ? `rgba(217,119,6,${alpha})` : `rgba(107,114,128,${alpha * 0.6})`;
      return `<span class="tok ${mask[i] ? 'masked' : 'unmasked'}" style="background:${bg}" title="id ${id} · logprob ${lp.toFixed(4)} · loss mask ${mask[i]}">${esc(text)}</span>`;
    })
    .join('');
}

function turnHtml(t: Turn, rewards: TurnRewards | undefined, decodeError: string | null) {
  // Episode components first, then this turn's own, which sit next to the advantage they feed.
  const own = new Set(rewards?.perTurn ?? []);
  const comp = ([k, v]: [string, number]) =>
    `<span class="reward ${own.has(k) ? 'per-turn' : 'episode'}" data-component="${esc(k)}">${esc(k)} ${fmt(v)}${own.has(k) ? ' (turn)' : ''}</span>`;
  const entries = Object.entries(rewards?.components ?? {});
  const episodeParts = entries.filter(([k]) => !own.has(k)).map(comp);
  const turnParts = entries.filter(([k]) => own.has(k)).map(comp);
  const comps = entries.length > 0 ? [...episodeParts, ...turnParts].join(', ') : '–';
  const calls = t.toolCalls
    .map(
      (c) =>
        `<li><b>${esc(c.tool)}</b> input <code>${esc(JSON.stringify(c.input))}</code> → ${c.error ? `<span class="error">${esc(c.error)}</span>` : `<code>${esc(JSON.stringify(c.output))}</code>`}</li>`,
    )
    .join('');
  const adv = t.advantage === null ? 'none (not trained on)' : t.advantage.toFixed(4);
  return `<div class="turn" data-turn="${t.index}"><h4>turn ${t.index} · ${esc(t.agent)} (model ${esc(t.model)} v${t.version}) · after [${t.parents.join(', ')}] · stop ${esc(t.stopReason)} · rewards: ${comps} · advantage <span class="advantage">${adv}</span></h4>
    ${decodeError ? `<p class="error">tokens not decoded: ${esc(decodeError)}</p>` : ''}
    <div class="tokens"><span class="tok ctx">${tokensHtml(t.contextText, t.contextTokens, 'ctx')}</span><br>${tokensHtml(t.responseText, t.responseTokens, '', t.logprobs, t.lossMask)}</div>
    ${calls ? `<ul>${calls}</ul>` : ''}</div>`;
}

// ---- routing ----
async function route() {
  stopPolling();
  window.troupe.views = {};
  window.troupe.ready = false;
  const [path, query] = location.hash.slice(1).split('?');
  const params = new URLSearchParams(query ?? '');
  const parts = (path || '/').split('/').filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === 'runs' && parts[1]) await runPage(parts[1], params);
    else if (parts[0] === 'episodes' && parts[1]) await episodePage(parts[1]);
    else if (parts[0] === 'compare') await comparePage(params);
    else await runsPage(params);
  } catch (e) {
    main.innerHTML = `<p class="error">${esc(message(e))}</p>`;
  }
  window.troupe.ready = true;
}
// route() shows its own errors in the page.
window.addEventListener('hashchange', () => void route());
void route();
