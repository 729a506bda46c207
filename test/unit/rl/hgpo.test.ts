/** HGPO: step-level advantages over groups sharing more and more history, weighted (k + 1)^α. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { HGPO_ALPHA, HGPO_EPS, HGPO_HISTORY } from '../../../rl/advantages/hgpo';
import { resolveSettings, toAdvantageSpec } from '../../../schema/optimizer';
import { assertClose, turnSample } from './helpers';

/** (G − mean)/(std + ε) with the std already worked out by hand. */
const z = (deviation: number, std: number) => deviation / (std + HGPO_EPS);

/** A chain episode: turn k comes after turn k − 1; `ok` is the episode reward. */
const chain = (episodeId: string, contexts: string[], ok: number) =>
  contexts.map((c, k) => turnSample(episodeId, k, k === 0 ? [] : [k - 1], 0, ok, { contextHash: c }));

test('hgpo: the constants are the reference defaults (K = 2 turns of history, α = 1)', () => {
  // The hand values below take level weights w_1..w_3 = 2, 3, 4.
  assert.equal(HGPO_HISTORY, 2);
  assert.equal(HGPO_ALPHA, 1);
});

// Three episodes of three turns; only turn 0 differs between e2 and the others:
//   e1: p, q, z  ok 1      e2: r, q, z  ok 0      e3: p, q, z  ok 0
// Returns (γ 0.95): e1 [0.9025, 0.95, 1], e2 and e3 [0, 0, 0].
const threeLevels = () => [...chain('e1', ['p', 'q', 'z'], 1), ...chain('e2', ['r', 'q', 'z'], 0), ...chain('e3', ['p', 'q', 'z'], 0)];

test('hgpo: levels that hold different turns are weighted (k + 1)^α over the levels a turn has', () => {
  const r = computeAdvantages(threeLevels(), { estimator: 'hgpo' });
  // Turn 0 (level 1 only: no turn behind it):
  //   {p} = {e1: 0.9025, e3: 0}: mean 0.45125, population std 0.45125 → ±z(0.45125, 0.45125); {r} = {e2} alone → 0.
  const t0 = z(0.45125, 0.45125);
  // Turn 1:
  //   level 1 {q} = {0.95, 0, 0}: mean 0.95/3, deviations (1.9/3, −0.95/3, −0.95/3),
  //     population std √((1.9² + 0.95² + 0.95²)/9 / 3) = 0.95·√2/3;
  //   level 2 (q after p) = {e1: 0.95, e3: 0} → ±z(0.475, 0.475); (q after r) = {e2} alone, no item.
  //   e1: (2·a1 + 3·a2)/5, e2: a1 (its only level), e3: (2·a1 − 3·a2)/5.
  const sd1 = (0.95 * Math.SQRT2) / 3;
  const [q1hi, q1lo, q2] = [z(1.9 / 3, sd1), z(-0.95 / 3, sd1), z(0.475, 0.475)];
  // Turn 2:
  //   level 1 {z} and level 2 (z after q) both = {1, 0, 0}: mean 1/3, std √2/3 → a = z(2/3), z(−1/3), z(−1/3);
  //   level 3 (z after q after p) = {e1: 1, e3: 0} → ±z(0.5, 0.5); e2's (z after q after r) is alone.
  //   e1: (2·a1 + 3·a2 + 4·a3)/9 = (5·a1 + 4·a3)/9, e2: (2 + 3)·a1/5 = a1, e3: (5·a1 − 4·a3)/9.
  const sd2 = Math.SQRT2 / 3;
  const [z1hi, z1lo, z3] = [z(2 / 3, sd2), z(-1 / 3, sd2), z(0.5, 0.5)];
  assertClose(r.advantages, [t0, (2 * q1hi + 3 * q2) / 5, (5 * z1hi + 4 * z3) / 9, 0, q1lo, z1lo, -t0, (2 * q1lo - 3 * q2) / 5, (5 * z1lo - 4 * z3) / 9]);
  // sharedStep: level-1 groups of two or more (e2's turn 0 is alone in {r}).
  assert.deepEqual(r.sharedStep, [true, true, true, false, true, true, true, true, true]);
});

