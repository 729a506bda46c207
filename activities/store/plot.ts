/**
 * Learning curves of a run, from its stored metrics: reward per agent and
 * component, truncated/failed shares per agent, eval success (points: it is
 * measured only at eval steps), gradient norm per model, for asynchronous
 * runs the off-policy correction per agent, a panel per quantity, and for runs with
 * partial rollouts their carried episodes and tokens. Drawn with Vega-Lite (SVG) and
 * rasterised with resvg (PNG). `troupe plot` writes it to files, the MLflow export
 * (store/mlflow.ts) uploads it as the run's artifacts `curves/curves.{png,svg}`.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Sql } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { readMetrics } from './metrics';
import { esmImport } from '../../infra/esm';
import { STALENESS_TOKENS } from '../training/off-policy';
import { PARTIAL_PANELS } from '../training/partial-panels';

export interface CurvePoint {
  step: number;
  series: string;
  value: number;
}

/**
 * Rows for each panel, from metric rows. Train metrics of step s are drawn at
 * s + 1 (after that step's update), evals at the step they ran before.
 */
export function curves(rows: Awaited<ReturnType<typeof readMetrics>>) {
  const train = rows.filter((r) => r.kind === 'train' && r.scope !== 'team');
  const components = new Map<string, Set<string>>();
  for (const r of train) if (r.name.startsWith('reward.')) (components.get(r.scope) ?? components.set(r.scope, new Set()).get(r.scope)!).add(r.name);
  const reward: CurvePoint[] = [];
  const totals = new Map<string, CurvePoint>();
  for (const r of train) {
    if (!r.name.startsWith('reward.')) continue;
    reward.push({ step: r.step + 1, series: `${r.scope} ${r.name.slice('reward.'.length)}`, value: r.value });
    // The (unweighted) sum, only where it differs from the one component.
    if (components.get(r.scope)!.size < 2) continue;
    const key = `${r.step}/${r.scope}`;
    const p = totals.get(key) ?? { step: r.step + 1, series: `${r.scope} (sum)`, value: 0 };
    p.value += r.value;
    totals.set(key, p);
  }
  const share = { truncatedShare: 'truncated', failedShare: 'failed' } as Record<string, string>;
  // Asynchronous runs' off-policy metrics (activities/training/off-policy.ts), a panel each
  // (one panel for all held 6 lines per agent): [panel, what the series is called after its agent].
  const offPolicy: Record<string, [panel: string, suffix: string]> = {
    staleness: ['staleness (versions behind)', ''],
    'isWeight.mean': ['importance weight', ' mean'],
    'isWeight.max': ['importance weight', ' max'],
    'isWeight.truncated': ['tokens truncated / masked by the correction (share of trained tokens)', ' truncated'],
    'isWeight.masked': ['tokens truncated / masked by the correction (share of trained tokens)', ' masked'],
    mismatch_kl: ['mismatch KL(behaviour‖trainer), k3', ''],
    // its name in runs stored before corrections were selectable
    behaviourKl: ['mismatch KL(behaviour‖trainer), k3', ''],
    clipFraction: ['clip fraction', ''],
  };
  // staleness.tokens.<lag>: the staleness histogram, a series per agent and lag.
  const lagOf = (name: string) => (name.startsWith(STALENESS_TOKENS) ? name.slice(STALENESS_TOKENS.length) : undefined);
  const panelOf = (name: string): [string, string] | undefined => {
    const lag = lagOf(name);
    return lag === undefined ? offPolicy[name] : ['trained tokens by staleness (count per lag)', ` lag ${lag}`];
  };
  // Clip fraction with them only in asynchronous runs (the rows of the others say it is one).
  const asyncSteps = new Set(train.filter((r) => r.name !== 'clipFraction' && panelOf(r.name)).map((r) => `${r.step}/${r.scope}`));
  const offPolicyPanels = new Map<string, CurvePoint[]>();
  for (const r of train) {
    const [title, suffix] = panelOf(r.name) ?? [];
    if (!title || !asyncSteps.has(`${r.step}/${r.scope}`)) continue;
    (offPolicyPanels.get(title) ?? offPolicyPanels.set(title, []).get(title)!).push({ step: r.step + 1, series: `${r.scope}${suffix}`, value: r.value });
  }
  return {
    reward: [...reward, ...totals.values()],
    endings: train.filter((r) => share[r.name]).map((r) => ({ step: r.step + 1, series: `${r.scope} ${share[r.name]}`, value: r.value })),
    evalSuccess: rows
      .filter((r) => r.kind === 'eval' && r.scope === 'team' && r.name === 'success')
      .map((r) => ({ step: r.step, series: 'eval success', value: r.value })),
    gradNorm: rows.filter((r) => r.kind === 'update' && r.name === 'gradNorm').map((r) => ({ step: r.step + 1, series: r.scope, value: r.value })),
    offPolicy: [...offPolicyPanels].map(([title, values]) => ({ title, values })),
    partial: partialPanels(rows),
    // SFT runs only: the cross-entropy of each step's batch under its base version, per agent and per model
    sft: rows
      .filter((r) => r.name === 'sft.ce' && (r.kind === 'train' || r.kind === 'update'))
      .map((r) => ({ step: r.step + 1, series: r.kind === 'update' ? `${r.scope} (model)` : r.scope, value: r.value })),
  };
}

