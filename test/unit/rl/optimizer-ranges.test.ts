/**
 * Optimizer numbers the engine would refuse are refused when the config is
 * validated, naming the field, instead of failing every update of the run.
 * Reference: the engine's own request validation, fed what it receives on the
 * wire (every setting as float32).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { engineSettings } from '../../../activities/training/update-step';
import { updateSettings } from '../../../engines/onnx/validate';
import type { UpdateSettingsInput } from '../../../engines/protocol/types';
import { parseOverrides, resolveSettings } from '../../../schema/optimizer';
import { checkAgainstTeam, parseRunConfig } from '../../../schema/run-config';
import { mathTeam } from '../../../examples/teams/math';

/** What the engine does with settings after the float32 wire: accept (true) or refuse. */
function engineAccepts(overrides: Record<string, unknown>): boolean {
  const sent = engineSettings(resolveSettings(overrides, {}));
  const wire = Object.fromEntries(
    Object.entries(sent).map(([k, v]) => [k, typeof v === 'number' && k !== 'innerSteps' ? Math.fround(v) : v]),
  ) as UpdateSettingsInput;
  try {
    updateSettings(wire);
    return true;
  } catch {
    return false;
  }
}

const schemaAccepts = (overrides: Record<string, unknown>) => {
  try {
    parseOverrides(overrides);
    return true;
  } catch {
    return false;
  }
};

test('lr 1e300 is refused by field, not sent to the engine as Infinity', () => {
  assert.throws(() => parseOverrides({ lr: 1e300 }, 'optimizer.all'), {
    name: 'SettingsError',
    message: 'optimizer.all.lr: must be at most 3.4e38 in magnitude (the engine computes in float32), got 1e+300',
  });
  assert.throws(() => parseOverrides({ betas: [0.9, 0.9999999999] }, 'optimizer.all'), {
    message: 'optimizer.all.betas[1]: must be < 1; 0.9999999999 is 1 in float32, which the engine computes in',
  });
});

test('every value the schema accepts the engine accepts too, at the float32 edges', () => {
  const edges = [3.5e38, 3.4e38, 1e300, 1e-50, 1e-46, 1e-45, 0, 0.5, 0.9999999999, 0.99999, 1, 1.0000000001, 1.001, 2];
  const cases: Record<string, unknown>[] = [];
  for (const x of edges) {
    for (const k of ['lr', 'eps', 'weightDecay', 'gradClipMaxNorm', 'clipLow', 'clipHigh', 'dualClip', 'entropyCoef']) cases.push({ [k]: x }, { [k]: -x });
    cases.push({ betas: [x, 0.9] }, { betas: [0.9, x] }, { kl: { type: 'k1', coef: x } });
  }
  let accepted = 0;
  for (const c of cases) {
    if (!schemaAccepts(c)) continue;
    accepted++;
    assert.ok(engineAccepts(c), `the schema accepts ${JSON.stringify(c)} but the engine refuses it`);
  }
  assert.ok(accepted > 50, `only ${accepted} cases accepted: the edges do not exercise the accepting side`);
});

test('a setOptimizer change is checked the same way (the workflow validates it with checkAgainstTeam)', () => {
  const config = parseRunConfig({ team: 'math' });
  assert.throws(() => checkAgainstTeam({ ...config, optimizer: { all: { lr: 1e300 }, models: {}, agents: {} } }, mathTeam()), {
    name: 'RunConfigError',
    message: /optimizer\.models\.policy\.lr: must be at most 3\.4e38 in magnitude/,
  });
});