test('hgpo: normalizeStd false drops the division (the reference mean_norm mode)', () => {
  const r = computeAdvantages(threeLevels(), { estimator: 'hgpo', options: { normalizeStd: false } });
  // Turn 0: ±0.45125 and 0.
  // Turn 1: a1 = (1.9/3, −0.95/3, −0.95/3), a2 = ±0.475 for e1, e3:
  //   e1 (2·1.9/3 + 3·0.475)/5 = (1.266667 + 1.425)/5 = 0.538333; e2 −0.316667; e3 (−1.9/3 − 1.425)/5 = −0.411667.
  // Turn 2: a1 = a2 = (2/3, −1/3, −1/3), a3 = ±0.5 for e1, e3:
  //   e1 (5·2/3 + 4·0.5)/9 = 16/27; e2 −1/3; e3 (−5/3 − 2)/9 = −11/27.
  assertClose(r.advantages, [0.45125, (3.8 / 3 + 1.425) / 5, 16 / 27, 0, -0.95 / 3, -1 / 3, -0.45125, (-1.9 / 3 - 1.425) / 5, -11 / 27]);
});

// Four episodes of two turns; every turn 1 acts in context x, after a or after b:
//   e1: a, x  ok 1    e2: a, x  ok 0    e3: b, x  ok 1    e4: b, x  ok 1
// Returns (γ 0.95): e1 [0.95, 1], e2 [0, 0], e3 [0.95, 1], e4 [0.95, 1].
const sharedState = () => [...chain('e1', ['a', 'x'], 1), ...chain('e2', ['a', 'x'], 0), ...chain('e3', ['b', 'x'], 1), ...chain('e4', ['b', 'x'], 1)];

test('hgpo: a level whose returns are all equal takes no weight; a group whose returns are all equal gets 0', () => {
  const r = computeAdvantages(sharedState(), { estimator: 'hgpo' });
  // Turn 0: {a} = {0.95, 0} → ±z(0.475, 0.475); {b} = {0.95, 0.95}: every return equal → 0.
  // Turn 1, level 1 {x} = {1, 0, 1, 1}: mean 0.75, population std √((3·0.25² + 0.75²)/4) = √3/4
  //   → a1 = z(0.25, √3/4) for e1, e3, e4 and z(−0.75, √3/4) for e2;
  // level 2 (x after a) = {e1: 1, e2: 0} → ±z(0.5, 0.5); (x after b) = {e3: 1, e4: 1}: all equal, A_2 = 0, dropped,
  //   so e3 and e4 keep a1 alone instead of (2·a1 + 3·0)/5.
  const sd = Math.sqrt(3) / 4;
  const [hi, lo, a2] = [z(0.25, sd), z(-0.75, sd), z(0.5, 0.5)];
  const t0 = z(0.475, 0.475);
  assertClose(r.advantages, [t0, (2 * hi + 3 * a2) / 5, -t0, (2 * lo - 3 * a2) / 5, 0, hi, 0, hi]);
  // Three such episodes that all succeed: every group has equal returns.
  const all = computeAdvantages([...chain('e1', ['a', 'x'], 1), ...chain('e2', ['a', 'x'], 1), ...chain('e3', ['b', 'x'], 1)], { estimator: 'hgpo' });
  assertClose(all.advantages, [0, 0, 0, 0, 0, 0]);
  assert.equal(all.diagnostics.zeroAdvantageSets, all.diagnostics.sets);
});

test('hgpo: a turn alone in its groups, or an episode alone in its task group, gets 0', () => {
  const r = computeAdvantages(chain('solo', ['a', 'x'], 1), { estimator: 'hgpo' });
  assertClose(r.advantages, [0, 0]);
  assert.deepEqual(r.sharedStep, [false, false]);
  assert.equal(r.diagnostics.singletonSets, 2);
});

test('hgpo vs gigpo: the same state after a different history is told apart, and no episode term is added', () => {
  const h = computeAdvantages(sharedState(), { estimator: 'hgpo' }).advantages;
  const g = computeAdvantages(sharedState(), { estimator: 'gigpo' }).advantages;
  // e1#1 and e3#1: both in context x, both return 1, both from a successful episode.
  // gigpo compares them in one step group and gives them the same advantage;
  // hgpo also compares e1#1 with e2#1, which came through the same a (level 2), and e3#1 has no such contrast.
  assertClose([g[1]!], [g[5]!]);
  const sd = Math.sqrt(3) / 4;
  assertClose([h[1]!, h[5]!], [(2 * z(0.25, sd) + 3 * z(0.5, 0.5)) / 5, z(0.25, sd)]);
  assert.ok(h[1]! - h[5]! > 0.2);
  // e3#0: its step group {b} has equal returns. gigpo still adds the episode-level
  // advantage of e3 (total 1 against mean 0.75 > 0); hgpo has no episode term: 0.
  assert.ok(g[4]! > 0);
  assert.equal(h[4], 0);
});

