/** Optimizer settings: defaults, agent ← model ← defaults merge, path-named errors. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  OPTIMIZER_DEFAULTS,
  optimizerSettingsSchema,
  parseOverrides,
  resolveSettings,
  SettingsError,
  toAdvantageSpec,
  toPolicyLossSettings,
} from '../../../schema/optimizer';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { sample } from './helpers';

const paths = { model: 'models.policy.optimizer', agent: 'agents.verifier.optimizer' };

test('an empty config resolves to the documented defaults', () => {
  const s = resolveSettings(undefined, undefined);
  assert.deepEqual(s, {
    lr: 1e-3,
    betas: [0.9, 0.999],
    eps: 1e-8,
    weightDecay: 0.01,
    gradClipMaxNorm: 1,
    clipLow: 0.2,
    clipHigh: 0.2,
    dualClip: 3,
    kl: { type: 'none', coef: 0.001 },
    entropyCoef: 0,
    lossAggregation: 'token-mean',
    rewardWeights: {},
    estimator: { name: 'grpo', scope: 'group-agent' },
  });
  assert.deepEqual(optimizerSettingsSchema().parse({}), s);
  assert.equal(OPTIMIZER_DEFAULTS.lr, s.lr);
});

test('agent overrides model overrides defaults, per field and per nested key', () => {
  const s = resolveSettings(
    { lr: 0.01, clipHigh: 0.28, kl: { type: 'low_var_kl' }, rewardWeights: { correct: 1, format: 0.2 }, estimator: { scope: 'group' } },
    { lr: 0.002, kl: { coef: 0.01 }, rewardWeights: { format: 0 } },
  );
  assert.equal(s.lr, 0.002); // agent
  assert.equal(s.clipHigh, 0.28); // model
  assert.equal(s.clipLow, 0.2); // default
  assert.deepEqual(s.kl, { type: 'low_var_kl', coef: 0.01 });
  assert.deepEqual(s.rewardWeights, { correct: 1, format: 0 });
  assert.deepEqual(s.estimator, { name: 'grpo', scope: 'group' });
});

test('normalizeStd is not inherited when the agent picks another estimator', () => {
  const s = resolveSettings({ estimator: { name: 'grpo', normalizeStd: false } }, { estimator: { name: 'rloo' } });
  assert.deepEqual(s.estimator, { name: 'rloo', scope: 'group-agent' });
  const same = resolveSettings({ estimator: { name: 'grpo', normalizeStd: false } }, { estimator: { name: 'grpo' } });
  assert.equal(same.estimator.normalizeStd, false);
});

test('errors carry the full path', () => {
  assert.throws(() => resolveSettings({}, { lr: 0 }, paths), { name: 'SettingsError', message: 'agents.verifier.optimizer.lr: must be > 0' });
  assert.throws(() => resolveSettings({ betas: [0.9, 1] }, {}, paths), /models\.policy\.optimizer\.betas\[1\]: must be < 1/);
  assert.throws(() => resolveSettings({}, { rewardWeights: { correct: NaN } }, paths), /agents\.verifier\.optimizer\.rewardWeights\.correct: /);
  assert.throws(() => resolveSettings({}, { learningRate: 1 }, paths), /agents\.verifier\.optimizer\.learningRate: unknown setting/);
  assert.throws(() => resolveSettings({}, { dualClip: 1 }, paths), /agents\.verifier\.optimizer\.dualClip: must be > 1/);
  assert.throws(
    () => resolveSettings({ kl: { type: 'k2' } }, {}, paths),
    /models\.policy\.optimizer\.kl\.type: unknown KL type "k2"; known: none, k1, low_var_kl/,
  );
});

test('both levels are checked before either error is thrown', () => {
  try {
    resolveSettings({ lr: -1 }, { clipLow: 1 }, paths);
    assert.fail('expected an error');
  } catch (e) {
    assert.ok(e instanceof SettingsError);
    assert.deepEqual(
      e.issues.map((i) => i.path),
      ['models.policy.optimizer.lr', 'agents.verifier.optimizer.clipLow'],
    );
  }
});

test('unknown estimator names are rejected using the registry’s names', () => {
  assert.throws(
    () => resolveSettings({}, { estimator: { name: 'ppo' } }, paths),
    /agents\.verifier\.optimizer\.estimator\.name: unknown estimator "ppo"; known: grpo, mc-grpo, gdpo, rloo, reinforce\+\+-baseline/,
  );
  assert.throws(() => parseOverrides({ estimator: { name: 'x' } }, 'agents.a.optimizer'), /agents\.a\.optimizer\.estimator\.name: unknown estimator "x"/);
});

test('normalizeStd on an estimator without it is rejected at the level that chose the estimator', () => {
  assert.throws(
    () => resolveSettings({}, { estimator: { name: 'gdpo', normalizeStd: true } }, paths),
    /agents\.verifier\.optimizer\.estimator\.normalizeStd: is not an option of gdpo/,
  );
});

test('gamma: a run-config option of the discounted estimators, named in its errors, not inherited across estimators', () => {
  const s = resolveSettings({ estimator: { name: 'turn-return', gamma: 0.8 } }, {});
  assert.deepEqual(toAdvantageSpec(s).options, { weights: {}, scope: 'group-agent', gamma: 0.8 });
  // the agent picks gigpo: the model's γ belonged to turn-return
  assert.equal(resolveSettings({ estimator: { name: 'turn-return', gamma: 0.8 } }, { estimator: { name: 'gigpo' } }).estimator.gamma, undefined);
  assert.equal(resolveSettings({ estimator: { name: 'gigpo', gamma: 0.8 } }, { estimator: { gamma: 0.5 } }).estimator.gamma, 0.5);
  assert.throws(
    () => resolveSettings({ estimator: { name: 'turn-return', gamma: -0.1 } }, {}, paths),
    /models\.policy\.optimizer\.estimator\.gamma: must be a number from 0 to 1, got -0\.1/,
  );
  assert.throws(
    () => resolveSettings({}, { estimator: { name: 'grpo', gamma: 0.9 } }, paths),
    /agents\.verifier\.optimizer\.estimator\.gamma: is not an option of grpo \(only turn-return, gigpo and hgpo\)/,
  );
});

test('resolved settings feed the registry and the loss directly', () => {
  const s = resolveSettings({ rewardWeights: { r: 2 } }, { estimator: { name: 'rloo', scope: 'batch' }, clipHigh: 0.28, kl: { type: 'k1' } });
  const spec = toAdvantageSpec(s);
  assert.deepEqual(spec, { estimator: 'rloo', options: { weights: { r: 2 }, scope: 'batch' } });
  // rewards [1, 0] weighted ×2 → scores [2, 0] → rloo: 2·(±1) = [2, −2]
  const r = computeAdvantages([sample({ reward: 1 }), sample({ reward: 0 })], spec);
  assert.deepEqual([...r.advantages], [2, -2]);
  assert.deepEqual(toPolicyLossSettings(s), { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, kl: { type: 'k1', coef: 0.001 }, entropyCoef: 0 });
});
