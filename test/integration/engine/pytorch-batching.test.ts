/**
 * The PyTorch engine's batched Generate (continuous batching over fixed-shape
 * cache slots, engines/pytorch/hf.py run_rows) gives every sequence the
 * same tokens and log-prob bits as when it runs alone: with fewer slots than
 * sequences (--max-batch 4, 12 sequences of different lengths, stop tokens and
 * sampling settings, so slots are refilled mid-run), and with concurrent calls
 * that share device runs (a long call first, so that three calls queue behind
 * it and then run together). Log-probs stay bit-identical to Score. Contexts of
 * 16, 17 and 32 tokens make the rescoring reuse the prefill's full 16-row
 * chunks (engines/pytorch/server.py _score_many), and 12 sequences fill
 * several 4-sequence scoring steps (hf.py run_rows) while alone each
 * runs with 3 padded slots.
 *
 * LoRA adapters over one base (two versions of one LoRA model, two other models of
 * its spec) share those runs too, each row with its own adapter, unmerged
 * (engines/pytorch/lora.py): concurrent calls raise Stats.mixed_adapter_runs, and
 * every sequence has the bits of its call alone and of itself alone, and Score of
 * each adapter gives its Generate's log-probs bit for bit.
 *
 * A group's sequences (one context, several seeds) that take slots together run their context's
 * rows once (Stats.prefill_rows_shared) and still have the bits each has alone.
 *
 * Skips (saying why) where the PyTorch engine cannot run.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import type { GenerateResponse, GenerateSequenceInput } from '../../../engines/protocol/types';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { engineCommand } from '../../../processes/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;
const V = 16;
const VARIANTS = {
  llama: { family: 'transformer', vocabSize: V, width: 32, layers: 2, heads: 4, kvHeads: 2, maxSeq: 64, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu' },
  gpt2: { family: 'transformer', vocabSize: V, width: 32, layers: 2, heads: 4, maxSeq: 64 },
};

/** The projections each variant's LoRA adapters target. */
const LORA_TARGETS: Record<keyof typeof VARIANTS, string[]> = { llama: ['q', 'k', 'v', 'o', 'g', 'u', 'd'], gpt2: ['q', 'v', '1', '2'] };

/** 12 sequences of different lengths and sampling settings; `k` shifts their tokens and seeds. */
function sequences(k = 0): GenerateSequenceInput[] {
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

describe('the PyTorch engine: a sequence generated in a batch equals the same sequence alone, and LoRA adapters share runs', { skip }, () => {
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

  for (const [name, spec] of Object.entries(VARIANTS)) {
    it(`${name}: 12 sequences through 4 slots, 3 concurrent calls, each alone: same bits; Score = Generate`, async () => {
      await c.initModel({ modelKey: name, spec, seed: 11 });
      {
        const v = 0;
        const seqs = sequences();
        const batch = await c.generate({ modelKey: name, version: v, sequences: seqs });
        const stops = batch.sequences.map((s) => String(s.stopReason));
        assert.ok(stops.includes('stop_token') && stops.includes('max_tokens'), `stop reasons ${stops}`);
        // a long call first, so that the three calls queue behind it and then share one device run
        const before = await c.stats();
        const blocker = c.generate({
          modelKey: name,
          version: v,
          sampling: { temperature: 1, maxTokens: 25 },
          sequences: Array.from({ length: 48 }, (_, i) => ({ context: [1 + (i % (V - 1))], seed: i })),
        });
        const concurrent = await Promise.all([0, 1, 2].map((k) => c.generate({ modelKey: name, version: v, sequences: seqs.filter((_, i) => i % 3 === k) })));
        await blocker;
        const after = await c.stats();
        const runs = after.generateBatches - before.generateBatches;
        assert.ok(runs < 4, `4 concurrent Generate calls took ${runs} device runs: none shared one`);
        for (const [i, q] of seqs.entries()) {
          const alone = (await c.generate({ modelKey: name, version: v, sequences: [q] })).sequences[0]!;
          const b = batch.sequences[i]!;
          assert.deepEqual(b.tokens, alone.tokens, `sequences[${i}]: tokens`);
          assert.deepEqual(b.logprobs, alone.logprobs, `sequences[${i}]: logprobs`);
          assert.deepEqual(b.sampleLogprobs, alone.sampleLogprobs, `sequences[${i}]: sample_logprobs`);
          assert.equal(b.stopReason, alone.stopReason);
          const cc = concurrent[i % 3]!.sequences[Math.floor(i / 3)]!;
          assert.deepEqual([cc.tokens, cc.logprobs, cc.sampleLogprobs], [b.tokens, b.logprobs, b.sampleLogprobs], `sequences[${i}] in a concurrent call`);
        }
        const scored = await c.score({
          modelKey: name,
          version: v,
          sequences: seqs.map((q, i) => ({ context: q.context, tokens: batch.sequences[i]!.tokens })),
        });
        scored.sequences.forEach((s, i) => assert.deepEqual(s.logprobs, batch.sequences[i]!.logprobs, `sequences[${i}]: Score`));
      }
      const st = await c.stats();
      console.log(
        `${name}: ${st.generateBatches} device runs for the Generate calls, mean ${st.meanRequestsPerBatch.toFixed(2)} requests and ${st.meanBatchSize.toFixed(1)} sequences per run`,
      );
    });
  }

  for (const name of Object.keys(VARIANTS)) {
    it(`${name}: a group (one context, 6 seeds) runs its context once per round of slots; each sequence has its bits alone`, async () => {
      await c.initModel({ modelKey: `${name}-group`, spec: VARIANTS[name as keyof typeof VARIANTS] as never, seed: 12 });
      const context = Array.from({ length: 20 }, (_, t) => (7 * t + 3) % V);
      const group: GenerateSequenceInput[] = Array.from({ length: 6 }, (_, i) => ({
        context,
        seed: 40 + i,
        sampling: i === 5 ? { temperature: 0, maxTokens: 6 } : { temperature: 1, maxTokens: 8 + i },
      }));
      const before = await c.stats();
      const batch = await c.generate({ modelKey: `${name}-group`, version: 0, sequences: group });
      const shared = (await c.stats()).prefillRowsShared - before.prefillRowsShared;
      // 4 slots: the first round takes 4 of the group (3 copy the first's 20 context rows), later rounds the rest
      assert.ok(shared >= 3 * context.length, `context rows shared: ${shared}`);
      assert.ok(new Set(batch.sequences.map((q) => q.tokens.join())).size > 1, 'the seeds draw different sequences');
      for (const [i, q] of group.entries()) {
        const alone = await c.generate({ modelKey: `${name}-group`, version: 0, sequences: [q] });
        same(batch.sequences[i]!, alone.sequences[0]!, `group[${i}]`);
      }
    });
  }

  for (const [name, base] of Object.entries(VARIANTS)) {
    const targets = LORA_TARGETS[name as keyof typeof VARIANTS];
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
