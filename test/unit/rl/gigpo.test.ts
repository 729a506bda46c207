/** GiGPO: episode-level group advantage + step-level advantage over identical contexts. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { GIGPO_EPS } from '../../../rl/advantages/gigpo';
import { assertClose, turnSample } from './helpers';

// Three episodes of two turns (chain), only the episode reward `ok` (sparse):
//   e1: contexts a, b1; ok 1      e2: contexts a, b2; ok 0      e3: contexts c, b1; ok 1
const samples = () => [
  turnSample('e1', 0, [], 0, 1, { contextHash: 'a' }),
  turnSample('e1', 1, [0], 0, 1, { contextHash: 'b1' }),
  turnSample('e2', 0, [], 0, 0, { contextHash: 'a' }),
  turnSample('e2', 1, [0], 0, 0, { contextHash: 'b2' }),
  turnSample('e3', 0, [], 0, 1, { contextHash: 'c' }),
  turnSample('e3', 1, [0], 0, 1, { contextHash: 'b1' }),
];

test('gigpo: A = A_E + A_S, step groups by context hash', () => {
  const r = computeAdvantages(samples(), { estimator: 'gigpo' });
  // Episode totals E = [1, 0, 1]: mean 2/3, unbiased std √(1/3);
  //   A_E = (1/3)/(√(1/3) + ε) for e1, e3 and (−2/3)/(√(1/3) + ε) for e2.
  const sd = Math.sqrt(1 / 3) + GIGPO_EPS;
  const [hi, lo] = [1 / 3 / sd, -2 / 3 / sd];
  // Returns (γ 0.95): e1 [0.95, 1], e2 [0, 0], e3 [0.95, 1].
  // Step group a = {e1#0: 0.95, e2#0: 0}: mean 0.475, std 0.475·√2 → A_S = ±0.475/(0.475·√2 + ε).
  // Step group b1 = {e1#1: 1, e3#1: 1}: std 0 → A_S = 0. b2 and c are single → 0.
  const s = 0.475 / (0.475 * Math.SQRT2 + GIGPO_EPS);
  assertClose(r.advantages, [hi + s, hi, lo - s, lo, hi, hi]);
  assert.deepEqual(r.sharedStep, [true, true, true, false, false, true]);
});

test('gigpo: normalizeStd false drops both divisions', () => {
  const r = computeAdvantages(samples(), { estimator: 'gigpo', options: { normalizeStd: false } });
  // A_E = E − 2/3; A_S(a) = ±0.475
  assertClose(r.advantages, [1 / 3 + 0.475, 1 / 3, -2 / 3 - 0.475, -2 / 3, 1 / 3, 1 / 3]);
});

test('gigpo: an episode with more turns does not weigh more in the episode baseline', () => {
  // e1 takes three turns, e2 one; totals 1 and 0 → A_E = ±0.5/(√0.5 + ε) whatever the turn counts.
  const r = computeAdvantages(
    [
      turnSample('e1', 0, [], 0, 1, { contextHash: 'x' }),
      turnSample('e1', 1, [0], 0, 1, { contextHash: 'y' }),
      turnSample('e1', 2, [1], 0, 1, { contextHash: 'z' }),
      turnSample('e2', 0, [], 0, 0, { contextHash: 'w' }),
    ],
    { estimator: 'gigpo' },
  );
  const a = 0.5 / (Math.sqrt(0.5) + GIGPO_EPS);
  assertClose(r.advantages, [a, a, a, -a]);
});

test('gigpo names a sample without a context hash', () => {
  assert.throws(() => computeAdvantages([turnSample('e', 0, [], 0, 0)], { estimator: 'gigpo' }), {
    name: 'RlInputError',
    message: 'samples[0].contextHash: is required by estimator gigpo (sample e#0)',
  });
});
