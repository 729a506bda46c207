/**
 * LoRA models in the in-process built-in engine (engines/onnx/transformer/lora-runtime.ts): version 0 is the
 * adapter initAdapter draws and scores as its base; an Update trains A and B only (adapter-sized weights and
 * AdamW state); a version samples and scores as its merged weights (mergeLora) loaded as a plain model; an
 * export reloads exactly; the spec's lora fields and the checkpoint form are refused naming the field.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { decodeOptimizerState, decodeWeights, encodeWeights } from '../../../engines/protocol/version-bytes';
import { EngineFault } from '../../../engines/protocol/errors';
import { adapterLayout, baseSpecOf, initAdapter, mergeLora } from '../../../engines/families/transformer/lora';
import { normalizeTransformerSpec, paramLayout } from '../../../engines/families/transformer/spec';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { exportHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { sessionFactory } from '../../../engines/onnx/device';
import { createLoraRuntime } from '../../../engines/onnx/transformer/lora-runtime';
import { TransformerRuntime } from '../../../engines/onnx/transformer/runtime';
import { cpuEngine, rng, sameBits } from './helpers';

const BASE = { family: 'transformer', vocabSize: 11, width: 16, layers: 2, heads: 2, maxSeq: 16 };
const LORA = { rank: 2, alpha: 4, targets: ['q', 'v', '2'], baseSeed: 7 };
const SPEC = { ...BASE, lora: LORA };
const spec = normalizeTransformerSpec(SPEC);
const Pa = adapterLayout(spec).total;

const SEQS = [
  { context: [1, 2, 3], tokens: [4, 5, 6, 7] },
  { context: [9], tokens: [0, 10, 3] },
];

async function scores(engine: ReturnType<typeof cpuEngine>, modelKey: string, version: number): Promise<number[]> {
  return (await engine.score({ modelKey, version, sequences: SEQS })).sequences.flatMap((s) => s.logprobs);
}

async function fault(p: Promise<unknown>): Promise<EngineFault> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof EngineFault, `expected an EngineFault, got ${String(e)}`);
    return e;
  }
  assert.fail('expected the call to fail');
}

async function trainOnce(engine: ReturnType<typeof cpuEngine>, modelKey: string) {
  const r = rng(3);
  const gen = await engine.generate({
    modelKey,
    version: 0,
    sequences: Array.from({ length: 6 }, (_, i) => ({ context: [i + 1, 2], seed: i })),
    sampling: { maxTokens: 5 },
  });
  const samples = gen.sequences.map((s, i) => ({
    context: [i + 1, 2],
    tokens: s.tokens,
    lossMask: s.tokens.map(() => 1),
    advantages: s.tokens.map(() => (i % 2 ? 1 : -1) * r.range(0.5, 1)),
    oldLogprobs: s.logprobs,
    lossWeights: s.tokens.map(() => 1 / 30),
  }));
  return engine.update({ modelKey, baseVersion: 0, requestId: `${modelKey}-1`, samples, settings: { lr: 0.05, innerSteps: 2 } });
}

test('LoRA: version 0 is initAdapter and scores as the base; an Update trains the adapter alone; versions score as their merged weights', async () => {
  const engine = cpuEngine({ batchShape: 'free' });
  assert.equal(engine.capabilities().lora, true);
  await engine.initModel({ modelKey: 'base', spec: BASE, seed: 7 });
  const info = await engine.initModel({ modelKey: 'a', spec: SPEC, seed: 99 });
  assert.equal(info.paramCount, Pa);
  const v0 = await engine.exportVersion({ modelKey: 'a', version: 0 });
  assert.ok(sameBits(decodeWeights(v0.weights, Pa), initAdapter(spec, 99)), 'version 0 = initAdapter(spec, 99)');
  assert.ok(sameBits(await scores(engine, 'a', 0), await scores(engine, 'base', 0)), 'B = 0: the base’s log-probs');

  const u = await trainOnce(engine, 'a');
  assert.equal(u.info.paramCount, Pa);
  assert.equal(u.info.optimizerStep, 2);
  const v1 = await engine.exportVersion({ modelKey: 'a', version: 1 });
  const phi = decodeWeights(v1.weights, Pa);
  const moments = decodeOptimizerState(v1.optimizerState, Pa);
  assert.equal(moments.step, 2);
  assert.ok(moments.m.some((x) => x !== 0));
  for (const slot of adapterLayout(spec).slots.filter((x) => x.matrix === 'B'))
    assert.ok(
      phi.subarray(slot.offset, slot.offset + slot.size).some((x) => x !== 0),
      `${slot.name} is still 0`,
    );
  const trained = await scores(engine, 'a', 1);
  assert.ok(!sameBits(trained, await scores(engine, 'base', 0)), 'the log-probs moved');
  // the base is frozen: its own model's version 0 still scores as before, and the merged weights loaded as a
  // plain model give the LoRA version's log-probs bit for bit (the same merge, the same graphs)
  const baseTheta = initTransformerWeights(baseSpecOf(spec), 7);
  const exportedBase = await engine.exportVersion({ modelKey: 'base', version: 0 });
  assert.ok(sameBits(decodeWeights(exportedBase.weights, baseTheta.length), baseTheta));
  await engine.loadVersion({ modelKey: 'merged', version: 0, spec: BASE, weights: encodeWeights(mergeLora(spec, baseTheta, phi)) });
  assert.ok(sameBits(await scores(engine, 'merged', 0), trained), 'LoRA version 1 = its merged weights');

  // an export reloads exactly on a fresh engine, and trains on from there the same way
  const fresh = cpuEngine({ batchShape: 'free' });
  await fresh.loadVersion({ modelKey: 'a', version: 1, spec: v1.info.spec, weights: v1.weights, optimizerState: v1.optimizerState });
  assert.ok(sameBits(await scores(fresh, 'a', 1), trained));
  // a second adapter over the same base: its own version 0 is its own draw, scoring as the base
  await engine.initModel({ modelKey: 'b', spec: { ...BASE, lora: { ...LORA, rank: 3 } }, seed: 5 });
  assert.ok(sameBits(await scores(engine, 'b', 0), await scores(engine, 'base', 0)));
});

test('LoRA specs that cannot be hosted are INVALID_REQUEST naming the field', async () => {
  const engine = cpuEngine({ batchShape: 'free' });
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ ...BASE, lora: { ...LORA, baseSeed: undefined } }, /^spec\.lora\.baseSeed: required/],
    [{ ...BASE, lora: { ...LORA, targets: ['q', 'g'] } }, /^spec\.lora\.targets: "g" is not a projection of this model/],
    [{ ...BASE, lora: { ...LORA, rank: 0 } }, /^spec\.lora\.rank: /],
    [{ ...BASE, lora: { ...LORA, baseSeed: undefined, baseCheckpoint: '/nonexistent/troupe-lora-base' } }, /^spec\.lora\.baseCheckpoint: /],
    [{ family: 'transformer', checkpoint: '/nonexistent/dir', lora: LORA }, /^spec\.lora: over a checkpoint the base is the checkpoint/],
  ];
  for (const [s, field] of cases) {
    const e = await fault(engine.initModel({ modelKey: 'x', spec: s as never, seed: 1 }));
    assert.equal(e.reason, 'INVALID_REQUEST', e.message);
    assert.match(e.message, field);
  }
});

test('LoRA over a checkpoint: {checkpoint, lora} names the directory as lora.baseCheckpoint and scores as the checkpoint model', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-lora-engine-'));
  try {
    const dir = path.join(root, 'llama');
    const llama = normalizeTransformerSpec({ ...BASE, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false, tiedHead: false });
    exportHfCheckpoint(dir, llama, initTransformerWeights(llama, 3));
    const engine = cpuEngine({ batchShape: 'free' });
    await engine.initModel({ modelKey: 'plain', spec: { family: 'transformer', checkpoint: dir } as never, seed: 1 });
    const info = await engine.initModel({
      modelKey: 'ad',
      spec: { family: 'transformer', checkpoint: dir, lora: { rank: 2, alpha: 2, targets: ['q', 'd'] } } as never,
      seed: 4,
    });
    const lora = (info.spec as { lora?: { baseCheckpoint?: string } }).lora;
    assert.equal(lora?.baseCheckpoint, dir);
    assert.equal(info.paramCount, adapterLayout(normalizeTransformerSpec(info.spec)).total);
    assert.ok(info.paramCount < paramLayout(llama).total / 4);
    assert.ok(sameBits(await scores(engine, 'ad', 0), await scores(engine, 'plain', 0)));
    // on another engine the base comes from the directory its spec names
    const ex = await engine.exportVersion({ modelKey: 'ad', version: 0 });
    const other = cpuEngine({ batchShape: 'free' });
    await other.loadVersion({ modelKey: 'ad', version: 0, spec: info.spec, weights: ex.weights });
    assert.ok(sameBits(await scores(other, 'ad', 0), await scores(engine, 'plain', 0)));
    // a directory that no longer gives the base's spec is refused
    const changed = normalizeTransformerSpec({ ...BASE, width: 8, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false, tiedHead: false });
    exportHfCheckpoint(dir, changed, initTransformerWeights(changed, 3));
    const e = await fault(cpuEngine({ batchShape: 'free' }).loadVersion({ modelKey: 'ad', version: 0, spec: info.spec, weights: ex.weights }));
    assert.match(e.message, /^spec\.lora\.baseCheckpoint: .* now gives the spec/);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('a LoRA Update is bitwise reproducible, whatever the engine’s generate/score threads', async () => {
  const shas = [];
  for (const intraOpThreads of [1, 2]) {
    const engine = cpuEngine({ batchShape: 'free', intraOpThreads });
    await engine.initModel({ modelKey: 'a', spec: SPEC, seed: 99 });
    const u = await trainOnce(engine, 'a');
    shas.push([u.info.weightsSha256, u.info.optimizerSha256]);
  }
  assert.deepEqual(shas[0], shas[1]);
});

test('a LoRA runtime merges an adapter once while it is among the last 4 sampled, then again', () => {
  const factory = sessionFactory('cpu', { intraOpThreads: 1 });
  const base = initTransformerWeights(baseSpecOf(spec), 7);
  const rt = createLoraRuntime(spec, new TransformerRuntime(baseSpecOf(spec), factory), base, factory);
  const adapters = Array.from({ length: 5 }, (_, k) => Float32Array.from({ length: Pa }, (_, i) => Math.sin(i + k) / 8));
  const first = rt.mergedTheta(adapters[0]!);
  assert.ok(sameBits(first, mergeLora(spec, base, adapters[0]!)));
  assert.equal(rt.mergedTheta(adapters[0]!), first, 'kept');
  const kept = adapters.slice(1, 4).map((a) => rt.mergedTheta(a));
  assert.equal(rt.mergedTheta(adapters[0]!), first, 'still among the last 4');
  rt.mergedTheta(adapters[4]!); // the least recently used, adapters[1], goes
  assert.equal(rt.mergedTheta(adapters[0]!), first);
  const again = rt.mergedTheta(adapters[1]!);
  assert.notEqual(again, kept[0], 'merged again');
  assert.ok(sameBits(again, mergeLora(spec, base, adapters[1]!)));
});
