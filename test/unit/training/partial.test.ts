import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { GenerateCall } from '../../../agents/episode';
import { CarriedOver, continuing, heldGroups, Lockstep, type Generation } from '../../../activities/training/partial';
import { parseRunConfig, partialShape, RunConfigError } from '../../../schema/run-config';
import { seededRandom as rng } from '../../../agents/seed';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Episodes that each need `need[i]` live generations, with random generation and tool times. */
async function simulate(groups: string[], need: number[], minFinished: number, seed: number, held?: Set<string>) {
  const lock = new Lockstep(groups, minFinished, held);
  const random = rng(seed);
  const made = need.map(() => 0);
  const carried = need.map(() => false);
  await Promise.all(
    need.map(async (n, i) => {
      try {
        for (let c = 0; c < n; c++) {
          await sleep(random() * 4); // the episode's own code and tools
          await lock.enter(i);
          await sleep(random() * 4); // the generation
          made[i]!++;
          lock.leave(i);
        }
      } catch (e) {
        assert.ok(e instanceof CarriedOver);
        carried[i] = true;
      } finally {
        lock.finish(i);
      }
    }),
  );
  return { whole: [...lock.wholeGroups()].sort(), made, carried, rounds: lock.rounds };
}

describe('Lockstep (partial rollouts)', () => {
  // Groups A [1, 3], B [2, 2], C [5, 1] live generations, 2 whole groups wanted.
  // Round 1: A0 and C1 finish, no group whole. Round 2: B0 and B1 finish (B whole).
  // Round 3: A1 finishes (A whole): 2 groups, the rollout ends; C0 has made 3 of its 5.
  const groups = ['A', 'A', 'B', 'B', 'C', 'C'];
  const need = [1, 3, 2, 2, 5, 1];
  const expected = { whole: ['A', 'B'], made: [1, 3, 2, 2, 3, 1], carried: [false, false, false, false, true, false], rounds: 2 };

  it('ends at the first barrier with enough whole groups, the same cut whatever the timing', async () => {
    for (const seed of [1, 2, 3, 4]) assert.deepEqual(await simulate(groups, need, 2, seed), expected, `seed ${seed}`);
  });

  it('runs every episode to its end when the groups never suffice before the last round', async () => {
    const r = await simulate(groups, need, 3, 7);
    assert.deepEqual(r, { whole: ['A', 'B', 'C'], made: need, carried: need.map(() => false), rounds: 4 });
  });

  it('holds a group at the carry bound: the rollout ends only once it is whole', async () => {
    // C held: the barrier after round 3 has A and B whole but not C (C0 has made 3 of 5);
    // rounds 4 and 5 finish C0, so every episode runs to its end (4 barriers passed), none carried.
    for (const seed of [1, 2]) {
      const r = await simulate(groups, need, 2, seed, new Set(['C']));
      assert.deepEqual(r, { whole: ['A', 'B', 'C'], made: need, carried: need.map(() => false), rounds: 4 }, `seed ${seed}`);
    }
    // A held: A is whole at the same barrier that ends the rollout anyway, so the cut is the unbounded one
    assert.deepEqual(await simulate(groups, need, 2, 3, new Set(['A'])), expected);
  });

  it('a held group keeps the rollout going past minFinished, then it ends with the held group whole', async () => {
    // Groups A [1, 1], B [1, 1], C [3, 1], 2 wanted. Round 1: A and B whole, C1 done, C0 made 1.
    // Unbounded: the barrier after round 1 ends it (0 barriers passed), C0 carried with 1 generation.
    const g = ['A', 'A', 'B', 'B', 'C', 'C'];
    const n = [1, 1, 1, 1, 3, 1];
    assert.deepEqual(await simulate(g, n, 2, 5), {
      whole: ['A', 'B'],
      made: [1, 1, 1, 1, 1, 1],
      carried: [false, false, false, false, true, false],
      rounds: 0,
    });
    // C held: barriers after rounds 1 and 2 pass (C0 at 1, then 2 of 3), round 3 finishes C0 and the rollout.
    assert.deepEqual(await simulate(g, n, 2, 5, new Set(['C'])), { whole: ['A', 'B', 'C'], made: n, carried: n.map(() => false), rounds: 2 });
  });

  it('counts episodes finished from the start (carried finished ones) toward whole groups', async () => {
    // group A's first episode finished in an earlier step; its second needs 1 generation
    const lock = new Lockstep(['A', 'A', 'B'], 1);
    lock.finish(0);
    const b = (async () => {
      await lock.enter(2);
      lock.leave(2);
      await lock.enter(2); // B's second generation waits at the barrier, where A is whole: B is carried
    })();
    await lock.enter(1);
    lock.leave(1);
    lock.finish(1);
    await assert.rejects(b, CarriedOver);
    assert.deepEqual([...lock.wholeGroups()], ['A']);
    assert.equal(lock.stopped, true);
  });
});

