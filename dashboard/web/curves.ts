// The run page's curves as data: metric rows -> named panels of points, the section each
// panel is shown in, which panels are constant (folded), EMA smoothing and the wall-time axis.
// Pure functions (no DOM), so the unit tests run them in Node.

import { PARTIAL_PANELS } from '../../activities/training/partial-panels';

/** A metric row as dashboard/api.ts answers it. */
export interface MetricRow {
  kind: string;
  scope: string;
  name: string;
  step: number;
  value: number;
}
export interface LrRow {
  model: string;
  step: number;
  lr: number;
}
/** When a step's rows were committed (steps.finished_at), ISO time. */
export interface StepTime {
  step: number;
  finishedAt: string | null;
}
export interface Point {
  x: number;
  series: string;
  value: number;
  /** The stored value, where `value` is smoothed. */
  raw?: number;
  step: number;
  kind: string;
  scope: string;
  name: string;
}

/**
 * The sections of the run page, each a heading over a grid of its panels, in this order.
 * A panel no section names is shown under "Other".
 */
export const SECTIONS: readonly { id: string; title: string; panels: readonly string[] }[] = [
  { id: 'rewards', title: 'Rewards and eval', panels: ['reward components', 'success', 'eval success', 'truncated / failed shares'] },
  {
    id: 'policy',
    title: 'Per-agent policy',
    panels: [
      'entropy',
      'advantage mean',
      'advantage std',
      'advantage range',
      'advantage by turn position',
      'stepGroupShare',
      'zeroAdvantageGroupFraction',
      'episode length (turns)',
      'episode length (tokens)',
      'samples',
    ],
  },
  {
    id: 'optimization',
    title: 'Optimization',
    panels: ['loss', 'pgLoss', 'klLoss', 'gradNorm', 'learning rate', 'clipFraction', 'approxKl', 'logprob gap (engine vs. rollout)'],
  },
  // Only asynchronous runs (staleness > 0, activities/training/off-policy.ts) and runs with
  // partial rollouts (the last four, team rows `partial.*`) store these.
  {
    id: 'off-policy',
    title: 'Off-policy',
    panels: [
      'staleness',
      'tokens by staleness',
      'importance weight',
      'tokens truncated / masked',
      'mismatch KL',
      'carried into the next step',
      "carried episodes' age (steps)",
      'rollout tokens (sampled / served from the store)',
      'partial rollout: groups run and lockstep rounds',
    ],
  },
  { id: 'system', title: 'System', panels: ['step time split (s)', 'update tokens/s', 'tokens'] },
];
export const OTHER = { id: 'other', title: 'Other' } as const;

const SECTION_OF = new Map(SECTIONS.flatMap((s) => s.panels.map((p) => [p, s.id] as const)));
export const sectionOf = (panel: string): string => SECTION_OF.get(panel) ?? OTHER.id;

/** Metrics drawn in a named panel, with what their series are called there. */
const PANEL_OF: Record<string, [panel: string, suffix: string]> = {
  'isWeight.mean': ['importance weight', ' mean'],
  'isWeight.max': ['importance weight', ' max'],
  // Shares of trained tokens the correction truncated or dropped (rl/corrections/).
  'isWeight.truncated': ['tokens truncated / masked', ' truncated'],
  'isWeight.masked': ['tokens truncated / masked', ' masked'],
  // k3 KL(behaviour ‖ trainer at the base version); behaviourKl is its name in runs stored before.
  mismatch_kl: ['mismatch KL', ''],
  behaviourKl: ['mismatch KL', ''],
  episodeTurns: ['episode length (turns)', ''],
  episodeTokens: ['episode length (tokens)', ''],
  // Before: the scores the estimator started from; after: the advantages it gave.
  'score.mean': ['advantage mean', ' before normalization'],
  'advantage.mean': ['advantage mean', ' after'],
  'score.std': ['advantage std', ' before normalization'],
  'advantage.std': ['advantage std', ' after'],
  'advantage.min': ['advantage range', ' min'],
  'advantage.max': ['advantage range', ' max'],
  logprobGapMean: ['logprob gap (engine vs. rollout)', ' mean'],
  logprobGapMax: ['logprob gap (engine vs. rollout)', ' max'],
};

/**
 * Panels from metric rows, in section order. As in `troupe plot`, train and update metrics of
 * step s are drawn at s + 1 (after that step's update); evals at the step they ran before.
 */
