/**
 * Learning curves of a run, from its stored metrics: reward per agent, eval
 * success, gradient norm per model. Drawn with Vega-Lite (SVG) and rasterised
 * with resvg (PNG).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Sql } from '../infra/db';
import { TroupeError } from '../infra/errors';
import { readMetrics } from '../activities/store/metrics';

// vega and vega-lite are ES modules; load them from this CommonJS code with a real dynamic import.
const esm = new Function('m', 'return import(m)') as <T>(m: string) => Promise<T>;

export interface CurvePoint {
  step: number;
  series: string;
  value: number;
}

/** Rows for each panel, from metric rows. */
export function curves(rows: Awaited<ReturnType<typeof readMetrics>>) {
  const reward = new Map<string, CurvePoint>();
  for (const r of rows) {
    if (r.kind !== 'train' || !r.name.startsWith('reward.')) continue;
    const key = `${r.step}/${r.scope}`;
    const p = reward.get(key) ?? { step: r.step + 1, series: r.scope, value: 0 };
    p.value += r.value;
    reward.set(key, p);
  }
  return {
    reward: [...reward.values()],
    evalSuccess: rows.filter((r) => r.kind === 'eval' && r.scope === 'team' && r.name === 'success').map((r) => ({ step: r.step, series: 'eval success', value: r.value })),
    gradNorm: rows.filter((r) => r.kind === 'update' && r.name === 'gradNorm').map((r) => ({ step: r.step + 1, series: r.scope, value: r.value })),
  };
}

function panel(title: string, values: CurvePoint[], y: string) {
  return {
    title,
    width: 520,
    height: 160,
    data: { values },
    mark: { type: 'line', point: values.length < 60 },
    encoding: {
      x: { field: 'step', type: 'quantitative', title: 'step' },
      y: { field: 'value', type: 'quantitative', title: y },
      color: { field: 'series', type: 'nominal', title: null },
    },
  };
}

export async function renderCurves(c: ReturnType<typeof curves>, title: string): Promise<{ svg: string; png: Uint8Array }> {
  const vl = await esm<{ compile(spec: unknown): { spec: unknown } }>('vega-lite');
  const vega = await esm<typeof import('vega')>('vega');
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    background: 'white',
    resolve: { scale: { color: 'independent' } },
    vconcat: [panel('reward per agent (train, sum of components)', c.reward, 'reward'), panel('eval success (held-out tasks)', c.evalSuccess, 'success'), panel('gradient norm per model (before clipping)', c.gradNorm, 'grad norm')],
  };
  const compiled = vl.compile(spec).spec;
  const view = new vega.View(vega.parse(compiled as never), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  const { Resvg } = await import('@resvg/resvg-js');
  const png = new Resvg(svg, { fitTo: { mode: 'zoom', value: 2 }, background: 'white' }).render().asPng();
  return { svg, png: new Uint8Array(png) };
}

/** Writes <dir>/curves.svg and <dir>/curves.png for a run. */
export async function writePlot(sql: Sql, runId: string, dir: string): Promise<{ png: string; svg: string }> {
  const rows = await readMetrics(sql, runId);
  if (rows.length === 0) throw new TroupeError(`run ${runId} has no metrics yet`, 'check the run id with `npx troupe list`');
  const { svg, png } = await renderCurves(curves(rows), `Troupe run ${runId}`);
  fs.mkdirSync(dir, { recursive: true });
  const files = { svg: path.join(dir, 'curves.svg'), png: path.join(dir, 'curves.png') };
  fs.writeFileSync(files.svg, svg);
  fs.writeFileSync(files.png, png);
  return files;
}
