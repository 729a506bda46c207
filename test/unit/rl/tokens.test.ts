/** Loss masks: advantages only on sampled tokens; aggregation as per-token weights. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { aggregationWeights, broadcastAdvantages, flatten, type LossAggregation } from '../../../rl/tokens';
import { assertClose } from './helpers';

// Sample 0: prompt, prompt, sampled, sampled, tool output, sampled. Sample 1: prompt, sampled.
const masks = [
  [0, 0, 1, 1, 0, 1],
  [0, 1],
];

test('broadcast puts each sample advantage on its mask-1 tokens only', () => {
  const out = broadcastAdvantages([2, -1], masks);
  assert.deepEqual(
    out.map((a) => [...a]),
    [
      [0, 0, 2, 2, 0, 2],
      [0, -1],
    ],
  );
});

test('a mask entry other than 0 or 1 is rejected with its position', () => {
  assert.throws(() => broadcastAdvantages([1], [[0, 0.5]]), /masks\[0\]\[1\]: must be 0 or 1, got 0\.5/);
  assert.throws(() => broadcastAdvantages([1, 2], [[1]]), /masks: expected one mask per advantage \(2\), got 1/);
});

test('token-mean: w = m/N, N = 4 trained tokens → 1/4 each, Σw = 1', () => {
  const r = aggregationWeights(masks, 'token-mean');
  assertClose(flatten(r.weights), [0, 0, 0.25, 0.25, 0, 0.25, 0, 0.25]);
  assert.equal(r.total, 1);
  assert.equal(r.tokens, 4);
});

test('seq-mean-token-mean: w = m/(S·n_i): sample 0 has 3 tokens → 1/6, sample 1 has 1 → 1/2; Σw = 1', () => {
  const r = aggregationWeights(masks, 'seq-mean-token-mean');
  assertClose(flatten(r.weights), [0, 0, 1 / 6, 1 / 6, 0, 1 / 6, 0, 1 / 2]);
  assertClose([r.total], [1]);
});

test('seq-mean-token-sum-norm: w = m/(S·H); Σw = N/(S·H)', () => {
  // H = 8 given: 1/(2·8) = 1/16 per trained token; Σw = 4/16 = 0.25
  const given = aggregationWeights(masks, 'seq-mean-token-sum-norm', { horizon: 8 });
  assertClose(flatten(given.weights), [0, 0, 1 / 16, 1 / 16, 0, 1 / 16, 0, 1 / 16]);
  assertClose([given.total], [0.25]);
  // H defaults to the longest mask (6): 1/12 per token; Σw = 4/12
  const longest = aggregationWeights(masks, 'seq-mean-token-sum-norm');
  assertClose([longest.total], [4 / 12]);
});

test('excluded samples get weight 0 and do not count in N or S', () => {
  const r = aggregationWeights(masks, 'token-mean', { excluded: [false, true] });
  assertClose(flatten(r.weights), [0, 0, 1 / 3, 1 / 3, 0, 1 / 3, 0, 0]);
  const s = aggregationWeights(masks, 'seq-mean-token-mean', { excluded: [true, false] });
  assertClose(flatten(s.weights), [0, 0, 0, 0, 0, 0, 0, 1]);
});

test('a sample with no trainable tokens does not count as a sequence', () => {
  const r = aggregationWeights(
    [
      [0, 0],
      [1, 1],
    ],
    'seq-mean-token-mean',
  );
  assert.equal(r.sequences, 1);
  assertClose(flatten(r.weights), [0, 0, 0.5, 0.5]);
});

test('bad aggregation options are rejected', () => {
  assert.throws(() => aggregationWeights(masks, 'sum' as LossAggregation), /lossAggregation: must be one of token-mean/);
  assert.throws(() => aggregationWeights(masks, 'token-mean', { horizon: 0 }), /horizon: must be a positive number/);
  assert.throws(() => aggregationWeights(masks, 'token-mean', { excluded: [true] }), /excluded: expected one flag per mask/);
});

// ---- properties --------------------------------------------------------------

const maskArb = fc.array(fc.array(fc.integer({ min: 0, max: 1 }), { minLength: 0, maxLength: 12 }), { minLength: 1, maxLength: 8 });

test('property: broadcasting leaves every mask-0 token at 0 and every mask-1 token at its advantage', () => {
  fc.assert(
    fc.property(maskArb, fc.array(fc.double({ min: -50, max: 50, noNaN: true }), { minLength: 8, maxLength: 8 }), (ms, adv) => {
      const out = broadcastAdvantages(adv.slice(0, ms.length), ms);
      ms.forEach((m, i) => m.forEach((bit, t) => assert.equal(out[i]![t], bit === 1 ? adv[i] : 0)));
    }),
  );
});

test('property: Σ w·L equals the aggregation written directly', () => {
  fc.assert(
    fc.property(maskArb, fc.constantFrom<LossAggregation>('token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'), (ms, mode) => {
      const loss = ms.map((m, i) => m.map((_, t) => Math.sin(3 * i + t) * 2)); // any per-token loss
      const trained = ms.map((m) => m.reduce((a, b) => a + b, 0));
      const N = trained.reduce((a, b) => a + b, 0);
      const S = trained.filter((n) => n > 0).length;
      const H = Math.max(...ms.map((m) => m.length));
      const seqSum = ms.map((m, i) => m.reduce((acc, bit, t) => acc + bit * loss[i]![t]!, 0));
      let direct = 0;
      if (N > 0) {
        if (mode === 'token-mean') direct = seqSum.reduce((a, b) => a + b, 0) / N;
        else if (mode === 'seq-mean-token-mean') direct = seqSum.reduce((a, s, i) => a + (trained[i]! > 0 ? s / trained[i]! : 0), 0) / S;
        else direct = seqSum.reduce((a, b) => a + b, 0) / (S * H);
      }
      const { weights, total } = aggregationWeights(ms, mode);
      const viaWeights = weights.reduce((acc, w, i) => acc + w.reduce((a, wt, t) => a + wt * loss[i]![t]!, 0), 0);
      assert.ok(Math.abs(viaWeights - direct) < 1e-12, `${mode}: ${viaWeights} vs ${direct}`);
      const expectedTotal = N === 0 ? 0 : mode === 'seq-mean-token-sum-norm' ? N / (S * H) : 1;
      assert.ok(Math.abs(total - expectedTotal) < 1e-12, `${mode} total ${total} vs ${expectedTotal}`);
    }),
  );
});
