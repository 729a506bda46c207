// An episode (#/episodes/<id>): its task and outcome, the turn graph laid out by dagre, and
// each turn's tokens shaded by log-prob.
import dagre from '@dagrejs/dagre';
import type { TopLevelSpec } from 'vega-lite';
import { api, type Episode, type Turn, type TurnRewards } from './data';
import { byId, crumbs, esc, fmt, main, render } from './page';

const NODE = { width: 120, height: 36 };

/** A DAG (the turn graph, a pipeline's stages) laid out top to bottom by dagre: each node's centre and each edge's end points, in pixels. */
export function layout<N extends { id: string }, E extends { from: string; to: string }>(graph: { nodes: N[]; edges: E[] }, node = NODE) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 24, ranksep: 48, marginx: 70, marginy: 30 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of graph.nodes) g.setNode(n.id, { ...node });
  for (const e of graph.edges) g.setEdge(e.from, e.to);
  dagre.layout(g);
  const at = (id: string) => g.node(id);
  const nodes = graph.nodes.map((n) => ({ ...n, x: at(n.id).x, y: at(n.id).y }));
  const edges = graph.edges.map((e) => ({ ...e, x: at(e.from).x, y: at(e.from).y, x2: at(e.to).x, y2: at(e.to).y }));
  const { width, height } = g.graph();
  return { nodes, edges, width, height };
}

export async function episodePage(episodeId: string) {
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
