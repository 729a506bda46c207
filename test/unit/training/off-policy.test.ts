/** The off-policy correction of a stale rollout's update: hand-computed weights, samples and metrics. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { offPolicyCorrection, STALENESS_TOKENS } from '../../../activities/training/off-policy';
import type { UpdateSequence } from '../../../activities/training/batch';

const seq = (agent: string, version: number, oldLogprobs: number[], mask: number[], advantages: number[]): UpdateSequence => ({
  agent,
  version,
  context: [1],
  tokens: oldLogprobs.map(() => 2),
  mask,
  advantages,
  oldLogprobs,
  weights: mask.map((m) => m / 4),
});
const close = (a: number, b: number) => assert.ok(Math.abs(a - b) < 1e-9, `expected ${b}, got ${a}`);

const samplesOf = (sequences: UpdateSequence[]) =>
  sequences.map((q) => ({
    context: q.context,
    tokens: q.tokens,
    lossMask: q.mask,
    advantages: q.advantages,
    oldLogprobs: q.oldLogprobs,
    lossWeights: q.weights,
  }));

describe('offPolicyCorrection', () => {
  it("by default scales trained tokens' advantages by min(π_base/π_behaviour, cap), takes the base log-probs as old, and reports per model and agent", () => {
    // solver sampled by version 1, base 3: tokens log ρ = ln 2 (w 2), ln 4 (ρ 4 > cap 3: w 3), tool token (mask 0) untouched.
    // verifier sampled by version 3 (= base): ρ = 1.
    const sequences = [seq('solver', 1, [-2, -3, 0], [1, 1, 0], [0.5, 0.5, 0.5]), seq('verifier', 3, [-1], [1], [-1])];
    const samples = samplesOf(sequences);
    const base = [[-2 + Math.log(2), -3 + Math.log(4), -9], [-1]];
    const r = offPolicyCorrection(sequences, samples, base, 3, { importanceCap: 3 });
    r.samples[0]!.advantages.forEach((a, t) => close(a, [1, 1.5, 0.5][t]!));
    assert.deepEqual(r.samples[0]!.oldLogprobs, [base[0]![0], base[0]![1], 0]);
    assert.deepEqual(r.samples[1]!.advantages, [-1]);
    assert.deepEqual(r.samples[0]!.lossWeights, samples[0]!.lossWeights);
    // solver: staleness 2 (its 2 trained tokens at lag 2), w mean (2 + 3)/2, max 3, truncated 1/2, KL (2 − 1 − ln 2 + 4 − 1 − ln 4)/2
    const solver = r.agents.solver!;
    assert.deepEqual(
      [
        solver.staleness,
        solver['isWeight.mean'],
        solver['isWeight.max'],
        solver['isWeight.truncated'],
        solver['isWeight.masked'],
        solver['staleness.tokens.2'],
      ],
      [2, 2.5, 3, 0.5, 0, 2],
    );
    close(solver.mismatch_kl, (1 - Math.log(2) + 3 - Math.log(4)) / 2);
    assert.deepEqual(r.agents.verifier, {
      staleness: 0,
      'isWeight.mean': 1,
      'isWeight.max': 1,
      'isWeight.truncated': 0,
      'isWeight.masked': 0,
      mismatch_kl: 0,
      baselineShift: 0,
      'isWeight.ess': 1,
      'staleness.tokens.0': 1,
    });
    // effective sample share (Σw)²/(N·Σw²): solver (2 + 3)²/(2·(4 + 9)) = 25/26; the model's (2 + 3 + 1)²/(3·14) = 6/7 scales its lr
    close(solver['isWeight.ess'], 25 / 26);
    close(r.model['isWeight.ess'], 6 / 7);
    close(r.lrScale, 6 / 7);
    assert.equal(offPolicyCorrection(sequences, samples, base, 3, { importanceCap: 3, stepSize: 'constant' }).lrScale, 1);
    // model: sequences (2 + 0)/2 lag; tokens 3: w (2 + 3 + 1)/3, truncated 1/3, KL over 3 tokens; histogram lag 0: 1 token, lag 2: 2
    assert.deepEqual([r.model.staleness, r.model['isWeight.mean'], r.model['isWeight.max']], [1, 2, 3]);
    close(r.model['isWeight.truncated'], 1 / 3);
    close(r.model.mismatch_kl, (1 - Math.log(2) + 3 - Math.log(4)) / 3);
    assert.deepEqual(
      Object.entries(r.model).filter(([k]) => k.startsWith(STALENESS_TOKENS)),
      [
        ['staleness.tokens.0', 1],
        ['staleness.tokens.2', 2],
      ],
    );
  });

  it("weighs a carried turn's tokens each by its own behaviour log-prob and counts each at its own version's lag", () => {
    // A turn continued across rollouts: tokens 0-1 sampled by version 1, the tool token between (mask 0), token 3 by version 2; base 3.
    // log ρ: ln 2 (w 2), ln 0.5 (w 0.5), tool untouched, ln 4 (w capped at 3).
    const carried = { ...seq('solver', 1, [-2, -1, 0, -3], [1, 1, 0, 1], [1, 1, 1, 1]), tokenVersions: [1, 1, 1, 2] };
    const base = [[-2 + Math.log(2), -1 + Math.log(0.5), -7, -3 + Math.log(4)]];
    const r = offPolicyCorrection([carried], samplesOf([carried]), base, 3, { importanceCap: 3 });
    r.samples[0]!.advantages.forEach((a, t) => close(a, [2, 0.5, 1, 3][t]!));
    assert.deepEqual(r.samples[0]!.oldLogprobs, [base[0]![0], base[0]![1], 0, base[0]![3]]);
    // histogram per token: 2 trained tokens at lag 2, 1 at lag 1; the sequence's staleness is its first token's lag
    assert.deepEqual(
      Object.entries(r.model).filter(([k]) => k.startsWith(STALENESS_TOKENS)),
      [
        ['staleness.tokens.1', 1],
        ['staleness.tokens.2', 2],
      ],
    );
    assert.equal(r.model.staleness, 2);
    close(r.model['isWeight.mean'], (2 + 0.5 + 3) / 3);
  });

  it("with baseline 'proximal', re-centres each (task group, agent) set's advantages before weighting them", () => {
    // group g0, agent reader, lag 1: the trainer moved towards the right answer (token 7).
    // GRPO advantages of 1 right, 3 wrong: +1.5, −0.5 ×3 (Σ A = 0). log ρ: right ln 2 (w 2), wrong ln 0.5 (w 0.5) twice, 0 (w 1).
    // Σ w = 4, Σ w·A = 3 − 0.25 − 0.25 − 0.5 = 2 → shift = 2/4 − 0 = 0.5: A' = 1, −1, −1, −1; weighted: 2, −0.5, −0.5, −1 (Σ = 0).
    // g1 (same agent, another task) is on-policy (w 1): shift 0. g0's judge is its own set: one sample, shift 0.
    const one = (group: string, agent: string, advantage: number) => ({ ...seq(agent, 4, [-1], [1], [advantage]), group });
    const sequences = [
      one('g0', 'reader', 1.5),
      one('g0', 'reader', -0.5),
      one('g0', 'reader', -0.5),
      one('g0', 'reader', -0.5),
      one('g1', 'reader', 1),
      one('g1', 'reader', -1),
      one('g0', 'judge', 0.8),
    ];
    const base = [Math.log(2), Math.log(0.5), Math.log(0.5), 0, 0, 0, Math.log(2)].map((d) => [-1 + d]);
    const r = offPolicyCorrection(sequences, samplesOf(sequences), base, 5, { importanceCap: 5, baseline: 'proximal' });
    r.samples.forEach((s, i) => close(s.advantages[0] ?? NaN, [2, -0.5, -0.5, -1, 1, -1, 1.6][i] ?? NaN));
    // mean |shift| per sequence: reader 4 × 0.5 over its 6 sequences; judge 0
    close(r.agents.reader?.baselineShift ?? NaN, 2 / 6);
    assert.equal(r.agents.judge?.baselineShift, 0);
    // the behaviour's baseline (the default): weights only
    const behaviour = offPolicyCorrection(sequences, samplesOf(sequences), base, 5, { importanceCap: 5 });
    behaviour.samples.forEach((s, i) => close(s.advantages[0] ?? NaN, [3, -0.25, -0.25, -0.5, 1, -1, 1.6][i] ?? NaN));
    assert.equal(behaviour.model.baselineShift, 0);
  });

  it('applies the selected correction: icepop masks outside its band and reports the masked share', () => {
    // lag 1; trained log ρ = ln 0.25 (below 0.5: masked), ln 2 (kept, w 2), ln 8 (above 5: masked)
    const sequences = [seq('solver', 4, [-1, -1, -1], [1, 1, 1], [1, 1, 1])];
    const base = [[-1 + Math.log(0.25), -1 + Math.log(2), -1 + Math.log(8)]];
    const r = offPolicyCorrection(sequences, samplesOf(sequences), base, 5, { importanceCap: 3, correction: 'icepop', band: [0.5, 5] });
    r.samples[0]!.advantages.forEach((a, t) => close(a, [0, 2, 0][t]!));
    close(r.model['isWeight.masked'], 2 / 3);
    assert.deepEqual([r.model['isWeight.truncated'], r.model['isWeight.max'], r.model['staleness.tokens.1']], [0, 2, 3]);
    close(r.model['isWeight.mean'], 2 / 3);
    // mis-sequence with C = 3: ∏ρ = 0.25 · 2 · 8 = 4 > 3, the whole sequence is dropped
    const mis = offPolicyCorrection(sequences, samplesOf(sequences), base, 5, { importanceCap: 3, correction: 'mis-sequence' });
    assert.deepEqual([...mis.samples[0]!.advantages, mis.model['isWeight.masked']], [0, 0, 0, 1]);
  });
});
