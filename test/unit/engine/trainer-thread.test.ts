/**
 * The engine's update thread (engines/onnx/trainer-thread.ts): an Update computed there gives the
 * same bits as on the engine's own thread, a Generate sent while it runs is answered before it
 * ends (the overlap staleness >= 1 is for), its runs count as the engine's progress, and an update
 * whose thread dies fails without committing, the next one starting a new thread.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { UpdateSampleInput } from '../../../engines/protocol/types';
import { cpuEngine, rng } from './helpers';

const TINY = { vocabSize: 16, contextWindow: 4, embedDim: 8, hiddenDim: 32, layers: 2 };
const TRANSFORMER = { family: 'transformer', vocabSize: 64, width: 32, layers: 2, heads: 2, maxSeq: 32 };

/** A batch of `n` sampled sequences of `maxTokens` from version 0, with seeded advantages. */
async function batch(engine: ReturnType<typeof cpuEngine>, vocab: number, n: number, maxTokens: number): Promise<UpdateSampleInput[]> {
  const r = rng(7);
  const contexts = Array.from({ length: n }, () => [r.int(vocab), r.int(vocab)]);
  const gen = await engine.generate({ modelKey: 'm', version: 0, sequences: contexts.map((context, i) => ({ context, seed: i })), sampling: { maxTokens } });
  return gen.sequences.map((s, i) => ({
    context: contexts[i]!,
    tokens: s.tokens,
    lossMask: s.tokens.map(() => 1),
    advantages: s.tokens.map(() => (i % 2 ? 1 : -1) * r.range(0.2, 1)),
    oldLogprobs: s.logprobs,
    lossWeights: s.tokens.map(() => 1 / (n * maxTokens)),
  }));
}

for (const [name, spec] of [
  ['tiny-lm', TINY],
  ['transformer', TRANSFORMER],
] as const) {
  test(`${name}: an update on the update thread gives the bits of one on the engine's thread`, async () => {
    const results = [];
    for (const trainerThread of ['on', 'off'] as const) {
      const engine = cpuEngine({ trainerThread });
      await engine.initModel({ modelKey: 'm', spec, seed: 3 });
      const samples = await batch(engine, spec.vocabSize, 8, 6);
      const u1 = await engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples, settings: { lr: 0.01, innerSteps: 2 } });
      const u2 = await engine.update({ modelKey: 'm', baseVersion: 1, requestId: 'b', samples, settings: { lr: 0.01, innerSteps: 1 } });
      results.push({ u1, u2, exported: await engine.exportVersion({ modelKey: 'm', version: 2 }) });
      await engine.close();
    }
    const [threaded, here] = results;
    assert.equal(threaded!.u2.info.weightsSha256, here!.u2.info.weightsSha256);
    assert.equal(threaded!.u2.info.optimizerSha256, here!.u2.info.optimizerSha256);
    assert.equal(threaded!.u2.info.optimizerStep, 3);
    assert.deepEqual(threaded!.u1.stepMetrics, here!.u1.stepMetrics);
    assert.deepEqual(threaded!.u1.logprobGap, here!.u1.logprobGap);
    assert.ok(threaded!.u1.stepMetrics[0]!.gradNorm > 0, 'the batch has a gradient');
    assert.deepEqual(Buffer.from(threaded!.exported.optimizerState), Buffer.from(here!.exported.optimizerState));
  });
}

test('a Generate sent while an update runs is answered before the update ends only with the update thread', async () => {
  const order: Record<string, string[]> = {};
  for (const trainerThread of ['auto', 'on', 'off'] as const) {
    const engine = cpuEngine({ trainerThread });
    await engine.initModel({ modelKey: 'm', spec: TRANSFORMER, seed: 3 });
    const samples = await batch(engine, TRANSFORMER.vocabSize, 32, 24);
    const seen: string[] = [];
    const update = engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'long', samples, settings: { lr: 0.01, innerSteps: 16 } });
    void update.then(() => seen.push('update'));
    const generate = engine.generate({ modelKey: 'm', version: 0, sequences: [{ context: [1, 2], seed: 1 }], sampling: { maxTokens: 2 } });
    void generate.then(() => seen.push('generate'));
    const health = engine.health();
    await generate;
    await update;
    order[trainerThread] = seen;
    const after = engine.health();
    assert.ok(health.queueDepth >= 1, 'Health counts the running update as queued work');
    assert.ok(after.deviceRuns > health.deviceRuns, `device runs moved on (${health.deviceRuns} -> ${after.deviceRuns})`);
    await engine.close();
  }
  assert.deepEqual(order.on, ['generate', 'update'], 'with the update thread the Generate does not wait for the update');
  assert.deepEqual(order.auto, ['generate', 'update'], '"auto" (the default) starts the thread for an update that would wait for Generate');
  assert.deepEqual(order.off, ['update', 'generate'], 'on one thread it does (the control: the update is long enough to be seen)');
});

