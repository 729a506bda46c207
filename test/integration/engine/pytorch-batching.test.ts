/**
 * The PyTorch engine's batched Generate (continuous batching over fixed-shape
 * decode slots, engines/pytorch/model.py decode_batch) gives every sequence the
 * same tokens and log-prob bits as when it runs alone: with fewer slots than
 * sequences (--max-batch 4, 12 sequences of different lengths, stop tokens and
 * sampling settings, so slots are refilled mid-run), and with concurrent calls
 * that share device runs (a long call first, so that three calls queue behind
 * it and then run together). Log-probs stay bit-identical to Score. Contexts of
 * 16, 17 and 32 tokens make the rescoring reuse the prefill's full 16-row
 * chunks (engines/pytorch/server.py _score_many), and 12 sequences fill
 * several 4-sequence scoring steps (model.py forward_rows) while alone each
 * runs with 3 padded slots.
 *
 * Skips (naming the Debian packages) where the PyTorch engine cannot run.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import type { GenerateSequenceInput } from '../../../engines/protocol/types';
import { pytorchEngine } from '../../../engines/pytorch';
import { engineCommand } from '../../../gpu-workers/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;
const V = 16;
const VARIANTS = {
  llama: { family: 'transformer', vocabSize: V, width: 32, layers: 2, heads: 4, kvHeads: 2, maxSeq: 64, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu' },
  gpt2: { family: 'transformer', vocabSize: V, width: 32, layers: 2, heads: 4, maxSeq: 64 },
};

function sequences(): GenerateSequenceInput[] {
  return Array.from({ length: 12 }, (_, i) => ({
    context: Array.from({ length: [1, 16, 3, 17, 32, 5][i % 6]! }, (_, t) => (3 * i + 5 * t + 1) % V),
    seed: 900 + i,
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

describe('the PyTorch engine: a sequence generated in a batch equals the same sequence alone', { skip }, () => {
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
});
