/**
 * Scope, as Dr. MAS defines it: per-(group, agent) statistics vs. the
 * "global" per-group baseline with episode-averaged scores.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages, computeAdvantagesByAgent, ESTIMATOR_NAMES, getEstimator } from '../../../rl/advantages/registry';
import type { Sample } from '../../../rl/samples';
import { assertClose, meanOf, sample, unbiasedStdOf } from './helpers';

const turn = (episodeId: string, agentId: string, reward: number): Sample => sample({ episodeId, agentId, reward });

test('group-agent: an agent invoked twice in one episode counts as two samples', () => {
  // solver in e1 twice (rewards 1, 1) and in e2 once (0): its set is [1, 1, 0], not the episodes [1, 0]
  // mean 2/3; var = ((1/3)² + (1/3)² + (2/3)²)/2 = 1/3; std = 0.5773503
  // A = [1/3, 1/3, −2/3]/(0.5773503 + 1e-6) ≈ [0.577349, 0.577349, −1.154698]   (per episode it would be ±0.7071)
  const samples = [turn('e1', 'solver', 1), turn('e1', 'solver', 1), turn('e2', 'solver', 0)];
  const r = computeAdvantages(samples, { estimator: 'grpo', options: { scope: 'group-agent' } });
  const std = Math.sqrt(1 / 3);
  assertClose(r.advantages, [1 / 3 / (std + 1e-6), 1 / 3 / (std + 1e-6), -2 / 3 / (std + 1e-6)]);
  assert.equal(r.diagnostics.sets, 1);
  assert.equal(r.diagnostics.samples, 3);
});

// Two roles with reward scales 1 and 10 in one task group of four episodes.
// The verifier is not called in e4 (the episode ended early).
//   solver:   e1 0, e2 1, e3 0, e4 1
//   verifier: e1 10, e2 0, e3 10
const scaled = (): Sample[] => [
  turn('e1', 'solver', 0),
  turn('e2', 'solver', 1),
  turn('e3', 'solver', 0),
  turn('e4', 'solver', 1),
  turn('e1', 'verifier', 10),
  turn('e2', 'verifier', 0),
  turn('e3', 'verifier', 10),
];

test('group-agent scope gives each agent zero-mean, unit-std advantages whatever its reward scale', () => {
  // solver [0, 1, 0, 1]: mean 0.5, std √(4·0.25/3) = 0.5773503 → ±0.5/0.5773513 ≈ ±0.866024
  // verifier [10, 0, 10]: mean 20/3, std √((100/9 + 400/9 + 100/9)/2) = 5.7735027 → [10/3, −20/3, 10/3]/5.7735037 ≈ [0.57735, −1.1547, 0.57735]
  const r = computeAdvantages(scaled(), { estimator: 'grpo', options: { scope: 'group-agent' } });
  const s = 0.5 / (Math.sqrt(1 / 3) + 1e-6);
  const v = Math.sqrt(100 / 3) + 1e-6;
  assertClose(r.advantages, [-s, s, -s, s, 10 / 3 / v, -20 / 3 / v, 10 / 3 / v]);
  for (const [from, to] of [
    [0, 4],
    [4, 7],
  ]) {
    const a = r.advantages.slice(from, to);
    assert.ok(Math.abs(meanOf(a)) < 1e-12, `mean ${meanOf(a)}`);
    assert.ok(Math.abs(unbiasedStdOf(a) - 1) < 1e-5, `std ${unbiasedStdOf(a)}`);
  }
});

test('group (global) scope does not: the verifier scale swamps the solver', () => {
  // episode averages: e1 (0+10)/2 = 5, e2 (1+0)/2 = 0.5, e3 5, e4 1 (solver only)
  // rows: solver [5, 0.5, 5, 1], verifier [5, 0.5, 5]; mean 22/7 = 3.142857
  // deviations 1.857143 (×4), −2.642857 (×2), −2.142857; Σd² = 32.357143; std = √(32.357143/6) = 2.322253
  // solver A ≈ [0.79971, −1.13806, 0.79971, −0.92275]: its correct answers (e2, e4) get negative advantages
  const r = computeAdvantages(scaled(), { estimator: 'grpo', options: { scope: 'group' } });
  const m = 22 / 7;
  const std = Math.sqrt((4 * (5 - m) ** 2 + 2 * (0.5 - m) ** 2 + (1 - m) ** 2) / 6);
  const a = (x: number) => (x - m) / (std + 1e-6);
  assertClose(r.advantages, [a(5), a(0.5), a(5), a(1), a(5), a(0.5), a(5)]);
  assertClose(r.advantages, [0.79971, -1.13806, 0.79971, -0.92275, 0.79971, -1.13806, 0.79971], 1e-5);

  const solver = r.advantages.slice(0, 4);
  const verifier = r.advantages.slice(4);
  assert.ok(Math.abs(meanOf(solver)) > 0.1, `solver mean ${meanOf(solver)}`); // ≈ −0.1154
  assert.ok(Math.abs(meanOf(verifier)) > 0.1, `verifier mean ${meanOf(verifier)}`); // ≈ 0.1538
  assert.ok(solver[1]! < 0 && solver[3]! < 0, 'correct solver turns are pushed down');
});

test('every estimator honours the scope: sets are (group, agent), group, or the whole batch', () => {
  const samples = [
    sample({ groupId: 'a', agentId: 'x', episodeId: 'a1', reward: 1 }),
    sample({ groupId: 'a', agentId: 'y', episodeId: 'a1', reward: 0 }),
    sample({ groupId: 'a', agentId: 'x', episodeId: 'a2', reward: 0 }),
    sample({ groupId: 'a', agentId: 'y', episodeId: 'a2', reward: 2 }),
    sample({ groupId: 'b', agentId: 'x', episodeId: 'b1', reward: 3 }),
    sample({ groupId: 'b', agentId: 'x', episodeId: 'b2', reward: 1 }),
  ];
  const expected = { 'group-agent': 3, group: 2, 'group-agent-episode': 3, batch: 1 } as const;
  // turn-level estimators make their own sets (their tests check them) and accept group-agent only
  for (const estimator of ESTIMATOR_NAMES.filter((e) => getEstimator(e).scopes === undefined))
    for (const scope of ['group-agent', 'group', 'group-agent-episode', 'batch'] as const) {
      const r = computeAdvantages(samples, { estimator, options: { scope } });
      assert.equal(r.diagnostics.sets, expected[scope], `${estimator} ${scope}`);
      assert.equal(r.diagnostics.scope, scope);
    }
});

// Two roles, two episodes of one task group; the walker twice in e1, the lookout twice in e2.
//   walker:  e1 1, 0   e2 0
//   lookout: e1 10     e2 0, 4
const twoRoles = (): Sample[] => [
  turn('e1', 'walker', 1),
  turn('e1', 'lookout', 10),
  turn('e1', 'walker', 0),
  turn('e2', 'walker', 0),
  turn('e2', 'lookout', 0),
  turn('e2', 'lookout', 4),
];

test("group-agent-episode: each turn carries its own role's episode average, compared within the role", () => {
  // walker: e1 (1+0)/2 = 0.5 (both turns), e2 0 → [0.5, 0.5, 0]; mean 1/3; deviations [1/6, 1/6, −1/3]
  //   var = (1/36 + 1/36 + 4/36)/2 = 1/12; std = 0.2886751 → A ≈ [0.577348, 0.577348, −1.154696]
  // lookout: e1 10, e2 (0+4)/2 = 2 (both turns) → [10, 2, 2]; mean 14/3; deviations [16/3, −8/3, −8/3]
  //   var = (256/9 + 64/9 + 64/9)/2 = 64/3; std = 4.6188022 → A ≈ [1.154700, −0.577350, −0.577350]
  const r = computeAdvantages(twoRoles(), { estimator: 'grpo', options: { scope: 'group-agent-episode' } });
  const w = Math.sqrt(1 / 12) + 1e-6;
  const l = Math.sqrt(64 / 3) + 1e-6;
  // input order: walker e1, lookout e1, walker e1, walker e2, lookout e2, lookout e2
  assertClose(r.advantages, [1 / 6 / w, 16 / 3 / l, 1 / 6 / w, -1 / 3 / w, -8 / 3 / l, -8 / 3 / l]);
  assertClose(r.advantages, [0.577348, 1.1547, 0.577348, -1.154696, -0.57735, -0.57735], 1e-5);
  assert.equal(r.diagnostics.sets, 2);
  // In `group` scope the lookout's 10 in e1 lifts the walker's e1 turns; here the walker's advantages
  // do not depend on the lookout's rewards at all.
  const other = twoRoles().map((s) => (s.agentId === 'lookout' ? { ...s, rewards: { r: 7 - s.rewards.r! } } : s));
  const again = computeAdvantages(other, { estimator: 'grpo', options: { scope: 'group-agent-episode' } });
  assertClose(
    [0, 2, 3].map((i) => again.advantages[i]!),
    [0, 2, 3].map((i) => r.advantages[i]!),
  );
});

test('group-agent-episode in one call is the `group` scope run role by role', () => {
  // reference: computeAdvantagesByAgent gives each role its own call, where `group` averages only that
  // role's turns of an episode; per-turn rewards and weights included
  const samples = [
    ...twoRoles(),
    turn('e3', 'walker', 2),
    turn('e3', 'lookout', 1),
    turn('e3', 'walker', 1),
    sample({ groupId: 'h', episodeId: 'f1', agentId: 'walker', reward: 1, turnRewards: { step: 0.25 } }),
    sample({ groupId: 'h', episodeId: 'f1', agentId: 'walker', reward: 1, turnRewards: { step: 0 } }),
    sample({ groupId: 'h', episodeId: 'f2', agentId: 'walker', reward: 0, turnRewards: { step: 0.25 } }),
    sample({ groupId: 'h', episodeId: 'f2', agentId: 'lookout', reward: 0, turnRewards: { step: -0.25 } }),
  ];
  for (const estimator of ['grpo', 'rloo', 'mc-grpo'])
    for (const normalizeStd of estimator === 'rloo' ? [undefined] : [true, false]) {
      const options = { weights: { step: 2 }, ...(normalizeStd === undefined ? {} : { normalizeStd }) };
      const one = computeAdvantages(samples, { estimator, options: { ...options, scope: 'group-agent-episode' } });
      const spec = { estimator, options: { ...options, scope: 'group' as const } };
      const byRole = computeAdvantagesByAgent(samples, { walker: spec, lookout: spec });
      assertClose(one.advantages, byRole.advantages, 1e-12, `${estimator} normalizeStd ${normalizeStd}`);
      assert.deepEqual(one.excluded, byRole.excluded);
      assert.ok(
        one.advantages.some((a) => a !== 0),
        estimator,
      );
    }
});

test('rloo in batch scope uses one baseline for everything: 4/3·(s − 1.75)', () => {
  // rewards [1, 0 | 3, 3] over groups a, b; batch mean 7/4; n/(n−1) = 4/3
  const samples = [
    sample({ groupId: 'a', reward: 1 }),
    sample({ groupId: 'a', reward: 0 }),
    sample({ groupId: 'b', reward: 3 }),
    sample({ groupId: 'b', reward: 3 }),
  ];
  const r = computeAdvantages(samples, { estimator: 'rloo', options: { scope: 'batch' } });
  assertClose(r.advantages, [(4 / 3) * -0.75, (4 / 3) * -1.75, (4 / 3) * 1.25, (4 / 3) * 1.25]);
});
