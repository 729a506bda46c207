/**
 * The PyTorch engine claims `deterministic`: what a sequence cut short keeps
 * (max_tokens n, or an Abort after n tokens) is bit for bit the first n tokens
 * and log-probs of the same sequence run longer. Its log-probs come from a
 * full-sequence forward (they equal Score's), and a plain forward's matmul and
 * softmax kernels change with the sequence length, moving a row by an ulp
 * (measured: 14 of 30 prefix lengths differed, up to 4.8e-7); the engine
 * scores in fixed 16-row chunks so that they cannot. This is the conformance
 * suite's abort.generate prefix rule without its timing: max_tokens n for
 * every n < 30 against max_tokens 30, same seeds (Philox uniforms per token
 * index, so the tokens are the same), and Score of the long sequences
 * against Generate's log-probs.
 *
 * Skips (naming the Debian packages) where the PyTorch engine cannot run.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { engineCommand } from '../../../processes/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { TINY_TRANSFORMER } from '../../helpers/tiny-transformer';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;
const SPEC = TINY_TRANSFORMER;
const LONG = 30;

describe('the PyTorch engine: a shorter run of a sequence is a bit-identical prefix of a longer one', { skip }, () => {
  let engine: SpawnedEngine;
  let c: EngineClient;
  before(async () => {
    engine = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: engineCommand('pytorch') });
    c = await EngineClient.connect(engine.listening.address);
    await c.initModel({ modelKey: 'prefix', spec: SPEC, seed: 3 });
  });
  after(() => {
    c?.close();
    engine?.child.kill('SIGTERM');
  });

  it('max_tokens n keeps the first n tokens and log-probs of max_tokens 30; Score equals Generate', async () => {
    const sequences = [
      { context: [1], seed: 700 },
      { context: [5], seed: 701 },
      { context: [2], seed: 702 },
    ];
    const long = await c.generate({ modelKey: 'prefix', version: 0, sampling: { temperature: 1, maxTokens: LONG }, sequences });
    for (const s of long.sequences) assert.equal(s.tokens.length, LONG);
    const scored = await c.score({
      modelKey: 'prefix',
      version: 0,
      sequences: sequences.map((q, i) => ({ context: q.context, tokens: long.sequences[i]!.tokens })),
    });
    scored.sequences.forEach((s, i) => assert.deepEqual(s.logprobs, long.sequences[i]!.logprobs, `sequences[${i}]: Score differs from Generate`));
    for (let n = 1; n < LONG; n++) {
      const short = await c.generate({ modelKey: 'prefix', version: 0, sampling: { temperature: 1, maxTokens: n }, sequences });
      short.sequences.forEach((s, i) => {
        const l = long.sequences[i]!;
        assert.deepEqual(s.tokens, l.tokens.slice(0, n), `sequences[${i}], max_tokens ${n}: tokens`);
        assert.deepEqual(s.sampleLogprobs, l.sampleLogprobs.slice(0, n), `sequences[${i}], max_tokens ${n}: sample_logprobs`);
        assert.deepEqual(s.logprobs, l.logprobs.slice(0, n), `sequences[${i}], max_tokens ${n}: logprobs (not bit-identical)`);
      });
    }
  });
});
