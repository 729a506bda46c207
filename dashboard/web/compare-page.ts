// Several runs' curves overlaid (#/compare?runs=a,b).
import { panelsOf, type Point } from './curves';
import { fetchRunMetrics } from './data';
import { byId, crumbs, esc, main, render } from './page';
import { panelSpec } from './panel-spec';

export async function comparePage(params: URLSearchParams) {
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
