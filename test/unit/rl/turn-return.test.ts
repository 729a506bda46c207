/** turn-return: discounted returns along the turn graph, leave-one-out baseline per turn position. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { DEFAULT_GAMMA } from '../../../rl/advantages/types';
import { assertClose, turnSample } from './helpers';

test('turn-return: returns per turn, baseline = mean of the other episodes at the same position', () => {
  assert.equal(DEFAULT_GAMMA, 0.95);
  const samples = [
    // e1: chain of 3, step [1, 0, 1], ok 1 → G2 = 2, G1 = 0.95·2 = 1.9, G0 = 1 + 0.95·1.9 = 2.805
    turnSample('e1', 0, [], 1, 1),
    turnSample('e1', 1, [0], 0, 1),
    turnSample('e1', 2, [1], 1, 1),
    // e2: chain of 2, step [0, 1], ok 0 → G1 = 1, G0 = 0.95
    turnSample('e2', 0, [], 0, 0),
    turnSample('e2', 1, [0], 1, 0),
    // e3: one turn, step 1, ok 0 → G0 = 1
    turnSample('e3', 0, [], 1, 0),
  ];
  const r = computeAdvantages(samples, { estimator: 'turn-return' });
  // position 0: 2.805 − (0.95 + 1)/2 = 1.83; 0.95 − (2.805 + 1)/2 = −0.9525; 1 − (2.805 + 0.95)/2 = −0.8775
  // position 1: 1.9 − 1 = 0.9; 1 − 1.9 = −0.9.  position 2: e1 alone → 0
  assertClose(r.advantages, [1.83, 0.9, 0, -0.9525, -0.9, -0.8775]);
  assert.equal(r.diagnostics.sets, 3);
  assert.equal(r.diagnostics.singletonSets, 1);
});

test("turn-return: a turn's baseline holds nothing of its own episode (verl #7244)", () => {
  // Raising e1's last step reward by 1 raises e1's returns (G2 by 1, G1 by 0.95, G0 by 0.9025)
  // and its advantages by exactly as much; nothing else of e1 enters any baseline of e1.
  const base = [turnSample('e1', 0, [], 0, 0), turnSample('e1', 1, [0], 0, 0), turnSample('e2', 0, [], 0, 0), turnSample('e2', 1, [0], 0, 0)];
  const raised = base.map((s) => (s.sampleId === 'e1#1' ? { ...s, turnRewards: { step: 1 } } : s));
  const a = computeAdvantages(base, { estimator: 'turn-return' }).advantages;
  const b = computeAdvantages(raised, { estimator: 'turn-return' }).advantages;
  assertClose([b[0]! - a[0]!, b[1]! - a[1]!], [0.95, 1]);
  // e2's advantages drop by the same amounts: its baseline is e1's return.
  assertClose([b[2]! - a[2]!, b[3]! - a[3]!], [-0.95, -1]);
});

test('turn-return refuses a scope other than group-agent, naming the option', () => {
  assert.throws(() => computeAdvantages([turnSample('e', 0, [], 0, 0)], { estimator: 'turn-return', options: { scope: 'batch' } }), {
    name: 'RlInputError',
    message: 'options.scope: "batch" is not a scope of turn-return (it accepts group-agent)',
  });
});

test('turn-return: the gamma option sets the discount', () => {
  // γ 0.5, e1 steps [1, 0, 1], ok 1 → G2 = 2, G1 = 1, G0 = 1 + 0.5·1 = 1.5;
  // e2 steps [0, 1], ok 0 → G1 = 1, G0 = 0.5
  const samples = [
    turnSample('e1', 0, [], 1, 1),
    turnSample('e1', 1, [0], 0, 1),
    turnSample('e1', 2, [1], 1, 1),
    turnSample('e2', 0, [], 0, 0),
    turnSample('e2', 1, [0], 1, 0),
  ];
  const r = computeAdvantages(samples, { estimator: 'turn-return', options: { gamma: 0.5 } });
  // position 0: 1.5 − 0.5 = 1, 0.5 − 1.5 = −1; position 1: 1 − 1 = 0 twice; position 2: alone → 0
  assertClose(r.advantages, [1, 0, 0, -1, 0]);
  // γ 0: each turn's return is its own reward (the last one's plus the episode's)
  const z = computeAdvantages(samples, { estimator: 'turn-return', options: { gamma: 0 } });
  assertClose(z.advantages, [1, -1, 0, -1, 1]);
});

test('turn-return: gamma outside 0-1, or on an estimator that does not discount, is refused by name', () => {
  const one = [turnSample('e1', 0, [], 1, 1)];
  assert.throws(() => computeAdvantages(one, { estimator: 'turn-return', options: { gamma: 1.5 } }), /options\.gamma: must be a number from 0 to 1, got 1\.5/);
  assert.throws(
    () => computeAdvantages(one, { estimator: 'turn-return', options: { gamma: '0.9' as never } }),
    /options\.gamma: must be a number from 0 to 1, got "0\.9"/,
  );
  assert.throws(
    () => computeAdvantages(one, { estimator: 'at-grpo', options: { gamma: 0.9 } }),
    /options\.gamma: is not an option of at-grpo \(only turn-return, gigpo and hgpo\)/,
  );
});