describe('continuing (carried generations)', () => {
  const call = (seed: number, contextLength: number, version = 4): GenerateCall => ({
    model: 'policy',
    version,
    context: Array.from({ length: contextLength }, () => 1),
    maxTokens: 8,
    stopTokens: [],
    sampling: { temperature: 1, topK: 0, topP: 1 },
    seed,
  });
  it('serves earlier generations with their version and samples only the new ones', async () => {
    const earlier: Generation[] = [
      { model: 'policy', seed: 11, contextLength: 3, tokens: [5, 6], logprobs: [-0.5, -0.25], stopReason: 'stop_token', version: 2 },
    ];
    const liveCalls: number[] = [];
    const record: Generation[] = [];
    const g = continuing(
      earlier,
      async (c) => {
        liveCalls.push(c.seed);
        return { tokens: [7], logprobs: [-1], stopReason: 'max_tokens' };
      },
      record,
    );
    assert.deepEqual(await g.generate(call(11, 3)), { tokens: [5, 6], logprobs: [-0.5, -0.25], stopReason: 'stop_token', version: 2 });
    assert.deepEqual(await g.generate(call(12, 5)), { tokens: [7], logprobs: [-1], stopReason: 'max_tokens' });
    // same seed, other context: not the stored generation (the episode diverged), sampled anew
    assert.deepEqual(await g.generate(call(11, 4)), { tokens: [7], logprobs: [-1], stopReason: 'max_tokens' });
    // the episode started again from its beginning (its thread was stopped): nothing is sampled again
    assert.deepEqual(await g.generate(call(11, 3)), { tokens: [5, 6], logprobs: [-0.5, -0.25], stopReason: 'stop_token', version: 2 });
    assert.deepEqual(await g.generate(call(12, 5)), { tokens: [7], logprobs: [-1], stopReason: 'max_tokens' });
    assert.deepEqual(liveCalls, [12, 11]);
    assert.equal(g.replayedTokens(), 2);
    assert.deepEqual(
      record.map((r) => [r.seed, r.contextLength, r.version]),
      [
        [11, 3, 2],
        [12, 5, 4],
        [11, 4, 4],
      ],
    );
  });
});

describe('heldGroups (partialRollouts.maxCarrySteps)', () => {
  const groups = [
    { key: 's3:g0', fromStep: 3 },
    { key: 's4:g1', fromStep: 4 },
    { key: 's2:g5', fromStep: 2 },
  ];
  it('holds the groups planned maxCarrySteps or more steps before the rollout', () => {
    // at step 5 the groups are 5-3 = 2, 5-4 = 1 and 5-2 = 3 steps old
    assert.deepEqual([...heldGroups(5, groups, 2)], ['s3:g0', 's2:g5']);
    assert.deepEqual([...heldGroups(5, groups, 1)], ['s3:g0', 's4:g1', 's2:g5']);
    assert.deepEqual([...heldGroups(5, groups, 3)], ['s2:g5']);
    assert.deepEqual([...heldGroups(5, groups, 4)], []);
  });
  it('holds none without a bound, or with nothing carried in', () => {
    assert.deepEqual([...heldGroups(5, groups, undefined)], []);
    assert.deepEqual([...heldGroups(5, [], 1)], []);
  });
});

describe('partialRollouts run setting', () => {
  const base = { team: 'math', groupsPerStep: 4, groupSize: 2 };
  it('is off by default and shapes the step when set', () => {
    assert.equal(parseRunConfig(base).partialRollouts, undefined);
    assert.equal(partialShape(parseRunConfig(base)), undefined);
    assert.deepEqual(partialShape(parseRunConfig({ ...base, partialRollouts: {} })), { inFlight: 6, minFinished: 4 });
    assert.deepEqual(partialShape(parseRunConfig({ ...base, partialRollouts: { overProvision: 1.25, minFinished: 3 } })), { inFlight: 5, minFinished: 3 });
    assert.deepEqual(partialShape(parseRunConfig({ ...base, partialRollouts: { overProvision: 2 } })), { inFlight: 8, minFinished: 4 });
    // the bound only when set: a run without it gives its rollout activity the input it always had
    assert.deepEqual(partialShape(parseRunConfig({ ...base, partialRollouts: { maxCarrySteps: 2 } })), { inFlight: 6, minFinished: 4, maxCarrySteps: 2 });
    assert.equal('maxCarrySteps' in partialShape(parseRunConfig({ ...base, partialRollouts: {} }))!, false);
  });
  it('combines with asynchronous runs (staleness > 0), for every model or some', () => {
    assert.deepEqual(partialShape(parseRunConfig({ ...base, staleness: 1, partialRollouts: {} })), { inFlight: 6, minFinished: 4 });
    assert.deepEqual(parseRunConfig({ ...base, staleness: { policy: 2 }, partialRollouts: { minFinished: 2 } }).partialRollouts, {
      overProvision: 1.5,
      minFinished: 2,
    });
  });
  const refused = (config: unknown, path: string, message: RegExp) => {
    assert.throws(
      () => parseRunConfig(config),
      (e: unknown) => e instanceof RunConfigError && e.issues.some((i) => i.path === path && message.test(i.message)),
    );
  };
  it('names the bad field', () => {
    refused({ ...base, partialRollouts: { overProvision: 0.5 } }, 'partialRollouts.overProvision', />= 1/);
    refused({ ...base, partialRollouts: { minFinished: 7 } }, 'partialRollouts.minFinished', /ceil\(4 x 1.5\) = 6, got 7/);
    refused({ ...base, partialRollouts: { minFinished: 1.5 } }, 'partialRollouts.minFinished', /integer/);
    refused({ ...base, partialRollouts: { extra: 1 } }, 'partialRollouts.extra', /unknown field/);
    refused({ ...base, partialRollouts: { maxCarrySteps: 0 } }, 'partialRollouts.maxCarrySteps', />= 1/);
    refused({ ...base, partialRollouts: { maxCarrySteps: 1.5 } }, 'partialRollouts.maxCarrySteps', /integer/);
    refused({ ...base, partialRollouts: { maxCarrySteps: '2' } }, 'partialRollouts.maxCarrySteps', /number/);
    refused({ ...base, rollout: 'durable', partialRollouts: {} }, 'partialRollouts', /batched/);
    refused({ ...base, rollout: 'durable', staleness: 1, partialRollouts: {} }, 'partialRollouts', /batched/);
  });
});
