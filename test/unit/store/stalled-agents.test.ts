/** The stalled-agent rule (activities/store/stalled-agents.ts) on hand-written step rows. */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { stalledAgents, type AgentStepRow } from '../../../activities/store/stalled-agents';

/** An agent's steps 0.. from [zero-advantage fraction, reward] pairs. */
const steps = (agent: string, xs: Array<[number, number]>): AgentStepRow[] =>
  xs.map(([zeroAdvantageGroupFraction, reward], step) => ({ agent, step, zeroAdvantageGroupFraction, reward }));

it('an agent whose last 5+ steps had no signal, below its first reward, is stalled from the streak start', () => {
  // math's verifier at staleness 1: judged 0.945 at step 0, learning, then 0 with every group equal from step 3
  const verifier = steps('verifier', [
    [0.2, 0.945],
    [0.1, 2.6],
    [0.5, 0.4],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
  ]);
  assert.deepEqual(stalledAgents(verifier), [{ agent: 'verifier', since: 3, steps: 6, reward: 0, firstReward: 0.945 }]);
  // rows in any order give the same answer
  assert.deepEqual(stalledAgents([...verifier].reverse()), stalledAgents(verifier));
});

it('equal rewards at or above the first step are a solved task; a short streak or a never-moving agent is not a stall', () => {
  const solved = steps('verifier', [
    [0.2, 0.945],
    [0.3, 4],
    [1, 10],
    [1, 10],
    [1, 10],
    [1, 10],
    [1, 10],
  ]);
  const short = steps('solver', [
    [0.2, 0.5],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
  ]); // 4 steps
  const broken = steps('judge', [
    [0.5, 1],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
    [0.9, 0.2],
  ]); // the last step has a signal again
  const never = steps('idle', [
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
    [1, 0],
  ]); // no step before the streak
  assert.deepEqual(stalledAgents([...solved, ...short, ...broken, ...never]), []);
  // the streak's mean reward counts, not its last step's: 0.2 mean against a first step of 0.3
  const mixed = steps('a', [
    [0, 0.3],
    [1, 0],
    [1, 0.5],
    [1, 0],
    [1, 0.5],
    [1, 0],
  ]);
  assert.deepEqual(stalledAgents(mixed), [{ agent: 'a', since: 1, steps: 5, reward: 0.2, firstReward: 0.3 }]);
  assert.deepEqual(stalledAgents(mixed, 6), []);
});
