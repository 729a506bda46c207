// Several runs' curves overlaid (#/compare?runs=a,b).
import { panelsOf, type Point } from './curves';
import { api, fetchRunMetrics } from './data';
import { byId, crumbs, esc, main, render } from './page';
import { panelSpec } from './panel-spec';

export async function comparePage(params: URLSearchParams) {
  const ids = (params.get('runs') ?? '').split(',').filter(Boolean);
  crumbs.innerHTML = `/ <a href="#/">runs</a> / compare ${ids.map(esc).join(', ')}`;
  main.innerHTML = '<div class="panels" id="panels"></div>';
  const merged = new Map<string, Point[]>();
  const offsets = await forkOffsets(ids);
  for (const id of ids) {
    const { rows, lr } = await fetchRunMetrics(id, -1);
    const shift = offsets.get(id) ?? 0;
    for (const [title, points] of panelsOf(rows, lr)) {
      if (!merged.has(title)) merged.set(title, []);
      merged.get(title)!.push(...points.map((p) => ({ ...p, x: p.x + shift, step: p.step + shift, run: id, series: `${id}: ${p.series}` })));
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

/**
 * Where each compared run's steps start on the shared axis: a fork (run config `fork`) compared with the run it
 * forked is drawn from the fork point (its step 0 at the parent's step N + 1), a fork of a fork from its own.
 */
async function forkOffsets(ids: readonly string[]): Promise<Map<string, number>> {
  const forks = new Map<string, { run: string; step: number }>();
  for (const id of ids) {
    const { config } = await api<{ config: { fork?: { run: string; step: number } } | null }>(`/api/runs/${encodeURIComponent(id)}`);
    if (config?.fork && ids.includes(config.fork.run)) forks.set(id, config.fork);
  }
  const offsets = new Map<string, number>();
  const offsetOf = (id: string, seen: Set<string>): number => {
    const f = forks.get(id);
    if (!f || seen.has(id)) return 0;
    return offsetOf(f.run, new Set([...seen, id])) + f.step + 1;
  };
  for (const id of ids) offsets.set(id, offsetOf(id, new Set()));
  return offsets;
}