test('hgpo: a turn after two turns matches the history of both', () => {
  // Per episode: turn 0 in a; turns 1 (b) and 2 (c or c′) both after 0; turn 3 (d) after 1 and 2.
  const episode = (id: string, c: string, ok: number) => [
    turnSample(id, 0, [], 0, ok, { contextHash: 'a' }),
    turnSample(id, 1, [0], 0, ok, { contextHash: 'b' }),
    turnSample(id, 2, [0], 0, ok, { contextHash: c }),
    turnSample(id, 3, [1, 2], 0, ok, { contextHash: 'd' }),
  ];
  const samples = [...episode('e1', 'c', 1), ...episode('e2', 'c', 0), ...episode('e3', "c'", 1)];
  const r = computeAdvantages(samples, { estimator: 'hgpo', options: { normalizeStd: false } });
  // Returns: turn 3 = ok; turns 1, 2 = 0.95·ok; turn 0 = 0.95·mean(0.95·ok, 0.95·ok) = 0.9025·ok.
  // Turn 0: {a} = {0.9025, 0, 0.9025}: mean 0.601667 → (0.300833, −0.601667, 0.300833).
  // Turn 1: {b} and (b after a) = {0.95, 0, 0.95}: mean 1.9/3 → (0.95/3, −1.9/3, 0.95/3) at both levels.
  // Turn 2: {c} and (c after a) = {e1: 0.95, e2: 0} → ±0.475; e3's c′ is alone → 0.
  // Turn 3: level 1 {d} = {1, 0, 1}: mean 2/3 → (1/3, −2/3, 1/3);
  //   level 2 (d after b and c) = {e1, e2} → ±0.5, e3's (d after b and c′) alone;
  //   level 3 (d after (b after a) and (c after a)) = {e1, e2} → ±0.5, e3 alone.
  //   e1 (2/3 + 3·0.5 + 4·0.5)/9 = 25/54; e2 (−4/3 − 1.5 − 2)/9 = −29/54; e3 1/3.
  const t0 = 0.9025 / 3;
  assertClose(r.advantages, [t0, 0.95 / 3, 0.475, 25 / 54, -2 * t0, -1.9 / 3, -0.475, -29 / 54, t0, 0.95 / 3, 0, 1 / 3]);
});

test('hgpo takes gamma and normalizeStd as estimator options; bad ones are refused naming the field', () => {
  // γ 0.5, no division: turn 0 returns e1 0.5, e2 0 in {a} → ±0.25.
  const r = computeAdvantages(sharedState(), { estimator: 'hgpo', options: { gamma: 0.5, normalizeStd: false } });
  assertClose([r.advantages[0]!, r.advantages[2]!], [0.25, -0.25]);
  assert.throws(
    () => computeAdvantages(sharedState(), { estimator: 'hgpo', options: { gamma: 1.5 } }),
    /options\.gamma: must be a number from 0 to 1, got 1\.5/,
  );
  assert.throws(
    () => computeAdvantages(sharedState(), { estimator: 'hgpo', options: { scope: 'batch' } }),
    /options\.scope: "batch" is not a scope of hgpo \(it accepts group-agent\)/,
  );
  const s = resolveSettings({ estimator: { name: 'hgpo', gamma: 0.8, normalizeStd: false } }, {});
  assert.deepEqual(toAdvantageSpec(s), { estimator: 'hgpo', options: { weights: {}, scope: 'group-agent', normalizeStd: false, gamma: 0.8 } });
});

test('hgpo names a sample without a context hash', () => {
  assert.throws(() => computeAdvantages([turnSample('e', 0, [], 0, 0)], { estimator: 'hgpo' }), {
    name: 'RlInputError',
    message: 'samples[0].contextHash: is required by estimator hgpo (sample e#0)',
  });
});