export function panelsOf(metrics: readonly MetricRow[], lrs: readonly LrRow[] = []): Map<string, Point[]> {
  // An update row is its model's (one per model and step), a train row an agent's.
  const model = (r: MetricRow) => (r.kind === 'update' ? ' (model)' : '');
  const panels = new Map<string, Point[]>(SECTIONS.flatMap((s) => s.panels.map((p) => [p, []] as [string, Point[]])));
  const add = (panel: string, row: MetricRow, series: string, x: number, value = row.value) => {
    if (!panels.has(panel)) panels.set(panel, []);
    panels.get(panel)!.push({ x, series, value, step: row.step, kind: row.kind, scope: row.scope, name: row.name });
  };
  const updateMs = new Map<string, number>();
  for (const r of metrics) if (r.kind === 'update' && r.name === 'updateMs') updateMs.set(`${r.step}/${r.scope}`, r.value);
  for (const r of metrics) {
    if (r.kind === 'eval') {
      if (r.scope === 'team' && r.name === 'success') add('eval success', r, 'eval success', r.step);
    } else if (r.scope === 'team') {
      // The step's rollout beside each model's update: where a step's time goes.
      if (r.name === 'rolloutSeconds') add('step time split (s)', r, 'rollout', r.step + 1);
      else if (PARTIAL_PANELS[r.name]) add(PARTIAL_PANELS[r.name]![0], r, PARTIAL_PANELS[r.name]![1], r.step + 1);
    } else if (r.name.startsWith('reward.')) add('reward components', r, `${r.scope} ${r.name.slice(7)}`, r.step + 1);
    // advantage.position.<k>: one series per agent and turn position (rl/diagnostics.ts advantageByPosition)
    else if (r.name.startsWith('advantage.position.'))
      add('advantage by turn position', r, `${r.scope} turn ${r.name.slice('advantage.position.'.length)}`, r.step + 1);
    // staleness.tokens.<lag>: trained tokens sampled <lag> versions before the update's base, a series per lag
    else if (r.name.startsWith('staleness.tokens.'))
      add('tokens by staleness', r, `${r.scope}${model(r)} lag ${r.name.slice('staleness.tokens.'.length)}`, r.step + 1);
    else if (r.name === 'truncatedShare' || r.name === 'failedShare')
      add('truncated / failed shares', r, `${r.scope} ${r.name.replace('Share', '')}`, r.step + 1);
    else if (r.name === 'updateMs') add('step time split (s)', r, `${r.scope} update`, r.step + 1, r.value / 1000);
    else if (PANEL_OF[r.name]) add(PANEL_OF[r.name]![0], r, `${r.scope}${model(r)}${PANEL_OF[r.name]![1]}`, r.step + 1);
    else {
      add(r.name, r, `${r.scope}${model(r)}`, r.step + 1);
      const ms = r.kind === 'update' && r.name === 'tokens' ? updateMs.get(`${r.step}/${r.scope}`) : undefined;
      if (ms) add('update tokens/s', r, `${r.scope} (model)`, r.step + 1, r.value / (ms / 1000));
    }
  }
  for (const r of lrs) add('learning rate', { ...r, value: r.lr, kind: 'settings', scope: r.model, name: 'lr' }, `${r.model} (model)`, r.step + 1);
  return new Map([...panels].filter(([, points]) => points.length > 0));
}

const short = (v: number): string => String(Number(v.toPrecision(4)));

/**
 * "constant: <value>" when every series of a panel kept one value over at least two x
 * positions (one value for all: "constant: 0.001"; else per series), otherwise undefined.
 */
export function constantNote(points: readonly Point[]): string | undefined {
  if (new Set(points.map((p) => p.x)).size < 2) return undefined;
  const bySeries = new Map<string, number>();
  for (const p of points) {
    const v = p.raw ?? p.value;
    const seen = bySeries.get(p.series);
    if (seen === undefined) bySeries.set(p.series, v);
    else if (!Object.is(seen, v)) return undefined;
  }
  const values = new Set(bySeries.values());
  if (values.size === 1) return `constant: ${short([...values][0]!)}`;
  return `constant: ${[...bySeries].map(([s, v]) => `${s} ${short(v)}`).join(', ')}`;
}

/**
 * Exponential moving average per series in x order, debiased as TensorBoard's smoothing is
 * (s_t = a·s_{t-1} + (1-a)·v_t, divided by 1 - a^t), so the first point is its own value.
 * `raw` keeps the stored value. alpha 0 returns the points unchanged.
 */
export function smooth(points: readonly Point[], alpha: number): Point[] {
  if (!(alpha > 0)) return [...points];
  if (alpha >= 1) throw new Error(`smoothing: must be below 1, got ${alpha}`);
  const state = new Map<string, { m: number; n: number }>();
  return [...points]
    .sort((a, b) => a.x - b.x)
    .map((p) => {
      const st = state.get(p.series) ?? { m: 0, n: 0 };
      // The same average, updated as m += (v - m)(1 - a)/(1 - a^n): a constant series stays exactly
      // constant (the direct form drifts by rounding, and the zoomed y axis shows it).
      st.n++;
      st.m += ((p.value - st.m) * (1 - alpha)) / (1 - alpha ** st.n);
      state.set(p.series, st);
      return { ...p, raw: p.value, value: st.m };
    });
}

/**
 * Seconds since the run started at which a point at x = k was measured: the time step k - 1
 * committed (k = 0: the start). Points of a step not yet committed are left out.
 */
export function onWallTime(points: readonly Point[], steps: readonly StepTime[], runStart: string): Point[] {
  const t0 = Date.parse(runStart);
  const at = new Map(steps.filter((s) => s.finishedAt).map((s) => [s.step, (Date.parse(s.finishedAt!) - t0) / 1000]));
  return points.flatMap((p) => {
    const x = p.x === 0 ? 0 : at.get(p.x - 1);
    return x === undefined ? [] : [{ ...p, x }];
  });
}
