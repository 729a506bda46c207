/**
 * The run page's curves as data (dashboard/web/curves.ts): each panel in its section, constant
 * panels told apart (folded on the page), EMA smoothing and the wall-time axis.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { constantNote, onWallTime, panelsOf, SECTIONS, sectionOf, smooth, type Point } from '../../../dashboard/web/curves';

const row = (step: number, kind: string, scope: string, name: string, value: number) => ({ step, kind, scope, name, value });
const pt = (x: number, series: string, value: number): Point => ({ x, series, value, step: x, kind: 'train', scope: series, name: 'm' });

it('puts each panel in its section: rewards, per-agent policy, optimization, off-policy, system', () => {
  const panels = panelsOf(
    [
      row(0, 'train', 'solver', 'reward.correct', 1),
      row(0, 'eval', 'team', 'success', 0.5),
      row(0, 'train', 'solver', 'entropy', 2),
      row(0, 'train', 'solver', 'advantage.min', -1),
      row(0, 'train', 'solver', 'advantage.max', 1),
      row(0, 'train', 'solver', 'advantage.position.0', 0.5),
      row(0, 'train', 'solver', 'advantage.position.1', -0.5),
      row(0, 'train', 'solver', 'stepGroupShare', 0.25),
      row(0, 'update', 'policy', 'gradNorm', 0.3),
      row(0, 'update', 'policy', 'logprobGapMean', 0.01),
      row(0, 'train', 'solver', 'staleness', 1),
      row(0, 'train', 'team', 'rolloutSeconds', 2),
      row(0, 'update', 'policy', 'updateMs', 500),
      row(0, 'update', 'policy', 'tokens', 1000),
      row(0, 'train', 'team', 'episodes', 8),
      row(0, 'train', 'solver', 'somethingNew', 3),
    ],
    [{ model: 'policy', step: 0, lr: 0.001 }],
  );
  const where = Object.fromEntries([...panels.keys()].map((p) => [p, sectionOf(p)]));
  assert.deepEqual(where, {
    'reward components': 'rewards',
    'eval success': 'rewards',
    entropy: 'policy',
    'advantage range': 'policy',
    'advantage by turn position': 'policy',
    stepGroupShare: 'policy',
    gradNorm: 'optimization',
    'learning rate': 'optimization',
    'logprob gap (engine vs. rollout)': 'optimization',
    staleness: 'off-policy',
    'step time split (s)': 'system',
    'update tokens/s': 'system',
    tokens: 'system',
    somethingNew: 'other',
  });
  // The step's time: rollout beside each model's update, in seconds; update throughput from tokens and time.
  assert.deepEqual(
    panels.get('step time split (s)')!.map((p) => [p.series, p.value]),
    [
      ['rollout', 2],
      ['policy update', 0.5],
    ],
  );
  assert.deepEqual(
    panels.get('update tokens/s')!.map((p) => [p.x, p.series, p.value]),
    [[1, 'policy (model)', 2000]],
  );
  assert.deepEqual(
    panels.get('advantage range')!.map((p) => p.series),
    ['solver min', 'solver max'],
  );
  assert.deepEqual(
    panels.get('advantage by turn position')!.map((p) => [p.series, p.value]),
    [
      ['solver turn 0', 0.5],
      ['solver turn 1', -0.5],
    ],
  );
  assert.equal(new Set(SECTIONS.flatMap((s) => s.panels)).size, SECTIONS.flatMap((s) => s.panels).length, 'a panel is in one section');
});

it('draws the off-policy section: truncated and masked shares together, mismatch KL (old runs: behaviourKl), tokens by staleness', () => {
  const panels = panelsOf([
    row(2, 'train', 'solver', 'isWeight.truncated', 0.25),
    row(2, 'train', 'solver', 'isWeight.masked', 0.5),
    row(2, 'update', 'policy', 'mismatch_kl', 0.01),
    row(1, 'train', 'solver', 'behaviourKl', 0.02),
    row(2, 'train', 'solver', 'staleness.tokens.1', 30),
    row(2, 'train', 'solver', 'staleness.tokens.2', 4),
    row(2, 'update', 'policy', 'staleness.tokens.1', 30),
  ]);
  assert.deepEqual(Object.fromEntries([...panels.keys()].map((p) => [p, sectionOf(p)])), {
    'tokens truncated / masked': 'off-policy',
    'mismatch KL': 'off-policy',
    'tokens by staleness': 'off-policy',
  });
  const drawn = (panel: string) => panels.get(panel)!.map((p) => [p.x, p.series, p.value]);
  assert.deepEqual(drawn('tokens truncated / masked'), [
    [3, 'solver truncated', 0.25],
    [3, 'solver masked', 0.5],
  ]);
  assert.deepEqual(drawn('mismatch KL'), [
    [3, 'policy (model)', 0.01],
    [2, 'solver', 0.02],
  ]);
  assert.deepEqual(drawn('tokens by staleness'), [
    [3, 'solver lag 1', 30],
    [3, 'solver lag 2', 4],
    [3, 'policy (model) lag 1', 30],
  ]);
});

it("draws a partial-rollout run's carried episodes, their age and its tokens in the off-policy section; a plain run has none", () => {
  const step = (t: number, carried: number, groups: number, age: number, sampled: number, served: number) => [
    row(t, 'train', 'team', 'partial.groups', 6),
    row(t, 'train', 'team', 'partial.rounds', 9),
    row(t, 'train', 'team', 'partial.carriedEpisodes', carried),
    row(t, 'train', 'team', 'partial.carriedGroups', groups),
    row(t, 'train', 'team', 'partial.carriedMaxAge', age),
    row(t, 'train', 'team', 'partial.generatedTokens', sampled),
    row(t, 'train', 'team', 'partial.replayedTokens', served),
  ];
  const panels = panelsOf([...step(0, 4, 2, 1, 300, 0), ...step(1, 2, 1, 2, 250, 40), row(1, 'train', 'team', 'episodes', 12)]);
  assert.deepEqual(Object.fromEntries([...panels.keys()].map((p) => [p, sectionOf(p)])), {
    'carried into the next step': 'off-policy',
    "carried episodes' age (steps)": 'off-policy',
    'rollout tokens (sampled / served from the store)': 'off-policy',
    'partial rollout: groups run and lockstep rounds': 'off-policy',
  });
  const drawn = (panel: string) => panels.get(panel)!.map((p) => [p.x, p.series, p.value]);
  assert.deepEqual(drawn('carried into the next step'), [
    [1, 'episodes', 4],
    [1, 'groups', 2],
    [2, 'episodes', 2],
    [2, 'groups', 1],
  ]);
  assert.deepEqual(drawn("carried episodes' age (steps)"), [
    [1, 'oldest', 1],
    [2, 'oldest', 2],
  ]);
  assert.deepEqual(drawn('rollout tokens (sampled / served from the store)'), [
    [1, 'sampled', 300],
    [1, 'served from the store', 0],
    [2, 'sampled', 250],
    [2, 'served from the store', 40],
  ]);
  // A synchronous run's team rows (other than the rollout time) draw nothing.
  assert.deepEqual([...panelsOf([row(0, 'train', 'team', 'episodes', 12), row(0, 'train', 'solver', 'entropy', 1)]).keys()], ['entropy']);
});

it('calls a panel constant only when every series keeps one value over two or more steps', () => {
  assert.equal(constantNote([pt(1, 'a', 0.001), pt(2, 'a', 0.001), pt(1, 'b', 0.001), pt(2, 'b', 0.001)]), 'constant: 0.001');
  assert.equal(constantNote([pt(1, 'a', 1), pt(2, 'a', 1), pt(1, 'b', 0), pt(2, 'b', 0)]), 'constant: a 1, b 0');
  assert.equal(constantNote([pt(1, 'a', 1), pt(2, 'a', 1), pt(1, 'b', 0), pt(2, 'b', 0.5)]), undefined);
  assert.equal(constantNote([pt(1, 'a', 1), pt(1, 'b', 1)]), undefined, 'one step says nothing about change');
  // Judged on the stored values, not the smoothed ones.
  assert.equal(constantNote(smooth([pt(1, 'a', 1), pt(2, 'a', 3)], 0.9)), undefined);
});

it('smooths each series by a debiased EMA in x order, keeping the stored value', () => {
  const points = [pt(2, 'a', 0), pt(1, 'a', 1), pt(1, 'b', 5), pt(3, 'a', 1)];
  assert.deepEqual(smooth(points, 0), points);
  const s = smooth(points, 0.5);
  const a = s.filter((p) => p.series === 'a');
  // s1 = 0.5, s2 = 0.25, s3 = 0.625; debiased by 1 - 0.5^t: 1, 1/3, 5/7.
  assert.deepEqual(
    a.map((p) => [p.x, p.raw]),
    [
      [1, 1],
      [2, 0],
      [3, 1],
    ],
  );
  [1, 1 / 3, 5 / 7].forEach((v, i) => assert.ok(Math.abs(a[i]!.value - v) < 1e-12, `${a[i]!.value} vs ${v}`));
  // A constant series stays exactly constant, however long.
  const lr = Array.from({ length: 50 }, (_, i) => pt(i, 'lr', 0.02));
  assert.deepEqual(new Set(smooth(lr, 0.9).map((p) => p.value)), new Set([0.02]));
  assert.deepEqual(
    s.filter((p) => p.series === 'b').map((p) => p.value),
    [5],
  );
  assert.throws(() => smooth(points, 1), /smoothing: must be below 1, got 1/);
});

it('places a point at step k at the time step k - 1 committed, seconds since the start; uncommitted steps are left out', () => {
  const start = '2026-01-01T00:00:00.000Z';
  const steps = [
    { step: 0, finishedAt: '2026-01-01T00:00:10.000Z' },
    { step: 1, finishedAt: '2026-01-01T00:00:25.500Z' },
    { step: 2, finishedAt: null },
  ];
  assert.deepEqual(
    onWallTime([pt(0, 'eval', 0), pt(1, 'a', 1), pt(2, 'a', 2), pt(3, 'a', 3)], steps, start).map((p) => [p.x, p.value]),
    [
      [0, 0],
      [10, 1],
      [25.5, 2],
    ],
  );
});
