/** MC-GRPO: median baseline, MAD scale, one pivot per set excluded. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { assertClose, sample } from './helpers';

test('mc-grpo: rewards [1, 0, 0] → A = 1000 for the first, the pivot dropped', () => {
  // sorted by (score, sampleId): b(0), c(0), a(1); pivot = position ⌊(3−1)/2⌋ = 1 → c; med = 0
  // |r − med| = [1, 0, 0] → MAD = 0; A = (r − 0)/(0 + 1e-3) = [1000, 0, 0]
  const samples = [sample({ sampleId: 'a', reward: 1 }), sample({ sampleId: 'b', reward: 0 }), sample({ sampleId: 'c', reward: 0 })];
  const r = computeAdvantages(samples, { estimator: 'mc-grpo' });
  assertClose(r.advantages, [1000, 0, 0]);
  assert.deepEqual(r.excluded, [false, false, true]);
  assert.deepEqual(r.diagnostics.excludedSampleIds, ['c']);
});

test('mc-grpo: the pivot does not depend on input order (ties broken by sampleId)', () => {
  const samples = [sample({ sampleId: 'c', reward: 0 }), sample({ sampleId: 'a', reward: 1 }), sample({ sampleId: 'b', reward: 0 })];
  const r = computeAdvantages(samples, { estimator: 'mc-grpo' });
  assert.deepEqual(r.diagnostics.excludedSampleIds, ['c']);
  assertClose(r.advantages, [0, 1000, 0]);
});

test('mc-grpo: G + 1 = 5 → med 0.5, MAD 0.3, A = (r − 0.5)/0.301', () => {
  // rewards [0.2, 0.5, 0.9, 0.4, 1.0]; sorted 0.2 0.4 0.5 0.9 1.0 → med 0.5 (the second sample, pivot)
  // |r − 0.5| = [0.3, 0, 0.4, 0.1, 0.5] → sorted 0 0.1 0.3 0.4 0.5 → MAD 0.3
  // A = [−0.3, 0, 0.4, −0.1, 0.5]/0.301 ≈ [−0.99668, 0, 1.32890, −0.33223, 1.66113]
  const rewards = [0.2, 0.5, 0.9, 0.4, 1.0];
  const r = computeAdvantages(
    rewards.map((reward) => sample({ reward })),
    { estimator: 'mc-grpo' },
  );
  assertClose(r.advantages, [-0.99668, 0, 1.3289, -0.33223, 1.66113], 1e-5);
  assert.deepEqual(r.excluded, [false, true, false, false, false]);
});

test('mc-grpo with normalizeStd: false → A = r − med', () => {
  const rewards = [0.2, 0.5, 0.9, 0.4, 1.0];
  const r = computeAdvantages(
    rewards.map((reward) => sample({ reward })),
    { estimator: 'mc-grpo', options: { normalizeStd: false } },
  );
  assertClose(r.advantages, [-0.3, 0, 0.4, -0.1, 0.5], 1e-12);
});

test('mc-grpo: a singleton group is its own pivot and trains nothing', () => {
  const r = computeAdvantages([sample({ reward: 7 })], { estimator: 'mc-grpo' });
  assert.deepEqual([...r.advantages], [0]);
  assert.deepEqual(r.excluded, [true]);
});

test('mc-grpo: identical rewards → all zero, exactly one pivot per group', () => {
  const samples = [0.3, 0.3, 0.3].map((reward) => sample({ reward }));
  const r = computeAdvantages(samples, { estimator: 'mc-grpo' });
  assert.deepEqual([...r.advantages], [0, 0, 0]);
  assert.equal(r.excluded.filter(Boolean).length, 1);
});

test('mc-grpo: one pivot per (group, agent) set', () => {
  const samples = [...[1, 0, 0].map((reward) => sample({ groupId: 'g1', reward })), ...[0, 0, 1].map((reward) => sample({ groupId: 'g2', reward }))];
  const r = computeAdvantages(samples, { estimator: 'mc-grpo' });
  assert.equal(r.excluded.slice(0, 3).filter(Boolean).length, 1);
  assert.equal(r.excluded.slice(3).filter(Boolean).length, 1);
});

test('mc-grpo in group scope: the whole median episode is excluded', () => {
  // episodes (solver, verifier): e1 (1, 1) avg 1; e2 (0, 1) avg 0.5; e3 (0, 0) avg 0
  // rows sorted by (score, id): e3·2 (0), e2·2 (0.5), e1·2 (1) → pivot position ⌊5/2⌋ = 2 → an e2 row
  const mk = (ep: string, agentId: string, reward: number) => sample({ sampleId: `${ep}-${agentId}`, episodeId: ep, agentId, reward });
  const samples = [
    mk('e1', 'solver', 1),
    mk('e1', 'verifier', 1),
    mk('e2', 'solver', 0),
    mk('e2', 'verifier', 1),
    mk('e3', 'solver', 0),
    mk('e3', 'verifier', 0),
  ];
  const r = computeAdvantages(samples, { estimator: 'mc-grpo', options: { scope: 'group' } });
  assert.deepEqual(r.excluded, [false, false, true, true, false, false]);
  // med 0.5; |r − med| = 0.5 for e1 and e3 rows, 0 for e2 rows → sorted 0 0 0.5 0.5 0.5 0.5 → MAD (lower median) = 0.5
  // A = ±0.5/0.501 = ±0.998004
  assertClose(r.advantages, [0.5 / 0.501, 0.5 / 0.501, 0, 0, -0.5 / 0.501, -0.5 / 0.501]);
});

test('mc-grpo: an even set uses the lower middle as pivot and for MAD', () => {
  // rewards [0, 1, 2, 3]: pivot = sorted position ⌊3/2⌋ = 1 → score 1 = med
  // |r − 1| = [1, 0, 1, 2] → sorted 0 1 1 2 → lower median (position 1) = 1 = MAD
  // A = (r − 1)/(1 + 1e-3) = [−0.999001, 0, 0.999001, 1.998002]
  const r = computeAdvantages(
    [0, 1, 2, 3].map((reward) => sample({ reward })),
    { estimator: 'mc-grpo' },
  );
  assertClose(r.advantages, [-1 / 1.001, 0, 1 / 1.001, 2 / 1.001]);
  assert.deepEqual(r.excluded, [false, true, false, false]);
});
