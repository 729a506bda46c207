/** The proximal baseline of a stale batch (rl/corrections/proximal-baseline.ts), hand-computed. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { proximalBaselineShifts } from '../../../../rl/corrections/proximal-baseline';
import { assertClose } from '../helpers';

test('proximal baseline: shift = IS-weighted mean − plain mean of A per (group, agent) set', () => {
  const shifts = proximalBaselineShifts([
    // set g1/a, GRPO-like (Σ A = 0): ω = 2, 0.5, 0.5, 1 → Σ ω = 4, Σ ω·A = 3 − 0.25 − 0.25 − 0.5 = 2 → 2/4 − 0 = 0.5
    { key: 'g1/a', advantage: 1.5, weight: 2 },
    { key: 'g1/a', advantage: -0.5, weight: 0.5 },
    // set g1/b, one sample: its own weighted and plain means are equal → 0
    { key: 'g1/b', advantage: 2, weight: 3 },
    { key: 'g1/a', advantage: -0.5, weight: 0.5 },
    { key: 'g1/a', advantage: -0.5, weight: 1 },
    // set g2/a, every weight 0 (all masked): no shift
    { key: 'g2/a', advantage: 1, weight: 0 },
    { key: 'g2/a', advantage: -1, weight: 0 },
    // set g3/a, not centred (Σ A / n = 2): Σ ω·A / Σ ω = (1 + 9)/4 = 2.5 → 0.5
    { key: 'g3/a', advantage: 1, weight: 1 },
    { key: 'g3/a', advantage: 3, weight: 3 },
  ]);
  assertClose(Array.from(shifts), [0.5, 0.5, 0, 0.5, 0.5, 0, 0, 0.5, 0.5]);
});

test('proximal baseline: the weighted advantages keep the plain centring; ω ≡ 1 shifts nothing', () => {
  // g3/a above: Σ ω·(A − 0.5) = 1·0.5 + 3·2.5 = 8 = Σ ω · (Σ A / n) = 4 · 2
  const set = [
    { key: 'g', advantage: 1, weight: 1 },
    { key: 'g', advantage: 3, weight: 3 },
  ];
  const [s0 = NaN, s1 = NaN] = proximalBaselineShifts(set);
  assert.equal(1 * (1 - s0) + 3 * (3 - s1), 8);
  // a sample of the proximal version (every ω = 1): the estimator's advantages are left exactly as they are
  const onPolicy = proximalBaselineShifts([0.7, -0.2, 1.3, -1.8].map((advantage) => ({ key: 'g', advantage, weight: 1 })));
  assert.deepEqual(Array.from(onPolicy), [0, 0, 0, 0]);
});
