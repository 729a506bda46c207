// A pipeline (#/pipelines/<id>): its stages as a graph (an edge from each stage it comes after),
// each box linking to its run's page, with the stage's state and its run's latest eval.
import { api, type PipelineView } from './data';
import { layout } from './episode-page';
import { crumbs, esc, fmt, main, message, polling, POLL_MS } from './page';

const BOX = { width: 200, height: 56 };
const COLOURS: Record<string, string> = {
  completed: '#16a34a',
  kept: '#16a34a',
  stopped: '#ca8a04',
  running: '#2563eb',
  failed: '#dc2626',
  waiting: '#9ca3af',
};

export async function pipelinePage(pipelineId: string) {
  const url = `/api/pipelines/${encodeURIComponent(pipelineId)}`;
  let p = await api<PipelineView>(url);
  draw(p);
  // Live while it runs: redrawn when a stage changes, until the page is left.
  let live = p.status === 'running';
  polling.stop = () => void (live = false);
  void (async () => {
    while (live) {
      await new Promise((res) => setTimeout(res, POLL_MS));
      if (!live) return;
      try {
        const fresh = await api<PipelineView>(url);
        if (JSON.stringify(fresh) !== JSON.stringify(p)) draw(fresh);
        p = fresh;
        live = live && p.status === 'running';
        window.troupe.polls++;
      } catch (e) {
        console.warn('poll failed', message(e));
      }
    }
  })();
}

function draw(p: PipelineView) {
  crumbs.innerHTML = `/ <a href="#/">runs</a> / pipeline ${esc(p.pipelineId)}`;
  const runOf = new Map(p.runs.map((r) => [r.runId, r]));
  const graph = {
    nodes: p.stages.map((s) => ({ id: s.name, ...s })),
    edges: p.stages.flatMap((s) => s.after.map((a) => ({ from: a, to: s.name }))),
  };
  const { nodes, edges, width, height } = layout(graph, BOX);
  const box = (n: (typeof nodes)[number]) => {
    const run = runOf.get(n.runId);
    // an export stage: the model version it wrote (its box links to the run it came from)
    const evalText = n.export ? '' : run?.evalSuccess !== null && run?.evalSuccess !== undefined ? ` · eval ${fmt(run.evalSuccess)}` : '';
    const steps = n.export
      ? ` · ${n.export.model} v${n.export.version}`
      : n.steps !== undefined
        ? ` · ${n.steps} step${n.steps === 1 ? '' : 's'}`
        : run
          ? ` · step ${run.step}`
          : '';
    return `<a href="#/runs/${encodeURIComponent(n.runId)}" data-stage="${esc(n.name)}" data-state="${esc(n.state)}">
      <rect x="${n.x - BOX.width / 2}" y="${n.y - BOX.height / 2}" width="${BOX.width}" height="${BOX.height}" rx="6" fill="#fff" stroke="${COLOURS[n.state] ?? '#6b7280'}" stroke-width="2"/>
      <text x="${n.x}" y="${n.y - 6}" text-anchor="middle" font-weight="bold">${esc(n.name)}</text>
      <text x="${n.x}" y="${n.y + 14}" text-anchor="middle" font-size="11">${esc(n.state)}${steps}${evalText}</text></a>`;
  };
  const arrow = (e: (typeof edges)[number]) =>
    `<line x1="${e.x}" y1="${e.y + BOX.height / 2}" x2="${e.x2}" y2="${e.y2 - BOX.height / 2}" stroke="#9ca3af" stroke-width="1.5" marker-end="url(#arrow)"/>`;
  main.innerHTML = `
    <p>pipeline <b>${esc(p.name)}</b> · <span id="pipeline-status">${esc(p.status)}</span> · ${p.stages.length} stages (each a run; click one for its curves)</p>
    <div class="panel"><svg id="pipeline-graph" width="${Math.max(240, width)}" height="${Math.max(100, height)}">
      <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0L10,5L0,10z" fill="#9ca3af"/></marker></defs>
      ${edges.map(arrow).join('')}${nodes.map(box).join('')}</svg></div>
    ${
      p.stages.some((s) => s.error)
        ? `<ul>${p.stages
            .filter((s) => s.error)
            .map((s) => `<li class="error">${esc(s.name)}: ${esc(s.error)}</li>`)
            .join('')}</ul>`
        : ''
    }`;
}
