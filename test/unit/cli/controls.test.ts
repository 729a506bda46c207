// `troupe set`: the change its flags describe, and every problem of a change named at once.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { changeOf } from '../../../cli/commands/set';
import { mathTeam } from '../../../examples/teams/math';
import { optimizerChangeIssues, parseRunConfig } from '../../../schema/run-config';

it('changeOf: --json as given, or the flags for every model, one model or one agent', () => {
  assert.deepEqual(changeOf({ json: '{"agents": {"solver": {"clipHigh": 0.28}}}' }), { agents: { solver: { clipHigh: 0.28 } } });
  assert.deepEqual(changeOf({ lr: 0.0005 }), { all: { lr: 0.0005 } });
  assert.deepEqual(changeOf({ lr: 0.01, 'kl-coef': 0.1, model: 'policy' }), { models: { policy: { lr: 0.01, kl: { coef: 0.1 } } } });
  assert.deepEqual(changeOf({ 'entropy-coef': 0.001, agent: 'verifier' }), { agents: { verifier: { entropyCoef: 0.001 } } });
  assert.throws(() => changeOf({}), /set: name a change/);
  assert.throws(() => changeOf({ json: '{"all": {}}', lr: 1 }), /either --json or settings flags/);
  assert.throws(() => changeOf({ json: '{lr' }), /--json: not JSON/);
});

it('a change with several problems reports every one, also those found only against the team', () => {
  const config = parseRunConfig({ team: 'math' });
  const team = mathTeam();
  assert.deepEqual(optimizerChangeIssues({ all: { lr: -1 }, agents: { ghost: {} }, models: { nope: { lr: 1 } } }, config, team), [
    { path: 'all.lr', message: 'must be > 0' },
    { path: 'models.nope', message: 'unknown model (team math has: policy)' },
    { path: 'agents.ghost', message: 'unknown agent (team math has: solver, verifier)' },
  ]);
  assert.deepEqual(optimizerChangeIssues({ all: { lr: 0.01 } }, config, team), []);
  // a problem only the merged settings show: an estimator option the estimator lacks
  assert.deepEqual(
    optimizerChangeIssues({ models: { policy: { estimator: { name: 'rloo', normalizeStd: true } } } }, config, team).map((i) => i.path),
    ['models.policy.estimator.normalizeStd'],
  );
});
