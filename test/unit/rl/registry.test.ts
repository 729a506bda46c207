/** The registry: dispatch by name, option checks, per-role estimator choice. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  computeAdvantages,
  computeAdvantagesByAgent,
  ESTIMATOR_NAMES,
  estimatorsWith,
  getEstimator,
  normalizeStdMessage,
} from '../../../rl/advantages/registry';
import { RlInputError } from '../../../rl/errors';
import { assertClose, sample } from './helpers';

test('every registered estimator is reachable by its name', () => {
  assert.deepEqual([...ESTIMATOR_NAMES], ['grpo', 'mc-grpo', 'gdpo', 'rloo', 'reinforce++-baseline', 'turn-return', 'gigpo', 'at-grpo', 'salt', 'hgpo']);
  for (const name of ESTIMATOR_NAMES) assert.equal(getEstimator(name).name, name);
});

test('an unknown estimator name is rejected, listing the known ones', () => {
  assert.throws(
    () => computeAdvantages([sample()], { estimator: 'ppo-gae' }),
    (e: unknown) =>
      e instanceof RlInputError &&
      e.message === 'estimator: unknown estimator "ppo-gae"; known: grpo, mc-grpo, gdpo, rloo, reinforce++-baseline, turn-return, gigpo, at-grpo, salt, hgpo',
  );
});

test('capabilities are declared by the estimators and read through the registry', () => {
  assert.deepEqual(estimatorsWith('supportsNormalizeStd'), ['grpo', 'mc-grpo', 'gigpo', 'at-grpo', 'salt', 'hgpo']);
  assert.deepEqual(estimatorsWith('perComponent'), ['gdpo']);
  assert.equal(normalizeStdMessage('rloo'), 'is not an option of rloo (only grpo, mc-grpo, gigpo, at-grpo, salt and hgpo)');
});

test('options are checked against the estimator', () => {
  assert.throws(
    () => computeAdvantages([sample()], { estimator: 'rloo', options: { normalizeStd: false } }),
    /options\.normalizeStd: is not an option of rloo/,
  );
  assert.throws(
    () => computeAdvantages([sample()], { estimator: 'grpo', options: { scope: 'episode' as never } }),
    /options\.scope: must be one of group-agent, group, group-agent-episode, batch, got "episode"/,
  );
  assert.throws(
    () => computeAdvantages([sample()], { estimator: 'grpo', options: { weights: { correct: NaN } } }),
    /options\.weights\.correct: must be a finite number, got NaN/,
  );
  assert.throws(() => computeAdvantages([sample()], { estimator: 'grpo', options: { normalise: true } as never }), /options\.normalise: unknown option/);
});

test('per-role estimators: each role runs its own estimator through the registry, order preserved', () => {
  const samples = [
    sample({ agentId: 'solver', reward: 1 }),
    sample({ agentId: 'verifier', reward: 1, sampleId: 'v1' }),
    sample({ agentId: 'solver', reward: 2 }),
    sample({ agentId: 'verifier', reward: 0, sampleId: 'v2' }),
    sample({ agentId: 'solver', reward: 3 }),
    sample({ agentId: 'verifier', reward: 0, sampleId: 'v3' }),
  ];
  const r = computeAdvantagesByAgent(samples, {
    solver: { estimator: 'rloo' },
    verifier: { estimator: 'mc-grpo' },
  });
  // solver rloo on [1, 2, 3] → [−1.5, 0, 1.5]
  // verifier mc-grpo on [1, 0, 0] → pivot v3 (ties by id: v2 < v3), A = [1000, 0, 0]
  assertClose(r.advantages, [-1.5, 1000, 0, 0, 1.5, 0]);
  assert.deepEqual(r.excluded, [false, false, false, false, false, true]);
  assert.equal(r.diagnostics.solver!.estimator, 'rloo');
  assert.equal(r.diagnostics.verifier!.estimator, 'mc-grpo');

  // Same numbers as calling the registry on each subset.
  const solverOnly = computeAdvantages(
    samples.filter((s) => s.agentId === 'solver'),
    { estimator: 'rloo' },
  );
  assertClose([r.advantages[0]!, r.advantages[2]!, r.advantages[4]!], solverOnly.advantages);
});

test('per-role estimators: a role without a configured estimator is an error naming it', () => {
  const samples = [sample({ agentId: 'solver' }), sample({ agentId: 'critic' })];
  assert.throws(
    () => computeAdvantagesByAgent(samples, { solver: { estimator: 'grpo' } }),
    /samples\[1\]\.agentId: no estimator configured for agent "critic" \(configured: solver\)/,
  );
  assert.throws(
    () => computeAdvantagesByAgent(samples, { solver: { estimator: 'grpo' }, critic: { estimator: 'nope' } }),
    /byAgent\.critic\.estimator: unknown estimator "nope"/,
  );
});
