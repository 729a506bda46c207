/** The turn graph of turn-level estimators: agent-restricted edges, positions, returns. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { agentParents, turnPlaces, turnReturns } from '../../../rl/turn-graph';
import { assertClose, turnSample } from './helpers';

test('agentParents passes through other agents and drops edges implied by a chain', () => {
  // A0 → B1 → A2 (A2 also remembers A0) → B3 (remembers B1) → A4 (remembers A2, hears B3)
  const turns = [
    { index: 0, agent: 'A', parents: [] },
    { index: 1, agent: 'B', parents: [0] },
    { index: 2, agent: 'A', parents: [0, 1] },
    { index: 3, agent: 'B', parents: [1, 2] },
    { index: 4, agent: 'A', parents: [2, 3] },
  ];
  // A4 reaches A2 directly and A0 and A2 through B3; A0 is above A2, so only A2 stays.
  assert.deepEqual(agentParents(turns), [[], [], [0], [1], [2]]);
});

test('agentParents keeps parallel branches apart and joins them where a turn hears both', () => {
  // A0 fans out to B1 and B2 (parallel), B3 hears both
  const turns = [
    { index: 0, agent: 'A', parents: [] },
    { index: 1, agent: 'B', parents: [0] },
    { index: 2, agent: 'B', parents: [0] },
    { index: 3, agent: 'B', parents: [1, 2] },
  ];
  assert.deepEqual(agentParents(turns), [[], [], [], [1, 2]]);
});

test('turnReturns: a chain discounts with γ, the episode reward arrives after the last turn', () => {
  // chain 0 → 1 → 2, step rewards [1, 0, 1], episode reward 1, γ = 0.5:
  // G2 = 1 + 1 = 2; G1 = 0 + 0.5·2 = 1; G0 = 1 + 0.5·1 = 1.5
  const s = [turnSample('e', 0, [], 1, 1), turnSample('e', 1, [0], 0, 1), turnSample('e', 2, [1], 1, 1)];
  const places = turnPlaces(s, 'test');
  assert.deepEqual([...places.position], [0, 1, 2]);
  assertClose(turnReturns(s, places, {}, 0.5), [1.5, 1, 2]);
});

test('turnReturns: parallel branches do not share credit; their parent averages them', () => {
  // 0 → 1 and 0 → 2 (parallel); step rewards r0 = 0, r1 = 1, r2 = 0; no episode reward; γ = 0.9
  // G1 = 1, G2 = 0 (nothing from branch 1), G0 = 0 + 0.9·mean(1, 0) = 0.45
  const s = [turnSample('e', 0, [], 0, 0), turnSample('e', 1, [0], 1, 0), turnSample('e', 2, [0], 0, 0)];
  assertClose(turnReturns(s, turnPlaces(s, 'test'), {}, 0.9), [0.45, 1, 0]);
});

test('turnReturns weighs episode and turn components with the reward weights', () => {
  // one turn: 2·step + 3·ok = 2·1 + 3·1 = 5
  const s = [turnSample('e', 0, [], 1, 1)];
  assertClose(turnReturns(s, turnPlaces(s, 'test'), { step: 2, ok: 3 }, 0.9), [5]);
});

test('turnPlaces names the estimator and the sample when a graph field is missing', () => {
  const s = [turnSample('e', 0, [], 0, 0, { turn: undefined })];
  assert.throws(() => turnPlaces(s, 'turn-return'), {
    name: 'RlInputError',
    message: 'samples[0].turn: is required by estimator turn-return (sample e#0)',
  });
});
