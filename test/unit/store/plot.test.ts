/**
 * The learning-curve plot: each reward component per agent, truncated/failed
 * shares, eval as points; and it draws (never throws) on empty or constant data.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { curves, curvesSpec, renderCurves } from '../../../activities/store/plot';

const row = (step: number, kind: string, scope: string, name: string, value: number) => ({ step, kind, scope, name, value });

it('curves: one series per agent and component, a sum only for agents with several, endings per agent, eval at its steps', () => {
  const c = curves([
    row(0, 'train', 'solver', 'reward.correct', 0.5),
    row(0, 'train', 'verifier', 'reward.judged', 4),
    row(0, 'train', 'verifier', 'reward.format', 1),
    row(0, 'train', 'solver', 'truncatedShare', 0.25),
    row(0, 'train', 'solver', 'failedShare', 0),
    row(0, 'train', 'team', 'episodes', 128),
    row(0, 'eval', 'team', 'success', 0.1),
    row(10, 'eval', 'team', 'success', 0.9),
    row(0, 'update', 'policy', 'gradNorm', 0.3),
  ]);
  assert.deepEqual(c.reward, [
    { step: 1, series: 'solver correct', value: 0.5 },
    { step: 1, series: 'verifier judged', value: 4 },
    { step: 1, series: 'verifier format', value: 1 },
    { step: 1, series: 'verifier (sum)', value: 5 },
  ]);
  assert.deepEqual(c.endings, [
    { step: 1, series: 'solver truncated', value: 0.25 },
    { step: 1, series: 'solver failed', value: 0 },
  ]);
  assert.deepEqual(c.evalSuccess, [
    { step: 0, series: 'eval success', value: 0.1 },
    { step: 10, series: 'eval success', value: 0.9 },
  ]);
  assert.deepEqual(c.offPolicy, [], 'a synchronous run has no off-policy panel');
  assert.deepEqual(c.partial, [], 'nor a partial-rollout panel');
  const spec = curvesSpec(c, 't');
  assert.equal(spec.vconcat.length, 4);
  assert.deepEqual(spec.vconcat[2]!.mark, { type: 'point', filled: true, size: 50 }, 'eval: points, no line between evals');
  assert.equal((spec.vconcat[0]!.mark as { type: string }).type, 'line');
});

it('curves: an asynchronous run adds the off-policy correction, a panel per quantity with a series per agent', () => {
  const agents = ['solver', 'critic', 'verifier'];
  const rows = agents.flatMap((a, i) => [
    row(2, 'train', a, 'staleness', 1),
    row(2, 'train', a, 'isWeight.mean', 1.02 + i),
    row(2, 'train', a, 'isWeight.max', 1.5 + i),
    row(2, 'train', a, 'isWeight.truncated', 0),
    row(2, 'train', a, 'isWeight.masked', 0.25),
    row(2, 'train', a, 'mismatch_kl', 0.003),
    row(2, 'train', a, 'staleness.tokens.1', 40 + i),
    row(2, 'train', a, 'clipFraction', 0.1),
  ]);
  const c = curves([...rows, row(2, 'update', 'policy', 'staleness', 1), row(3, 'train', 'solver', 'clipFraction', 0.2)]);
  assert.deepEqual(
    c.offPolicy.map((p) => [p.title, p.values.map((v) => v.series)]),
    [
      ['staleness (versions behind)', agents],
      ['importance weight', agents.flatMap((a) => [`${a} mean`, `${a} max`])],
      ['tokens truncated / masked by the correction (share of trained tokens)', agents.flatMap((a) => [`${a} truncated`, `${a} masked`])],
      ['mismatch KL(behaviour‖trainer), k3', agents],
      ['trained tokens by staleness (count per lag)', agents.map((a) => `${a} lag 1`)],
      // Step 3 has no off-policy rows (a synchronous step): its clip fraction is not drawn here.
      ['clip fraction', agents],
    ],
  );
  assert.deepEqual(c.offPolicy[1]!.values[0], { step: 3, series: 'solver mean', value: 1.02 });
  // 18 series before, in one panel; now at most 2 per agent in each.
  assert.ok(c.offPolicy.every((p) => new Set(p.values.map((v) => v.series)).size <= 2 * agents.length));
  const spec = curvesSpec(c, 't');
  assert.equal(spec.vconcat.length, 4 + 6);
  assert.deepEqual(
    spec.vconcat.slice(4).map((p) => p.title),
    c.offPolicy.map((p) => `${p.title} per agent (asynchronous run)`),
  );
});

it('curves: a partial-rollout run adds its carried episodes, their age, its tokens and rounds, a panel each', () => {
  const names = ['groups', 'rounds', 'carriedEpisodes', 'carriedGroups', 'carriedMaxAge', 'generatedTokens', 'replayedTokens'];
  const c = curves([
    ...names.map((n, i) => row(0, 'train', 'team', `partial.${n}`, i)),
    ...names.map((n, i) => row(1, 'train', 'team', `partial.${n}`, 10 + i)),
    row(1, 'train', 'team', 'episodes', 12),
    row(1, 'train', 'solver', 'reward.correct', 1),
  ]);
  assert.deepEqual(c.offPolicy, [], 'no staleness: no correction panels');
  assert.deepEqual(
    c.partial.map((p) => [p.title, p.values.map((v) => [v.step, v.series, v.value])]),
    [
      [
        'carried into the next step',
        [
          [1, 'episodes', 2],
          [1, 'groups', 3],
          [2, 'episodes', 12],
          [2, 'groups', 13],
        ],
      ],
      [
        "carried episodes' age (steps)",
        [
          [1, 'oldest', 4],
          [2, 'oldest', 14],
        ],
      ],
      [
        'rollout tokens (sampled / served from the store)',
        [
          [1, 'sampled', 5],
          [1, 'served from the store', 6],
          [2, 'sampled', 15],
          [2, 'served from the store', 16],
        ],
      ],
      [
        'partial rollout: groups run and lockstep rounds',
        [
          [1, 'groups', 0],
          [1, 'rounds', 1],
          [2, 'groups', 10],
          [2, 'rounds', 11],
        ],
      ],
    ],
  );
  const spec = curvesSpec(c, 't');
  assert.deepEqual(
    spec.vconcat.slice(4).map((p) => p.title),
    c.partial.map((p) => `${p.title} (partial rollouts)`),
  );
});

it('renders empty, single-point and constant series without throwing', async () => {
  const empty = curves([]);
  const { svg, png } = await renderCurves(empty, 'empty');
  assert.match(svg, /^<svg/);
  assert.equal((svg.match(/>no data</g) ?? []).length, 4, 'each empty panel says so');
  assert.ok(png.length > 100);
  // A run whose episodes all failed: evals at 0, no train rewards, no updates.
  const failed = curves([
    row(0, 'eval', 'team', 'success', 0),
    row(3, 'eval', 'team', 'success', 0),
    row(0, 'train', 'solver', 'failedShare', 1),
    row(1, 'train', 'solver', 'failedShare', 1),
  ]);
  assert.match((await renderCurves(failed, 'all failed')).svg, /^<svg/);
  const constant = curves([
    row(0, 'train', 'solver', 'reward.correct', 0),
    row(1, 'train', 'solver', 'reward.correct', 0),
    row(0, 'update', 'policy', 'gradNorm', 0),
  ]);
  assert.match((await renderCurves(constant, 'constant')).svg, /^<svg/);
});

/** Each x axis's tick labels, in the panels' order, read from the SVG Vega draws. */
const xAxisLabels = (svg: string) =>
  svg
    .split('aria-label="X-axis')
    .slice(1)
    .map((axis) => [...axis.slice(axis.indexOf('role-axis-label'), axis.indexOf('role-axis-domain')).matchAll(/>([^<]*)<\/text>/g)].map((m) => m[1]));

it('x axes: one point is labelled with its step number (not 0.000000), and steps never get fractional ticks', async () => {
  // A run with one step: its eval before it (step 0), its train rewards and update after it (step 1).
  const one = curves([row(0, 'eval', 'team', 'success', 0.5), row(0, 'train', 'solver', 'reward.correct', 10), row(0, 'update', 'policy', 'gradNorm', 0.3)]);
  const { svg } = await renderCurves(one, 'one point');
  assert.deepEqual(xAxisLabels(svg), [['1'], ['0'], ['1']], 'reward, eval success, grad norm (the empty endings panel has no axis)');
  assert.doesNotMatch(svg, />-?\d+\.\d{6}</, 'no six-decimal labels anywhere');
  // Two evals a step apart: whole steps only.
  const two = curves([row(0, 'eval', 'team', 'success', 0.5), row(1, 'eval', 'team', 'success', 0.7)]);
  assert.deepEqual(xAxisLabels((await renderCurves(two, 'two points')).svg), [['0', '1']]);
});
