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
  // plain model give the LoRA version's log-probs within float32 rounding (the adapter runs unmerged: lora-graph.ts)
  const baseTheta = initTransformerWeights(baseSpecOf(spec), 7);
  const exportedBase = await engine.exportVersion({ modelKey: 'base', version: 0 });
  assert.ok(sameBits(decodeWeights(exportedBase.weights, baseTheta.length), baseTheta));
  await engine.loadVersion({ modelKey: 'merged', version: 0, spec: BASE, weights: encodeWeights(mergeLora(spec, baseTheta, phi)) });
  const merged = await scores(engine, 'merged', 0);
  const gap = Math.max(...merged.map((x, i) => Math.abs(x - trained[i]!)));
  assert.ok(gap <= 1e-5, `LoRA version 1 vs its merged weights: max |Δ log-prob| ${gap}`);

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

test('a LoRA runtime mixes adapters in one Generate run: each row bit for bit as alone, and as its adapter scores', async () => {
  const factory = sessionFactory('cpu', { intraOpThreads: 1 });
  const base = initTransformerWeights(baseSpecOf(spec), 7);
  const rt = createLoraRuntime(spec, new TransformerRuntime(baseSpecOf(spec), factory), base, factory);
  const adapters = Array.from({ length: 3 }, (_, k) => Float32Array.from({ length: Pa }, (_, i) => Math.sin(3 * i + k) / 2));
  const row = (i: number) => ({
    context: Array.from({ length: 1 + (i % 4) }, (_, j) => (i * 3 + j) % 11),
    seedKey: [i, 17] as [number, number],
    temperature: [1, 0.7, 0][i % 3]!,
    topK: 0,
    topP: 0,
    maxTokens: 5,
    stopTokens: [],
  });
  const rows = Array.from({ length: 9 }, (_, i) => row(i));
  const ofRow = rows.map((_, i) => (i * 2) % 3); // 0 2 1 0 2 1 ...
  const mixed = await rt.generateMixed(adapters, rows, ofRow);
  for (const [i, r] of rows.entries()) {
    const alone = (await rt.generate(adapters[ofRow[i]!]!, [r]))[0]!;
    assert.deepEqual(mixed[i]!.tokens, alone.tokens, `row ${i}: tokens`);
    assert.ok(sameBits(mixed[i]!.logprobs, alone.logprobs), `row ${i}: log-probs ${mixed[i]!.logprobs} vs ${alone.logprobs} alone`);
    // the same row in another mix (its adapter at another index, other neighbours) gives the same bits
    const other = await rt.generateMixed([adapters[(ofRow[i]! + 1) % 3]!, adapters[ofRow[i]!]!], [row(i + 1), r], [0, 1]);
    assert.ok(sameBits(other[1]!.logprobs, alone.logprobs), `row ${i} in another mix`);
    // and the generated tokens score, under the row's adapter, as they were sampled (float32 rounding)
    const scored = (await rt.score(adapters[ofRow[i]!]!, [{ context: r.context, tokens: alone.tokens }])).logprobs[0]!;
    scored.forEach((x, t) => assert.ok(Math.abs(x - alone.logprobs[t]!) <= 1e-5, `row ${i} token ${t}: score ${x}, generate ${alone.logprobs[t]}`));
  }
  // the adapters differ per row: the same row under each adapter samples different log-probs
  const r0 = rows[0]!;
  const per = await rt.generateMixed(adapters, [r0, r0, r0], [0, 1, 2]);
  assert.ok(!sameBits(per[0]!.logprobs, per[1]!.logprobs) && !sameBits(per[1]!.logprobs, per[2]!.logprobs));
});
