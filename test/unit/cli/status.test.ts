// `troupe status` shows each agent's latest reward components and truncated/failed shares.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { agentStepLine, correctionLabel, latestAgentSteps, offPolicyLine, partialLine } from '../../../cli/commands/status';

it("takes each agent's latest train step, with its reward components and episode endings", () => {
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

it("offPolicyLine: an asynchronous run's correction for one agent or model, with its staleness histogram", () => {
  assert.equal(
    offPolicyLine('solver', 3, {
      staleness: 1,
      'staleness.tokens.10': 4,
      'staleness.tokens.2': 30,
      'staleness.tokens.1': 340,
      'isWeight.mean': 1.0123,
      'isWeight.max': 2.5,
      'isWeight.truncated': 0.04,
      'isWeight.masked': 0.125,
      mismatch_kl: 0.00123,
      clipFraction: 0.1,
    }),
    'solver (step 3): staleness 1.00 (tokens by lag 1:340 2:30 10:4)  IS weight mean 1.012 max 2.500 truncated 4% masked 13%  mismatch KL 1.23e-3  clip 10%',
  );
  // a run stored before corrections were selectable: behaviourKl, no masked share, no histogram
  assert.equal(
    offPolicyLine('model policy', 2, { staleness: 2, behaviourKl: 0.5 }),
    'model policy (step 2): staleness 2.00  IS weight mean - max - truncated - masked -  mismatch KL 5.00e-1  clip -',
  );
  assert.equal(offPolicyLine('verifier', 0, {}), 'verifier (step 0): staleness -  IS weight mean - max - truncated - masked -  mismatch KL -  clip -');
});

it('correctionLabel: the correction a stored config gives a model', () => {
  assert.equal(correctionLabel({ team: 'math', staleness: 1 }, 'policy'), 'decoupled-ppo cap 5');
  assert.equal(correctionLabel({ team: 'math', staleness: 1, offPolicy: { correction: 'mis-sequence', cap: 2 } }, 'policy'), 'mis-sequence cap 2');
  assert.equal(correctionLabel({ team: 'math', staleness: 1, offPolicy: { models: { policy: { correction: 'icepop' } } } }, 'policy'), 'icepop band [0.5, 5]');
  assert.equal(correctionLabel({ team: 'math', bogus: 1 }, 'policy'), '');
});

it('partialLine: a partial-rollout step, what it ran and what it carried', () => {
  assert.equal(
    partialLine(4, {
      'partial.groups': 6,
      'partial.rounds': 9,
      'partial.carriedEpisodes': 4,
      'partial.carriedGroups': 2,
      'partial.carriedMaxAge': 1,
      'partial.trainedMaxAge': 2,
      'partial.heldGroups': 1,
      'partial.generatedTokens': 300,
      'partial.replayedTokens': 40,
    }),
    'partial rollouts (step 4): groups 6 in 9 rounds  carried 4 episodes in 2 groups, oldest 1 steps  trained oldest 2 steps, held 1 groups  tokens sampled 300, served from the store 40',
  );
  assert.equal(
    partialLine(0, { 'partial.groups': 4 }),
    'partial rollouts (step 0): groups 4 in - rounds  carried - episodes in - groups, oldest - steps  trained oldest - steps, held - groups  tokens sampled -, served from the store -',
  );
});
