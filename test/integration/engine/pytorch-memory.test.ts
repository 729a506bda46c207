/**
 * The PyTorch engine refuses a spec whose smallest run cannot fit in its memory
 * budget (--memory-bytes; engines/pytorch/memory.py), naming the dominant
 * field, before anything is allocated. The boundary is computed here by hand
 * for one spec (vocab 16, width 32, 2 layers, 4 heads, 2 kv heads, SwiGLU
 * mlpWidth 128, no biases, tied head, maxSeq 32):
 *
 *   P      = 512 (tok_emb) + 2·(32 + 1024 + 512 + 512 + 1024 + 32 + 3·4096) + 32 = 31,392
 *   state  = 4·8·P = 1,004,544
 *   update = 4·32·[3·(10·32 + 2·16 + 2·4·32 + 4·128) + 3·16] = 4·32·3408 = 436,224
 *   step   = 4·[64·(352 + 512 + 3·16) + 16·32·(2·16 + 32 + 3·4)] + one cache slot 4·2·2·16·32
 *          = 389,120 + 8,192 = 397,312 (a Score / Generate step of 64 rows)
 *   total  = 1,004,544 + 436,224 = 1,440,768 bytes
 *
 * so an engine with exactly that budget loads it and refuses the same spec with
 * maxSeq 33 (naming width: state dominates, embeddings are few); a long maxSeq
 * names maxSeq and a large vocabulary names vocabSize; a Qwen2.5-1.5B shape
 * (1.54e9 parameters, within the 1e10 bound) is refused by the budget too.
 *
 * A LoRA adapter over that spec (rank 2 on q and o) keeps AdamW state for its
 * adapter only: Pt = 2·(1024 + 1024) = 4,096 targeted values, Pa = 2·2·(2·(32 + 32))
 * = 512 adapter values, state = 4·(P + 2·Pt + 8·Pa) = 174,720, so at maxSeq 33
 * (update 453,024) it fits where the full spec does not.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { engineCommand } from '../../../processes/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;
const BUDGET = 1_440_768;
const SPEC = { family: 'transformer', vocabSize: 16, width: 32, layers: 2, heads: 4, kvHeads: 2, mlpWidth: 128, maxSeq: 32 };
const LLAMA = { positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false, tiedHead: true };

describe('the PyTorch engine refuses a spec that cannot fit its memory budget', { skip }, () => {
  let engine: SpawnedEngine;
  let c: EngineClient;
  before(async () => {
    engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--memory-bytes', String(BUDGET)], { quiet: true, command: engineCommand('pytorch') });
    c = await EngineClient.connect(engine.listening.address);
  });
  after(() => {
    c?.close();
    engine?.child.kill('SIGTERM');
  });

  it('fits at exactly the hand-computed bytes; one token more of maxSeq, a long maxSeq, a large vocabulary are refused by field', async () => {
    const info = await c.initModel({ modelKey: 'fits', spec: { ...SPEC, ...LLAMA }, seed: 1 });
    assert.equal(info.paramCount, 31_392);
    const cases: Array<[string, object, RegExp]> = [
      ['maxSeq 33', { maxSeq: 33 }, /^spec\.width: needs ~0\.00 GiB .*memory budget is 0\.00 GiB \(reduce width/],
      ['maxSeq 4096', { maxSeq: 4096 }, /^spec\.maxSeq: needs ~\d+\.\d\d GiB \(weights and AdamW state 0\.00 GiB, 1 sequence of maxSeq 4096 /],
      ['vocabulary', { vocabSize: 100_000 }, /^spec\.vocabSize: needs /],
      // a real checkpoint's shape (Qwen2.5-1.5B, over the old 1e9-parameter bound): the budget, not a bound, refuses it
      [
        'a Qwen2.5-1.5B shape',
        { vocabSize: 151_936, width: 1536, layers: 28, heads: 12, kvHeads: 2, mlpWidth: 8960, maxSeq: 2048 },
        /^spec\.width: needs ~68\.37 GiB \(weights and AdamW state 46\.00 GiB/,
      ],
    ];
    for (const [what, change, message] of cases) {
      const spec = { ...SPEC, ...LLAMA, ...change };
      for (const call of [
        () => c.initModel({ modelKey: `big-${what}`, spec, seed: 1 }),
        () => c.loadVersion({ modelKey: `big-${what}`, version: 0, spec, weights: new Uint8Array(4), optimizerState: new Uint8Array(0) }),
      ]) {
        await assert.rejects(call(), (e: { reason: string; message: string }) => {
          assert.equal(e.reason, 'INVALID_REQUEST', e.message);
          assert.match(e.message.replace(/^engine \w+: /, ''), message, what);
          return true;
        });
      }
      await assert.rejects(
        c.score({ modelKey: `big-${what}`, version: 0, sequences: [{ context: [1], tokens: [2] }] }),
        (e: { reason: string }) => e.reason === 'MODEL_NOT_LOADED',
      );
    }
  });

  it('budgets a LoRA spec by its adapter: it loads at a maxSeq the full spec is refused at', async () => {
    const lora = { rank: 2, alpha: 2, targets: ['q', 'o'], baseSeed: 1 };
    const info = await c.initModel({ modelKey: 'lora-33', spec: { ...SPEC, ...LLAMA, maxSeq: 33, lora }, seed: 1 });
    assert.equal(info.paramCount, 512);
  });
});
