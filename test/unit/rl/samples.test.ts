/** Sample validation: errors name the field and the sample index. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { RlInputError } from '../../../rl/errors';
import { scoreOf, validateSamples } from '../../../rl/samples';
import { sample } from './helpers';

const fourSamples = () => [sample(), sample(), sample(), sample()] as unknown as Record<string, unknown>[];

test('a NaN reward names the sample and the component', () => {
  const samples = fourSamples();
  samples[3]!.rewards = { correct: NaN };
  assert.throws(() => computeAdvantages(samples, { estimator: 'grpo' }), {
    name: 'RlInputError',
    message: 'samples[3].rewards.correct: must be a finite number, got NaN',
  });
});

test('a missing group id is reported as required', () => {
  const samples = fourSamples();
  delete samples[2]!.groupId;
  assert.throws(() => validateSamples(samples), /^RlInputError: samples\[2\]\.groupId: is required \(a non-empty string\)$/);
});

test('several issues are reported together, each with its path', () => {
  const samples = fourSamples();
  samples[0]!.trainableTokens = -1;
  samples[1]!.agentId = '';
  samples[2]!.rewards = { score: Infinity };
  try {
    validateSamples(samples);
    assert.fail('expected an error');
  } catch (e) {
    assert.ok(e instanceof RlInputError);
    assert.deepEqual(
      e.issues.map((i) => i.path),
      ['samples[0].trainableTokens', 'samples[1].agentId', 'samples[2].rewards.score'],
    );
  }
});

test('duplicate sample ids and an episode in two groups are rejected', () => {
  const a = sample({ sampleId: 'x' });
  const b = sample({ sampleId: 'x' });
  assert.throws(() => validateSamples([a, b]), /samples\[1\]\.sampleId: duplicate sample id "x" \(also samples\[0\]\)/);
  const c = sample({ episodeId: 'e', groupId: 'g1' });
  const d = sample({ episodeId: 'e', groupId: 'g2' });
  assert.throws(() => validateSamples([c, d]), /samples\[1\]\.groupId: episode "e" is in group "g1" \(samples\[0\]\) and "g2"/);
});

test('a non-array or non-object input is rejected', () => {
  assert.throws(() => validateSamples({}), /samples: must be an array of samples, got object/);
  assert.throws(() => validateSamples([null]), /samples\[0\]: must be an object, got null/);
});

test('score is Σ w_j r_j with missing weights = 1 and missing components = 0', () => {
  // 2·1 + 1·3 (no weight for "style") = 5
  assert.equal(scoreOf(sample({ rewards: { correct: 1, style: 3 } }), { correct: 2, absent: 7 }), 5);
});

test('turn fields are checked, naming the field', () => {
  const s = [sample({ rewards: { ok: 1 }, turnRewards: { ok: 2, step: Infinity }, turn: 1, after: [1, -1], contextHash: '' })] as unknown[];
  try {
    validateSamples(s);
    assert.fail('expected an error');
  } catch (e) {
    assert.ok(e instanceof RlInputError);
    assert.deepEqual(
      e.issues.map((i) => `${i.path}: ${i.message}`),
      [
        'samples[0].turnRewards.ok: is also an episode reward component (rewards); a name is one or the other',
        'samples[0].turnRewards.step: must be a finite number, got Infinity',
        'samples[0].after[0]: must be an earlier turn than 1, got 1',
        'samples[0].after[1]: must be a non-negative integer, got -1',
        'samples[0].contextHash: must be a non-empty string, got ""',
      ],
    );
  }
});

test('scoreOf adds episode and per-turn components, each with its weight', () => {
  // 2·1 + 3·0.5 = 3.5
  assert.equal(scoreOf(sample({ rewards: { ok: 1 }, turnRewards: { step: 0.5 } }), { ok: 2, step: 3 }), 3.5);
});
