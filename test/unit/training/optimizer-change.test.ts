/**
 * setOptimizer's change: its own strict schema (one issue per problem, at the
 * path the user sent) and the one merge rule shared by the run config, the
 * workflow and the CLI. Expected values written out by hand.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { applyOptimizerChange, mergeOverrides, parseOptimizerChange, SettingsError } from '../../../schema/optimizer';

const issuesOf = (input: unknown) => {
  try {
    parseOptimizerChange(input);
  } catch (e) {
    assert.ok(e instanceof SettingsError, String(e));
    return e.issues;
  }
  return assert.fail(`accepted ${JSON.stringify(input)}`);
};

describe('optimizer change', () => {
  it('rejects anything but an object of all/models/agents, with one issue each at the path sent', () => {
    for (const junk of [42, 'lr=0.01', [], null, undefined, true]) {
      const issues = issuesOf(junk);
      assert.equal(issues.length, 1);
      assert.equal(issues[0]!.path, '(change)');
      assert.match(issues[0]!.message, /must be a JSON object/);
    }
    assert.deepEqual(issuesOf({ model: { policy: { lr: 0.01 } } }), [{ path: 'model', message: 'unknown field (a change has all, models, agents)' }]);
    assert.deepEqual(issuesOf({ models: { policy: { lr: -1 } } }), [{ path: 'models.policy.lr', message: 'must be > 0' }]);
    assert.deepEqual(
      issuesOf({ all: { lr: 'fast' } }).map((i) => i.path),
      ['all.lr'],
    );
    assert.deepEqual(issuesOf({ agents: { solver: { kl: { coef: -1, kind: 'k3' } } } }), [
      { path: 'agents.solver.kl.coef', message: 'must be ≥ 0' },
      { path: 'agents.solver.kl.kind', message: 'unknown setting' },
    ]);
    assert.deepEqual(parseOptimizerChange({ models: { policy: { lr: 0.05 } } }), { models: { policy: { lr: 0.05 } } });
    assert.deepEqual(parseOptimizerChange({}), {});
  });

  it('merges per field, and kl / estimator / rewardWeights per key', () => {
    assert.deepEqual(mergeOverrides({ lr: 1, kl: { type: 'k1' }, rewardWeights: { a: 1 } }, undefined, { lr: 2, kl: { coef: 0.1 }, rewardWeights: { b: 2 } }), {
      lr: 2,
      kl: { type: 'k1', coef: 0.1 },
      rewardWeights: { a: 1, b: 2 },
    });
    assert.deepEqual(mergeOverrides({ estimator: { name: 'grpo', scope: 'group' } }, { estimator: { scope: 'batch' } }), {
      estimator: { name: 'grpo', scope: 'batch' },
    });
    const base = { all: { lr: 0.001 }, models: { policy: { clipHigh: 0.28 } }, agents: {} };
    assert.deepEqual(applyOptimizerChange(base, { models: { policy: { lr: 0.05 } }, agents: { solver: { rewardWeights: { correct: 2 } } } }), {
      all: { lr: 0.001 },
      models: { policy: { clipHigh: 0.28, lr: 0.05 } },
      agents: { solver: { rewardWeights: { correct: 2 } } },
    });
    assert.deepEqual(applyOptimizerChange({ models: {}, agents: {} }, { all: { eps: 1e-6 } }), { all: { eps: 1e-6 }, models: {}, agents: {} });
    assert.deepEqual(base, { all: { lr: 0.001 }, models: { policy: { clipHigh: 0.28 } }, agents: {} }, 'base unchanged');
  });
});
