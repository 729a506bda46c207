/** SALT-style: episode advantages averaged over the episodes that share a turn. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeAdvantages } from '../../../rl/advantages/registry';
import { GIGPO_EPS } from '../../../rl/advantages/gigpo';
import { assertClose, turnSample } from './helpers';

test('salt: a shared turn gets the mean of the episode advantages through it', () => {
  // turns by (context, response) hash: e1 [x, y1], e2 [x, y2], e3 [z, y1]; ok = [1, 0, 1]
  const samples = [
    turnSample('e1', 0, [], 0, 1, { turnHash: 'x' }),
    turnSample('e1', 1, [0], 0, 1, { turnHash: 'y1' }),
    turnSample('e2', 0, [], 0, 0, { turnHash: 'x' }),
    turnSample('e2', 1, [0], 0, 0, { turnHash: 'y2' }),
    turnSample('e3', 0, [], 0, 1, { turnHash: 'z' }),
    turnSample('e3', 1, [0], 0, 1, { turnHash: 'y1' }),
  ];
  const r = computeAdvantages(samples, { estimator: 'salt' });
  // A_E = [1/3, −2/3, 1/3]/(√(1/3) + ε); node x = mean(e1, e2), y1 = mean(e1, e3) = e1's, y2 = e2's, z = e3's
  const sd = Math.sqrt(1 / 3) + GIGPO_EPS;
  const [hi, lo] = [1 / 3 / sd, -2 / 3 / sd];
  const x = (hi + lo) / 2;
  assertClose(r.advantages, [x, hi, x, lo, hi, hi]);
  assert.deepEqual(r.sharedStep, [true, true, true, false, false, true]);
});

test('salt: an episode that repeats a turn counts once in its node', () => {
  // e1 takes turn x twice, e2 once; ok = [1, 0] → A_E = ±0.5/(√0.5 + ε); node x = mean over {e1, e2} = 0
  const r = computeAdvantages(
    [turnSample('e1', 0, [], 0, 1, { turnHash: 'x' }), turnSample('e1', 1, [0], 0, 1, { turnHash: 'x' }), turnSample('e2', 0, [], 0, 0, { turnHash: 'x' })],
    { estimator: 'salt' },
  );
  assertClose(r.advantages, [0, 0, 0]);
});
