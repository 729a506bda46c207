// `troupe status` shows each agent's latest reward components and truncated/failed shares.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { agentStepLine, latestAgentSteps } from '../../../cli/commands/status';

it('takes each agent\'s latest train step, with its reward components and episode endings', () => {
  const agents = latestAgentSteps([
    { step: 1, scope: 'solver', name: 'truncatedShare', value: 0.875 },
    { step: 1, scope: 'solver', name: 'failedShare', value: 0 },
    { step: 1, scope: 'solver', name: 'reward.correct', value: 0 },
    { step: 0, scope: 'solver', name: 'reward.correct', value: 0.5 },
    { step: 0, scope: 'verifier', name: 'reward.judged', value: 2 },
    { step: 1, scope: 'team', name: 'episodes', value: 128 },
  ]);
  assert.deepEqual(agents, {
    solver: { step: 1, rewards: { correct: 0 }, truncatedShare: 0.875, failedShare: 0 },
    verifier: { step: 0, rewards: { judged: 2 } },
  });
  assert.equal(agentStepLine('solver', agents.solver!), 'solver (step 1): reward correct=0.000  truncated 88%  failed 0%');
  assert.equal(agentStepLine('verifier', agents.verifier!), 'verifier (step 0): reward judged=2.000  truncated -  failed -');
});
