/** AT-GRPO: GRPO over (task group, agent, turn position). */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { AT_GRPO_EPS } from '../../../rl/advantages/at-grpo';
import { assertClose, turnSample } from './helpers';

test('at-grpo: each turn against the same agent’s turns at its position', () => {
  const samples = [
    // solver scores s = step + ok: e1 [2, 1, 2], e2 [0, 1], e3 [1]
    turnSample('e1', 0, [], 1, 1),
    turnSample('e1', 1, [0], 0, 1),
    turnSample('e1', 2, [1], 1, 1),
    turnSample('e2', 0, [], 0, 0),
    turnSample('e2', 1, [0], 1, 0),
    turnSample('e3', 0, [], 1, 0),
    // a verifier in e1 and e2 at its own position 0: scores 5 and 3
    turnSample('e1', 3, [], 4, 1, { agentId: 'verifier' }),
    turnSample('e2', 2, [], 3, 0, { agentId: 'verifier' }),
  ];
  const r = computeAdvantages(samples, { estimator: 'at-grpo' });
  // solver position 0: {2, 0, 1} mean 1, std 1 → [1, −1, 0]/(1 + ε)
  // solver position 1: {1, 1} std 0 → 0; position 2: e1 alone → 0
  // verifier position 0: {5, 3} mean 4, std √2 → ±1/(√2 + ε)
  const one = 1 / (1 + AT_GRPO_EPS);
  const v = 1 / (Math.SQRT2 + AT_GRPO_EPS);
  assertClose(r.advantages, [one, 0, 0, -one, 0, 0, v, -v]);
  assert.equal(r.diagnostics.sets, 4);
  assert.equal(r.diagnostics.singletonSets, 1);
});

test('at-grpo: normalizeStd false is s − mean of the position', () => {
  const r = computeAdvantages([turnSample('e1', 0, [], 1, 1), turnSample('e2', 0, [], 0, 0), turnSample('e3', 0, [], 0, 1)], {
    estimator: 'at-grpo',
    options: { normalizeStd: false },
  });
  // scores {2, 0, 1}, mean 1
  assertClose(r.advantages, [1, -1, 0]);
});
