/** The correction registry: importanceWeights dispatches by name, reports masked shares, and names bad input. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CORRECTION_NAMES, importanceWeights } from '../../../../rl/corrections/registry';
import { assertClose } from '../helpers';

const settings = { cap: 3, band: [0.5, 5] as const };

test('every correction is registered once, decoupled PPO first', () => {
  assert.deepEqual(CORRECTION_NAMES, ['decoupled-ppo', 'tis-token', 'tis-sequence', 'mis-token', 'mis-sequence', 'icepop']);
});

test('importanceWeights: only trained tokens reach the correction, in order; the others get 0', () => {
  // trained log ρ: ln 4, ln 0.25 (the middle token has mask 0 and a ratio that would change every result)
  const prox = [Math.log(4), 5, Math.log(0.25)];
  const behav = [0, 0, 0];
  const mask = [1, 0, 1];
  const mis = importanceWeights(prox, behav, mask, 'mis-token', settings);
  assertClose(mis.weights, [0, 0, 0.25]);
  assert.deepEqual([mis.diagnostics.tokens, mis.diagnostics.maskedFraction, mis.diagnostics.truncatedFraction], [2, 0.5, 0]);
  // sequence level over the trained tokens only: 4 · 0.25 = 1
  assertClose(importanceWeights(prox, behav, mask, 'tis-sequence', settings).weights, [1, 0, 1]);
  // mismatch KL does not depend on the correction: k3 of ρ = 4 and 0.25: (4 − 1 − ln 4 + 0.25 − 1 + ln 4)/2 = 1.125
  for (const name of CORRECTION_NAMES) assertClose([importanceWeights(prox, behav, mask, name, settings).diagnostics.mismatchKl], [1.125], 1e-12, name);
});

test('importanceWeights clamps each log ratio to ±20 before the correction', () => {
  // log ρ = 30 → 20, then the sequence's log ρ is 20 − 15 = 5 (unclamped it would be 15: e^15 > cap → 1e6)
  const r = importanceWeights([30, -15], [0, 0], [1, 1], 'tis-sequence', { cap: 1e6, band: [0.5, 5] });
  assertClose([r.weights[0]! / Math.exp(5), r.weights[1]! / Math.exp(5)], [1, 1], 1e-12);
});

test('importanceWeights names bad input', () => {
  assert.throws(() => importanceWeights([0], [0], [1], 'decoupled-ppo', { cap: 0.5, band: [0.5, 5] }), /cap: must be a finite number >= 1/);
  assert.throws(() => importanceWeights([0], [0], [1], 'icepop', { cap: 2, band: [1.5, 5] }), /band\[0\]: the band's lower end must be in \[0, 1\]/);
  assert.throws(() => importanceWeights([0], [0], [1], 'icepop', { cap: 2, band: [0.5, 0.9] }), /band\[1\]: the band's upper end must be a finite number >= 1/);
  assert.throws(() => importanceWeights([0], [0], [1], 'nope' as never, settings), /correction: must be one of decoupled-ppo, tis-token/);
  assert.throws(() => importanceWeights([0, 1], [0], [1, 1], 'decoupled-ppo', settings), /logpBehav: expected 2 tokens/);
  assert.throws(() => importanceWeights([NaN], [0], [1], 'decoupled-ppo', settings), /logpProx\[0\]: must be a finite number/);
});