/** Partial rollouts' panels, in PARTIAL_PANELS' order; none for a run without them. */
function partialPanels(rows: Awaited<ReturnType<typeof readMetrics>>) {
  const panels = new Map<string, CurvePoint[]>();
  for (const [panel] of Object.values(PARTIAL_PANELS)) panels.set(panel, []);
  for (const r of rows) {
    const [panel, series] = (r.kind === 'train' && r.scope === 'team' && PARTIAL_PANELS[r.name]) || [];
    if (panel) panels.get(panel)!.push({ step: r.step + 1, series: series!, value: r.value });
  }
  return [...panels].filter(([, values]) => values.length > 0).map(([title, values]) => ({ title, values }));
}

const WIDTH = 520;
const HEIGHT = 160;

/** A panel of series; `points` draws only points (values measured at those steps, nothing between). */
function panel(title: string, values: CurvePoint[], y: string, opts: { points?: boolean; domain?: [number, number] } = {}) {
  // An empty panel is a note, not an empty chart: Vega gives an empty chart no size, and the SVG cannot be drawn.
  if (values.length === 0) {
    return {
      title,
      width: WIDTH,
      height: HEIGHT,
      data: { values: [{ note: 'no data' }] },
      mark: { type: 'text', fontSize: 14, color: 'gray' },
      encoding: { text: { field: 'note' }, x: { value: WIDTH / 2 }, y: { value: HEIGHT / 2 } },
    };
  }
  // Steps are whole numbers: no fractional ticks. One step alone would give the axis an empty
  // domain (Vega labels it 0.000000 or 1.000000): centre it, labelled with its step number.
  const steps = new Set(values.map((v) => v.step));
  const [only] = steps.size === 1 ? steps : [];
  const x = only === undefined ? { axis: { tickMinStep: 1, format: 'd' } } : { axis: { values: [only], format: 'd' }, scale: { domain: [only - 1, only + 1] } };
  return {
    title,
    width: WIDTH,
    height: HEIGHT,
    data: { values },
    mark: opts.points ? { type: 'point', filled: true, size: 50 } : { type: 'line', point: values.length < 60 },
    encoding: {
      x: { field: 'step', type: 'quantitative', title: 'step', ...x },
      y: { field: 'value', type: 'quantitative', title: y, ...(opts.domain ? { scale: { domain: opts.domain } } : {}) },
      color: { field: 'series', type: 'nominal', title: null },
    },
  };
}

/** The Vega-Lite spec of the four panels. */
export function curvesSpec(c: ReturnType<typeof curves>, title: string) {
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    background: 'white',
    resolve: { scale: { color: 'independent' } },
    vconcat: [
      panel('reward per agent and component (train, mean per turn)', c.reward, 'reward'),
      panel('episodes ending truncated / failed, per agent (share of its episodes)', c.endings, 'share', { domain: [0, 1] }),
      panel('eval success (held-out tasks, greedy; measured at these steps only)', c.evalSuccess, 'success', { points: true, domain: [0, 1] }),
      panel('gradient norm per model (before clipping)', c.gradNorm, 'grad norm'),
      // Only asynchronous runs (staleness > 0) have these.
      ...c.offPolicy.map((p) => panel(`${p.title} per agent (asynchronous run)`, p.values, 'value')),
      // Only runs with partial rollouts have these.
      ...c.partial.map((p) => panel(`${p.title} (partial rollouts)`, p.values, 'value')),
      // Only SFT runs have this.
      ...(c.sft.length > 0 ? [panel("SFT cross-entropy per agent and model (the step's batch, before its update)", c.sft, 'cross-entropy')] : []),
    ],
  };
}

/** Vega-Lite spec -> SVG (vega, headless) -> PNG (resvg, scaled by zoom); also draws the benchmark figures. */
export async function renderVegaLite(spec: Record<string, unknown>, zoom = 2): Promise<{ svg: string; png: Uint8Array }> {
  const vl = await esmImport<{ compile(spec: unknown): { spec: unknown } }>('vega-lite');
  const vega = await esmImport<typeof import('vega')>('vega');
  const compiled = vl.compile({ $schema: 'https://vega.github.io/schema/vega-lite/v6.json', background: 'white', ...spec }).spec;
  const view = new vega.View(vega.parse(compiled as never), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  const { Resvg } = await import('@resvg/resvg-js');
  const png = new Resvg(svg, { fitTo: { mode: 'zoom', value: zoom }, background: 'white' }).render().asPng();
  return { svg, png: new Uint8Array(png) };
}

export function renderCurves(c: ReturnType<typeof curves>, title: string): Promise<{ svg: string; png: Uint8Array }> {
  return renderVegaLite(curvesSpec(c, title));
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
