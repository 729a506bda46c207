// A curve panel as a Vega-Lite spec: a run's page draws it, and the compare page overlays runs in it.
import type { TopLevelSpec } from 'vega-lite';
import type { Point } from './curves';

export interface CurveOptions {
  /** EMA weight of the past (0: none). */
  smoothing: number;
  x: 'step' | 'wall';
}
export const SMOOTHING = [0, 0.5, 0.8, 0.9, 0.95, 0.99];

export function panelSpec(
  title: string,
  points: readonly Point[],
  events: readonly { x: number; kind: string; at: string }[],
  opts: CurveOptions,
): TopLevelSpec {
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
