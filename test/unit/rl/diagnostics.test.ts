/** Per-agent step diagnostics. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { mergeLossDiagnostics, stepDiagnostics } from '../../../rl/diagnostics';
import { policyLoss } from '../../../rl/loss-reference';
import { assertClose, sample } from './helpers';

test('advantage stats and zero-advantage groups per agent', () => {
  const samples = [
    // solver: group a [1, 2, 3] → grpo [−1, 0, 1]/(1 + 1e-6); group b [4, 4] → zeros
    sample({ groupId: 'a', reward: 1 }),
    sample({ groupId: 'a', reward: 2 }),
    sample({ groupId: 'a', reward: 3 }),
    sample({ groupId: 'b', reward: 4 }),
    sample({ groupId: 'b', reward: 4 }),
    // verifier: group a [0, 0] → zeros
    sample({ groupId: 'a', agentId: 'verifier', reward: 0 }),
    sample({ groupId: 'a', agentId: 'verifier', reward: 0 }),
  ];
  const result = computeAdvantages(samples, { estimator: 'grpo' });
  const loss = policyLoss({ logp: [Math.log(1.5), 0], logpOld: [0, 0], advantages: [1, 1], weights: [0.5, 0.5], entropy: [1, 3] });
  const d = stepDiagnostics(samples, result, { solver: loss.diagnostics });

  const a = 1 / (1 + 1e-6);
  // solver advantages [−a, 0, a, 0, 0]: mean 0; unbiased std = √(2a²/4) = a/√2; min −a, max a
  assertClose([d.solver!.advantage.mean, d.solver!.advantage.std, d.solver!.advantage.min, d.solver!.advantage.max], [0, a / Math.SQRT2, -a, a]);
  assert.equal(d.solver!.groups, 2);
  assert.equal(d.solver!.zeroAdvantageGroupFraction, 0.5); // group b
  assert.equal(d.verifier!.zeroAdvantageGroupFraction, 1);
  // loss: token 0 ratio 1.5 > 1.2 with A > 0 → clipped; token 1 ratio 1 → not; entropy mean (1 + 3)/2
  assert.equal(d.solver!.clipFraction, 0.5);
  assert.equal(d.solver!.entropy, 2);
  assertClose([d.solver!.approxKl ?? NaN], [(0.5 - Math.log(1.5)) / 2]);
  assert.equal(d.verifier!.clipFraction, null);
});

test('excluded samples (MC-GRPO pivots) are left out of the advantage stats', () => {
  // [1, 0, 0] → pivot excluded; trained advantages [1000, 0]
  const samples = [sample({ sampleId: 'a', reward: 1 }), sample({ sampleId: 'b', reward: 0 }), sample({ sampleId: 'c', reward: 0 })];
  const d = stepDiagnostics(samples, computeAdvantages(samples, { estimator: 'mc-grpo' }));
  assert.equal(d.solver!.samples, 3);
  assert.equal(d.solver!.trainedSamples, 2);
  assertClose([d.solver!.advantage.mean, d.solver!.advantage.max], [500, 1000]);
  assert.equal(d.solver!.zeroAdvantageGroupFraction, 0);
});

test('merging loss diagnostics of token slices is token-weighted', () => {
  const m = mergeLossDiagnostics([
    { tokens: 1, clipFraction: 1, dualClipFraction: 0, approxKl: 0.3, entropy: null, ratioMean: 2, ratioMax: 2 },
    { tokens: 3, clipFraction: 0, dualClipFraction: 0, approxKl: 0.1, entropy: 1, ratioMean: 1, ratioMax: 1.1 },
  ]);
  // clip (1·1 + 3·0)/4 = 0.25; KL (0.3 + 0.3)/4 = 0.15; ratio (2 + 3)/4 = 1.25; entropy only from the slice that has it
  assertClose([m.clipFraction, m.approxKl, m.ratioMean, m.ratioMax, m.entropy ?? NaN], [0.25, 0.15, 1.25, 2, 1]);
  assert.equal(m.tokens, 4);
});

test('advantage by turn position and the share of turns in step groups, over trained turns', () => {
  // e1: turns with advantages 1, 2; e2: 3, and 5 excluded → position 0: (1 + 3)/2 = 2, position 1: 2
  const samples = [sample({ episodeId: 'e1' }), sample({ episodeId: 'e1' }), sample({ episodeId: 'e2' }), sample({ episodeId: 'e2' })];
  const d = stepDiagnostics(samples, { advantages: [1, 2, 3, 5], excluded: [false, false, false, true], sharedStep: [true, false, false, true] });
  assert.deepEqual(d.solver!.advantageByPosition, [2, 2]);
  // 1 of the 3 trained turns is in a shared step group
  assert.equal(d.solver!.stepGroupShare, 1 / 3);
  assert.equal(stepDiagnostics(samples, { advantages: [1, 2, 3, 5], excluded: [false, false, false, false] }).solver!.stepGroupShare, null);
});
