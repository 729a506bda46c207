/**
 * The PyTorch engine mixes LoRA adapters in one Generate run (engines/pytorch/lora.py): concurrent Generate
 * calls on different adapters over one base (two versions of one LoRA model, and two other models of the
 * same LoRA spec) share device runs (Stats.mixed_adapter_runs rises), each row with its own adapter,
 * unmerged. Every sequence gets the same tokens and log-prob bits as in its call alone and as alone in a
 * call of its own, and Score of each adapter gives its Generate's log-probs bit for bit. With --max-batch 4,
 * 12 sequences per adapter of different lengths and stop settings refill the slots mid-run, so a step holds
 * rows of several adapters in changing mixes, prefill and decode rows together.
 *
 * Skips (naming the Debian packages) where the PyTorch engine cannot run.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import type { GenerateResponse, GenerateSequenceInput } from '../../../engines/protocol/types';
import { pytorchEngine } from '../../../engines/pytorch';
import { engineCommand } from '../../../gpu-workers/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;
const V = 16;
const VARIANTS = {
  llama: {
    base: { family: 'transformer', vocabSize: V, width: 32, layers: 2, heads: 4, kvHeads: 2, maxSeq: 64, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu' },
    targets: ['q', 'k', 'v', 'o', 'g', 'u', 'd'],
  },
  gpt2: { base: { family: 'transformer', vocabSize: V, width: 32, layers: 2, heads: 4, maxSeq: 64 }, targets: ['q', 'v', '1', '2'] },
};

function sequences(k: number): GenerateSequenceInput[] {
  return Array.from({ length: 12 }, (_, i) => ({
    context: Array.from({ length: [1, 16, 3, 17, 32, 5][(i + k) % 6]! }, (_, t) => (3 * i + 5 * t + k + 1) % V),
    seed: 900 + i + 100 * k,
    sampling:
      i % 4 === 0
        ? { temperature: 0, maxTokens: 3 + i }
        : i % 4 === 1
          ? { temperature: 1, maxTokens: 20, stopTokens: [i % V, (i + 7) % V] }
          : i % 4 === 2
            ? { temperature: 0.8, topK: 6, topP: 0.9, maxTokens: 1 + (i % 9) }
            : { temperature: 1.3, maxTokens: 25 },
  }));
}

/** n float32 values in ±0.3 (a fixed LCG), little-endian: an adapter whose A and B are both non-zero */
function randomAdapter(n: number, seed: number): Uint8Array {
  const b = Buffer.alloc(4 * n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    b.writeFloatLE((s / 2 ** 32 - 0.5) * 0.6, 4 * i);
  }
  return b;
}

function same(a: GenerateResponse['sequences'][number], b: GenerateResponse['sequences'][number], what: string) {
  assert.deepEqual(a.tokens, b.tokens, `${what}: tokens`);
  assert.deepEqual(a.logprobs, b.logprobs, `${what}: logprobs`);
  assert.deepEqual(a.sampleLogprobs, b.sampleLogprobs, `${what}: sample_logprobs`);
  assert.equal(a.stopReason, b.stopReason, `${what}: stop reason`);
}

describe('the PyTorch engine: LoRA adapters over one base share Generate runs, each row with its own adapter', { skip }, () => {
  let engine: SpawnedEngine;
  let c: EngineClient;
  before(async () => {
    engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--max-batch', '4'], { quiet: true, command: engineCommand('pytorch') });
    c = await EngineClient.connect(engine.listening.address);
  });
  after(() => {
    c?.close();
    engine?.child.kill('SIGTERM');
  });

  for (const [name, { base, targets }] of Object.entries(VARIANTS)) {
    it(`${name}: 4 adapters × 12 sequences through 4 slots, concurrent = alone = one by one, bit for bit; Score = Generate`, async () => {
      const spec = { ...base, lora: { rank: 4, alpha: 8, targets, baseSeed: 5 } };
      await c.initModel({ modelKey: `${name}-base`, spec: base as never, seed: 5 });
      const a = await c.initModel({ modelKey: `${name}-a`, spec: spec as never, seed: 1 });
      const P = a.paramCount;
      await c.loadVersion({ modelKey: `${name}-a`, version: 1, spec: spec as never, weights: randomAdapter(P, 1) });
      await c.loadVersion({ modelKey: `${name}-b`, version: 0, spec: spec as never, weights: randomAdapter(P, 2) });
      await c.loadVersion({ modelKey: `${name}-c`, version: 3, spec: spec as never, weights: randomAdapter(P, 3) });
      const adapters: Array<[string, number]> = [
        [`${name}-a`, 1],
        [`${name}-a`, 0],
        [`${name}-b`, 0],
        [`${name}-c`, 3],
      ];
      const call = (k: number) => ({ modelKey: adapters[k]![0], version: adapters[k]![1], sequences: sequences(k) });
      const alone: GenerateResponse[] = [];
      for (const k of adapters.keys()) alone.push(await c.generate(call(k)));

      // the adapters differ: the same sequences give other log-probs under each
      const one = await c.generate({ ...call(0), sequences: sequences(0).slice(0, 4) });
      const other = await c.generate({ ...call(2), sequences: sequences(0).slice(0, 4) });
      assert.notDeepEqual(
        one.sequences.map((s) => s.logprobs),
        other.sequences.map((s) => s.logprobs),
        'adapters a v1 and b v0 generate the same log-probs',
      );

      // a long call on the plain base first, so that the four adapter calls queue behind it and then share runs
      const before = await c.stats();
      const blocker = c.generate({
        modelKey: `${name}-base`,
        version: 0,
        sampling: { temperature: 1, maxTokens: 25 },
        sequences: Array.from({ length: 48 }, (_, i) => ({ context: [1 + (i % (V - 1))], seed: i })),
      });
      const together = await Promise.all(adapters.map((_, k) => c.generate(call(k))));
      await blocker;
      const after = await c.stats();
      assert.ok(after.mixedAdapterRuns > before.mixedAdapterRuns, `mixed_adapter_runs stayed ${after.mixedAdapterRuns}: the adapters never shared a run`);
      assert.ok(after.generateBatches - before.generateBatches < 5, `5 Generate calls took ${after.generateBatches - before.generateBatches} device runs`);

      for (const k of adapters.keys()) {
        const seqs = sequences(k);
        for (const [i, q] of seqs.entries()) {
          const what = `adapter ${adapters[k]!.join(' v')} sequences[${i}]`;
          same(together[k]!.sequences[i]!, alone[k]!.sequences[i]!, `${what} concurrent vs its call alone`);
          same((await c.generate({ ...call(k), sequences: [q] })).sequences[0]!, alone[k]!.sequences[i]!, `${what} alone`);
        }
        const scored = await c.score({
          modelKey: adapters[k]![0],
          version: adapters[k]![1],
          sequences: seqs.map((q, i) => ({ context: q.context, tokens: alone[k]!.sequences[i]!.tokens })),
        });
        scored.sequences.forEach((s, i) => assert.deepEqual(s.logprobs, alone[k]!.sequences[i]!.logprobs, `adapter ${k} sequences[${i}]: Score`));
      }
      console.log(
        `${name}: ${after.mixedAdapterRuns - before.mixedAdapterRuns} mixed-adapter run(s), ${after.generateBatches - before.generateBatches} runs for 5 calls`,
      );
    });
  }
});
