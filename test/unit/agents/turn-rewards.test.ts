/** Per-turn rewards: a reward function's `{ episode, turn }` form, read and checked. */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readRewards } from '../../../agents/rewards';

test('a plain object is episode components, as before', () => {
  assert.deepEqual(readRewards({ correct: 1, format: 0.5 }, 'rewards.solver'), { components: { correct: 1, format: 0.5 } });
  assert.deepEqual(readRewards(undefined, 'rewards.solver'), { components: {} });
});

test('{ episode, turn } keeps every component and marks the per-turn ones', () => {
  assert.deepEqual(readRewards({ episode: { correct: 1 }, turn: { step: 0.25, tool: -1 } }, 'rewards.solver'), {
    components: { correct: 1, step: 0.25, tool: -1 },
    perTurn: ['step', 'tool'],
  });
  assert.deepEqual(readRewards({ turn: { step: 1 } }, 'rewards.solver'), { components: { step: 1 }, perTurn: ['step'] });
  // only episode components: nothing per turn
  assert.deepEqual(readRewards({ episode: { correct: 0 } }, 'rewards.solver'), { components: { correct: 0 } });
});

test('problems name the field', () => {
  assert.equal(readRewards({ correct: NaN }, 'rewards.solver'), 'rewards.solver.correct: must be a finite number, got NaN');
  assert.equal(readRewards({ turn: { step: 'x' } }, 'rewards.solver'), 'rewards.solver.turn.step: must be a finite number, got "x"');
  assert.equal(
    readRewards({ episode: { a: 1 }, turn: { a: 2 } }, 'rewards.solver'),
    'rewards.solver.turn.a: is also an episode component; a name is one or the other',
  );
  assert.equal(
    readRewards({ episode: { a: 1 }, steps: { b: 2 } }, 'rewards.solver'),
    'rewards.solver.steps: unknown part (a split reward has episode and turn)',
  );
  assert.equal(readRewards({ turn: [1] }, 'rewards.solver'), 'rewards.solver.turn: must be an object of named numbers, got an array');
  assert.equal(readRewards(3, 'rewards.solver'), 'rewards.solver: must return an object of named numbers or { episode, turn }, got 3');
});
