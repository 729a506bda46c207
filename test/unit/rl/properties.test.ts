/** Property tests of the estimators (fast-check). */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { computeAdvantages, ESTIMATOR_NAMES, getEstimator } from '../../../rl/advantages/registry';
import type { Sample } from '../../../rl/samples';
import { SCOPES } from '../../../rl/advantages/types';

const reward = fc.double({ min: -1000, max: 1000, noNaN: true });

/** Up to 40 samples in ≤ 4 groups, 2 agents, ≤ 5 episodes per group, 1–2 components. */
const samplesArb = fc
  .array(
    fc.record({
      g: fc.integer({ min: 0, max: 3 }),
      agent: fc.constantFrom('solver', 'verifier'),
      e: fc.integer({ min: 0, max: 4 }),
      correct: reward,
      format: fc.option(reward),
      step: fc.option(reward),
      tokens: fc.integer({ min: 0, max: 50 }),
      context: fc.integer({ min: 0, max: 2 }),
    }),
    { minLength: 1, maxLength: 40 },
  )
  .map((rows) => {
    // turns numbered in input order per episode; each follows its agent's previous turn (a chain)
    const turns = new Map<string, number>();
    const last = new Map<string, number>();
    return rows.map((r, i): Sample => {
      const episodeId = `g${r.g}-e${r.e}`;
      const turn = turns.get(episodeId) ?? 0;
      turns.set(episodeId, turn + 1);
      const before = last.get(`${episodeId}/${r.agent}`);
      last.set(`${episodeId}/${r.agent}`, turn);
      return {
        sampleId: `s${i}`,
        groupId: `g${r.g}`,
        episodeId,
        agentId: r.agent,
        modelId: 'policy',
        rewards: r.format === null ? { correct: r.correct } : { correct: r.correct, format: r.format },
        ...(r.step === null ? {} : { turnRewards: { step: r.step } }),
        trainableTokens: r.tokens,
        turn,
        after: before === undefined ? [] : [before],
        contextHash: `c${r.context}`,
        turnHash: `t${r.context}`,
      };
    });
  });

/** Sample indices per (group, agent). */
function setsOf(samples: readonly Sample[]): number[][] {
  const m = new Map<string, number[]>();
  samples.forEach((s, i) => {
    const k = `${s.groupId}/${s.agentId}`;
    m.set(k, [...(m.get(k) ?? []), i]);
  });
  return [...m.values()];
}

test('property: finite rewards give finite advantages for every estimator and scope', () => {
  fc.assert(
    fc.property(samplesArb, fc.constantFrom(...ESTIMATOR_NAMES), fc.constantFrom(...SCOPES), (samples, estimator, scope) => {
      if (!(getEstimator(estimator).scopes ?? [scope]).includes(scope)) return;
      const r = computeAdvantages(samples, { estimator, options: { scope, weights: { format: 0.5 } } });
      assert.equal(r.advantages.length, samples.length);
      for (const a of r.advantages) assert.ok(Number.isFinite(a), `${estimator}/${scope}: ${a}`);
    }),
    { numRuns: 300 },
  );
});

test('property: with group-agent scope, grpo and rloo advantages have mean ≈ 0 in every (group, agent) set of size > 1', () => {
  fc.assert(
    fc.property(samplesArb, fc.constantFrom('grpo', 'rloo'), (samples, estimator) => {
      const r = computeAdvantages(samples, { estimator, options: { scope: 'group-agent' } });
      for (const set of setsOf(samples)) {
        if (set.length < 2) continue;
        const m = set.reduce((acc, i) => acc + r.advantages[i]!, 0) / set.length;
        // Rounding bound: deviations s − mean carry ~n ulps of the largest score, and grpo
        // divides them by std + 1e-6 ≥ 1e-6 (rewards 3e-13 apart give |A| ~ 1e-7 of pure rounding).
        // a sample's score counts its turn rewards too (seed 651728158: turn rewards ~1000, 1.5e-12 apart)
        const magnitude = (r: Record<string, number> | undefined) => Object.values(r ?? {}).reduce((a, v) => a + Math.abs(v), 0);
        const maxScore = Math.max(...set.map((i) => magnitude(samples[i]!.rewards) + magnitude(samples[i]!.turnRewards)));
        const rounding = (4 * set.length * Number.EPSILON * maxScore) / (estimator === 'grpo' ? 1e-6 : 1);
        const scale = Math.max(1, ...set.map((i) => Math.abs(r.advantages[i]!)));
        assert.ok(Math.abs(m) <= 1e-9 * scale + rounding, `${estimator}: set mean ${m}`);
      }
    }),
    { numRuns: 300 },
  );
});

test('property: grpo advantages do not change when a constant is added to one group’s rewards', () => {
  fc.assert(
    fc.property(samplesArb, fc.double({ min: -500, max: 500, noNaN: true }), (samples, c) => {
      const shifted = samples.map((s) => (s.groupId === samples[0]!.groupId ? { ...s, rewards: { ...s.rewards, correct: s.rewards.correct! + c } } : s));
      for (const normalizeStd of [true, false]) {
        const a = computeAdvantages(samples, { estimator: 'grpo', options: { normalizeStd } }).advantages;
        const b = computeAdvantages(shifted, { estimator: 'grpo', options: { normalizeStd } }).advantages;
        samples.forEach((s, i) => {
          // singleton sets use mean 0 (by design), so they do move with the constant
          const singleton = samples.filter((t) => t.groupId === s.groupId && t.agentId === s.agentId).length === 1;
          if (singleton) return;
          // tolerance: a few ulps of scores up to 2500 in magnitude, amplified at most by 1/(std + 1e-6)
          const ulps = 8 * Number.EPSILON * 2500;
          const tol = normalizeStd ? ulps / 1e-6 : ulps;
          assert.ok(Math.abs(a[i]! - b[i]!) <= tol, `sample ${i}: ${a[i]} vs ${b[i]}`);
        });
      }
    }),
    { numRuns: 300 },
  );
});

test('property: mc-grpo excludes exactly one sample per (group, agent) set, and it has advantage 0', () => {
  fc.assert(
    fc.property(samplesArb, (samples) => {
      const r = computeAdvantages(samples, { estimator: 'mc-grpo' });
      for (const set of setsOf(samples)) {
        const pivots = set.filter((i) => r.excluded[i]);
        assert.equal(pivots.length, 1);
        assert.equal(r.advantages[pivots[0]!], 0);
      }
    }),
    { numRuns: 200 },
  );
});

test('property: identical rewards within every set give exactly zero advantages (grpo, mc-grpo, rloo, gdpo)', () => {
  fc.assert(
    fc.property(samplesArb, reward, fc.constantFrom('grpo', 'mc-grpo', 'rloo', 'gdpo'), (samples, v, estimator) => {
      // one value per group; singleton sets excluded from the claim for grpo (mean 0 by design)
      const same = samples.map(({ turnRewards: _, ...s }) => ({ ...s, rewards: { correct: v + Number(s.groupId.slice(1)) } }));
      const r = computeAdvantages(same, { estimator });
      for (const set of setsOf(same)) {
        if (set.length < 2 && estimator === 'grpo') continue;
        for (const i of set) assert.equal(r.advantages[i], 0, `${estimator}: ${r.advantages[i]}`);
      }
    }),
    { numRuns: 200 },
  );
});
