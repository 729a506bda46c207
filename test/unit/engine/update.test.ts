/**
 * Update through the in-process engine: bitwise determinism, exact resume from
 * exported bytes, idempotency by request_id, stale-base refusal, non-finite
 * refusal, and a toy bandit that learns.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeOptimizerState, decodeWeights } from '../../../engines/protocol/version-bytes';
import { EngineFault } from '../../../engines/protocol/errors';
import type { UpdateRequest, UpdateSampleInput } from '../../../engines/protocol/types';
import { cpuEngine, rng, sameBits } from './helpers';

const SPEC = { vocabSize: 16, contextWindow: 4, embedDim: 8, hiddenDim: 32, layers: 2 };

async function rollout(engine: ReturnType<typeof cpuEngine>, version: number, seed: number): Promise<UpdateSampleInput[]> {
  const r = rng(seed);
  const gen = await engine.generate({
    modelKey: 'm',
    version,
    sequences: Array.from({ length: 8 }, (_, i) => ({ context: [r.int(16), r.int(16)], seed: seed * 100 + i })),
    sampling: { maxTokens: 6 },
  });
  return gen.sequences.map((s, i) => ({
    context: [i % 16, (i * 5) % 16],
    tokens: s.tokens,
    lossMask: s.tokens.map((_, t) => (t === 2 ? 0 : 1)),
    advantages: s.tokens.map(() => (i % 2 ? 1 : -1) * r.range(0.2, 1)),
    oldLogprobs: s.logprobs,
    lossWeights: s.tokens.map(() => 1 / 40),
  }));
}

const settings = { lr: 0.01, innerSteps: 2, weightDecay: 0.01 };

async function fault(p: Promise<unknown>): Promise<EngineFault> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof EngineFault, `expected an EngineFault, got ${String(e)}`);
    return e;
  }
  assert.fail('expected the call to fail');
}

test('same base version and batch give bitwise-identical new weights and optimizer state', async () => {
  const results = [];
  for (let k = 0; k < 2; k++) {
    const engine = cpuEngine({ intraOpThreads: k + 1 }); // --threads only affects generate/score sessions
    await engine.initModel({ modelKey: 'm', spec: SPEC, seed: 42 });
    const samples = await rollout(engine, 0, 1);
    const u = await engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'r1', samples, settings });
    results.push({ u, samples, exported: await engine.exportVersion({ modelKey: 'm', version: 1 }) });
  }
  const [a, b] = results;
  assert.equal(a!.u.info.version, 1);
  assert.equal(a!.u.info.weightsSha256, b!.u.info.weightsSha256);
  assert.equal(a!.u.info.optimizerSha256, b!.u.info.optimizerSha256);
  assert.ok(sameBits(a!.exported.weights, b!.exported.weights));
  assert.ok(sameBits(a!.exported.optimizerState, b!.exported.optimizerState));
  assert.deepEqual(a!.u.stepMetrics, b!.u.stepMetrics);
  assert.equal(a!.u.info.optimizerStep, 2);
  const trained = results[0]!.samples.reduce((n, s) => n + s.lossMask.filter((m) => m === 1).length, 0);
  assert.equal(a!.u.tokens, trained);
});

test('an engine refilled from exported bytes continues exactly (weights, AdamW moments, step count)', async () => {
  const original = cpuEngine();
  await original.initModel({ modelKey: 'm', spec: SPEC, seed: 7 });
  const s1 = await rollout(original, 0, 2);
  await original.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: s1, settings });
  const exported = await original.exportVersion({ modelKey: 'm', version: 1 });
  const s2 = await rollout(original, 1, 3);
  const cont = await original.update({ modelKey: 'm', baseVersion: 1, requestId: 'b', samples: s2, settings });

  const refilled = cpuEngine(); // e.g. after an engine restart
  const loaded = await refilled.loadVersion({
    modelKey: 'm',
    version: 1,
    spec: exported.info.spec,
    weights: exported.weights,
    optimizerState: exported.optimizerState,
    weightsSha256: exported.info.weightsSha256,
  });
  assert.equal(loaded.weightsSha256, exported.info.weightsSha256);
  assert.equal(loaded.optimizerStep, 2);
  const resumed = await refilled.update({ modelKey: 'm', baseVersion: 1, requestId: 'b', samples: s2, settings });
  assert.equal(resumed.info.version, 2);
  assert.equal(resumed.info.weightsSha256, cont.info.weightsSha256);
  assert.equal(resumed.info.optimizerSha256, cont.info.optimizerSha256);

  // Loading without the optimizer state is a fresh optimizer: different result.
  const fresh = cpuEngine();
  await fresh.loadVersion({ modelKey: 'm', version: 1, spec: exported.info.spec, weights: exported.weights });
  const other = await fresh.update({ modelKey: 'm', baseVersion: 1, requestId: 'b', samples: s2, settings });
  assert.notEqual(other.info.weightsSha256, cont.info.weightsSha256);

  // Format round trip.
  const theta = decodeWeights(exported.weights, exported.info.paramCount);
  assert.equal(theta.length, exported.info.paramCount);
  const opt = decodeOptimizerState(exported.optimizerState, exported.info.paramCount);
  assert.equal(opt.step, 2);
  assert.ok(opt.v.every((x) => x >= 0));
});

test('Update is idempotent by request_id; stale bases are refused unless allowed', async () => {
  const engine = cpuEngine();
  await engine.initModel({ modelKey: 'm', spec: SPEC, seed: 3 });
  const samples = await rollout(engine, 0, 4);
  const req: UpdateRequest = { modelKey: 'm', baseVersion: 0, requestId: 'step-1', samples, settings };
  // Two concurrent deliveries of the same request, then a late retry.
  const [a, b] = await Promise.all([engine.update(req), engine.update(req)]);
  const c = await engine.update(req);
  assert.equal(a.info.version, 1);
  assert.equal(a.replayed, false);
  for (const r of [b, c]) {
    assert.equal(r.replayed, true);
    assert.deepEqual(r.info, a.info);
    assert.deepEqual(r.metrics, a.metrics);
  }
  assert.deepEqual((await engine.stats()).models[0]!.versions, [0, 1], 'one version was produced');

  const reused = await fault(engine.update({ ...req, samples: samples.slice(1) }));
  assert.equal(reused.reason, 'REQUEST_ID_REUSED');

  const stale = await fault(engine.update({ ...req, requestId: 'other' }));
  assert.equal(stale.reason, 'STALE_BASE');
  assert.equal(stale.code, 9); // FAILED_PRECONDITION
  assert.match(stale.message, /base_version 0 .* not the latest version \(1\)/);

  const allowed = await engine.update({ ...req, requestId: 'other', allowStaleBase: true });
  assert.equal(allowed.info.version, 2, 'a stale base still produces latest + 1');
  assert.equal(allowed.baseVersion, 0);
  assert.equal(allowed.info.optimizerStep, 2, 'trained from version 0 (its optimizer step 0 + 2)');
});

test('a non-finite update commits nothing and says so', async () => {
  const engine = cpuEngine();
  await engine.initModel({ modelKey: 'm', spec: SPEC, seed: 5 });
  const samples = await rollout(engine, 0, 5);
  // Finite inputs whose weighted loss overflows float32.
  const huge = samples.map((s) => ({ ...s, advantages: s.advantages.map(() => 3e38), lossWeights: s.lossWeights.map(() => 3e38) }));
  const e = await fault(engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'nf', samples: huge, settings }));
  assert.equal(e.reason, 'NON_FINITE_UPDATE');
  assert.equal(e.code, 10); // ABORTED
  assert.match(e.message, /non-finite .* nothing was committed/);
  const stats = await engine.stats();
  assert.deepEqual(stats.models[0]!.versions, [0]);
  assert.equal(stats.models[0]!.latestVersion, 0);
  // The engine still serves, and the same request id is free for a sane retry.
  const ok = await engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'nf', samples, settings });
  assert.equal(ok.info.version, 1);
});

test('toy bandit: a few dozen updates push the target token above 0.9', async () => {
  const engine = cpuEngine();
  await engine.initModel({ modelKey: 'bandit', spec: { vocabSize: 16 }, seed: 11 });
  const target = 7;
  const G = 32;
  const probability = async (version: number) =>
    Math.exp((await engine.score({ modelKey: 'bandit', version, sequences: [{ context: [1, 2], tokens: [target] }] })).sequences[0]!.logprobs[0]!);
  const p0 = await probability(0);
  assert.ok(p0 < 0.2, `starts near uniform (p = ${p0})`);
  let version = 0;
  let p = p0;
  let steps = 0;
  while (p <= 0.9 && steps < 60) {
    const gen = await engine.generate({
      modelKey: 'bandit',
      version,
      sequences: Array.from({ length: G }, (_, i) => ({ context: [1, 2], seed: steps * G + i })),
      sampling: { maxTokens: 1 },
    });
    const rewards = gen.sequences.map((s) => (s.tokens[0] === target ? 1 : 0));
    const mean = rewards.reduce((a: number, b: number) => a + b, 0) / G;
    const u = await engine.update({
      modelKey: 'bandit',
      baseVersion: version,
      requestId: `bandit-${steps}`,
      samples: gen.sequences.map((s, i) => ({
        context: [1, 2],
        tokens: s.tokens,
        lossMask: [1],
        advantages: [rewards[i]! - mean],
        oldLogprobs: s.logprobs,
        lossWeights: [1 / G],
      })),
      settings: { lr: 0.002 },
    });
    version = u.info.version;
    steps++;
    p = await probability(version);
  }
  assert.ok(p > 0.9, `p(target) = ${p} after ${steps} updates`);
  assert.ok(steps >= 5, `took ${steps} updates (not a single lucky step)`);
  console.log(`bandit: p(target) ${p0.toFixed(3)} -> ${p.toFixed(3)} in ${steps} updates`);
});

test('the version cache evicts least-recently-used versions beyond its cap, never the latest', async () => {
  const engine = cpuEngine({ maxVersionsPerModel: 3 });
  await engine.initModel({ modelKey: 'm', spec: SPEC, seed: 8 });
  const samples = await rollout(engine, 0, 9);
  let v = 0;
  for (let k = 0; k < 4; k++) {
    v = (await engine.update({ modelKey: 'm', baseVersion: v, requestId: `e${k}`, samples, settings })).info.version;
    await engine.score({ modelKey: 'm', version: 0, sequences: [{ context: [], tokens: [1] }] }); // keep v0 in use (a reference model)
  }
  const model = (await engine.stats()).models[0]!;
  assert.equal(model.latestVersion, 4);
  assert.deepEqual(model.versions, [0, 3, 4], 'v0 stays (used after every update); v1 and v2 were evicted');
  const e = await fault(engine.generate({ modelKey: 'm', version: 1, sequences: [{ context: [], seed: 1 }], sampling: { maxTokens: 1 } }));
  assert.equal(e.reason, 'VERSION_NOT_LOADED');
});

test('past maxModels the engine drops the models nothing used for modelIdleMs, never one in use; a dropped model loads again', async () => {
  const engine = cpuEngine({ maxModels: 2, modelIdleMs: 0, batchWindowMs: 300 });
  await engine.initModel({ modelKey: 'a', spec: SPEC, seed: 1 });
  await engine.initModel({ modelKey: 'b', spec: SPEC, seed: 2 });
  // a's Generate waits 300 ms in the batcher for company while b is used after it and c arrives:
  // a is the least recently used but in use, so b goes
  const generating = engine.generate({ modelKey: 'a', version: 0, sequences: [{ context: [], seed: 1 }], sampling: { maxTokens: 1 } });
  const b = await engine.exportVersion({ modelKey: 'b', version: 0 });
  await engine.initModel({ modelKey: 'c', spec: SPEC, seed: 3 });
  assert.equal((await generating).sequences.length, 1);
  assert.deepEqual((await engine.stats()).models.map((m) => m.modelKey).sort(), ['a', 'c']);
  const e = await fault(engine.generate({ modelKey: 'b', version: 0, sequences: [{ context: [], seed: 1 }], sampling: { maxTokens: 1 } }));
  assert.equal(e.reason, 'MODEL_NOT_LOADED');
  // the pool worker loads it from the store, as after an engine restart: the same bytes
  const again = await engine.loadVersion({ modelKey: 'b', version: 0, spec: SPEC, weights: b.weights, optimizerState: b.optimizerState });
  assert.equal(again.weightsSha256, b.info.weightsSha256);
  assert.equal((await engine.stats()).models.length, 2, 'loading b dropped the least recently used of a and c');
  // an Update holds its model from the call until it commits: not dropped while queued or running
  const busy = cpuEngine({ maxModels: 1, modelIdleMs: 0 });
  await busy.initModel({ modelKey: 'm', spec: SPEC, seed: 4 });
  const samples = await rollout(busy, 0, 5);
  const updating = busy.update({ modelKey: 'm', baseVersion: 0, requestId: 'u1', samples, settings });
  await busy.initModel({ modelKey: 'w', spec: SPEC, seed: 6 });
  assert.equal((await updating).info.version, 1);
  assert.deepEqual((await busy.stats()).models.map((m) => m.modelKey).sort(), ['m', 'w']);
  await Promise.all([engine.close(), busy.close()]);
});