test('an update whose thread dies fails, commits nothing, and the next update starts a new thread', async () => {
  const engine = cpuEngine({ trainerThread: 'on' });
  await engine.initModel({ modelKey: 'm', spec: TRANSFORMER, seed: 3 });
  const samples = await batch(engine, TRANSFORMER.vocabSize, 32, 24);
  const settings = { lr: 0.01, innerSteps: 16 };
  const doomed = engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'x', samples, settings });
  await new Promise((r) => setTimeout(r, 20));
  await engine.close(); // the thread ends under the running update, as a crash of it would
  await assert.rejects(doomed, /update thread exited/);
  const stats = await engine.stats();
  assert.equal(stats.models[0]!.latestVersion, 0, 'nothing was committed');
  // the same request again (a failed update is not remembered), on a new thread, and the reference on one thread
  const again = await engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'x', samples, settings });
  const reference = cpuEngine({ trainerThread: 'off' });
  await reference.initModel({ modelKey: 'm', spec: TRANSFORMER, seed: 3 });
  const want = await reference.update({ modelKey: 'm', baseVersion: 0, requestId: 'x', samples, settings });
  assert.equal(again.info.version, 1);
  assert.equal(again.info.weightsSha256, want.info.weightsSha256);
  await engine.close();
});

test('an Update right after a Score of its batch under its base reuses that Score for its log-prob gap', async () => {
  const runs: Record<string, { delta: number; gap: unknown; sha: string }> = {};
  for (const scoredFirst of [true, false]) {
    const engine = cpuEngine();
    await engine.initModel({ modelKey: 'm', spec: TRANSFORMER, seed: 3 });
    const samples = await batch(engine, TRANSFORMER.vocabSize, 8, 6);
    await engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples, settings: { lr: 0.01 } }); // builds the thread's sessions
    if (scoredFirst) await engine.score({ modelKey: 'm', version: 1, sequences: samples.map((s) => ({ context: s.context, tokens: s.tokens })) });
    const before = engine.health().deviceRuns;
    const u = await engine.update({ modelKey: 'm', baseVersion: 1, requestId: 'b', samples, settings: { lr: 0.01 } });
    runs[String(scoredFirst)] = { delta: engine.health().deviceRuns - before, gap: u.logprobGap, sha: u.info.weightsSha256 };
    await engine.close();
  }
  assert.deepEqual(runs.true!.gap, runs.false!.gap, 'the same log-prob gap');
  assert.equal(runs.true!.sha, runs.false!.sha);
  assert.equal(runs.true!.delta, runs.false!.delta - 1, `one device run fewer (the Score): ${runs.true!.delta} vs ${runs.false!.delta}`);
});

test('"auto" keeps calls that take turns with Generate on the engine\'s thread, and says when it starts the thread', async () => {
  const events: Array<Record<string, unknown>> = [];
  const engine = cpuEngine({ log: (e) => events.push(e) });
  await engine.initModel({ modelKey: 'm', spec: TRANSFORMER, seed: 3 });
  const samples = await batch(engine, TRANSFORMER.vocabSize, 8, 6);
  await engine.score({ modelKey: 'm', version: 0, sequences: samples });
  await engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples, settings: { lr: 0.01 } });
  const started = () => events.filter((e) => e.event === 'trainer_thread');
  assert.equal(started().length, 0, 'a synchronous run never starts the thread');
  const update = engine.update({ modelKey: 'm', baseVersion: 1, requestId: 'b', samples, settings: { lr: 0.01 } });
  await engine.generate({ modelKey: 'm', version: 1, sequences: [{ context: [1, 2], seed: 1 }], sampling: { maxTokens: 2 } });
  await update;
  assert.equal(started().length, 1, 'an update beside a Generate starts it, once');
  await engine.close();
});
