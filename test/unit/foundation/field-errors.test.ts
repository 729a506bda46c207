/** One field-path error type: every bad-input error is a FieldError whose one-line message lists every issue. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { validateSamples } from '../../../rl/samples';
import { RlInputError } from '../../../rl/errors';
import { resolveSettings, SettingsError } from '../../../schema/optimizer';
import { FieldError } from '../../../infra/issues';
import { parseRunConfig, RunConfigError } from '../../../schema/run-config';

const errorOf = (fn: () => unknown): Error => {
  try {
    fn();
  } catch (e) {
    return e as Error;
  }
  assert.fail('expected an error');
};

test('run config, optimizer settings and RL-core input errors are one FieldError type', () => {
  const config = errorOf(() => parseRunConfig({ team: 'math', steps: -1, seed: -1 }));
  const settings = errorOf(() => resolveSettings({ lr: -1 }, { clipLow: 1 }, { model: 'm', agent: 'a' }));
  const rl = errorOf(() => validateSamples([{}, {}]));
  for (const [e, name] of [
    [config, 'RunConfigError'],
    [settings, 'SettingsError'],
    [rl, 'RlInputError'],
  ] as const) {
    assert.ok(e instanceof FieldError, `${name} is a FieldError`);
    assert.equal(e.name, name);
    assert.ok(e.issues.length >= 2, `${name} carries every issue`);
    // One line with every issue: the CLI prints only an error's first line.
    assert.equal(e.message.split('\n').length, 1, e.message);
    for (const i of e.issues) assert.ok(e.message.includes(`${i.path}: ${i.message}`), `${name} message names ${i.path}`);
  }
  assert.ok(config instanceof RunConfigError && settings instanceof SettingsError && rl instanceof RlInputError);
  assert.equal(config.message, 'invalid run config: steps: must be >= 0; seed: must be >= 0');
  assert.equal(settings.message, 'm.lr: must be > 0; a.clipLow: must be < 1');
});
