/**
 * The PyTorch engine's prefix cache (engines/pytorch/prefix_cache.py): an
 * agent's next turn sends its last context, its generated tokens and the
 * replies after them, and the engine copies the rows an earlier Generate of
 * the same version ran instead of running them again. Two engines on the same
 * model, one with the cache and one with `--prefix-cache-bytes 0`, give every
 * turn the same tokens and log-probs bit for bit; Stats counts the rows reused
 * (all of turn 1's where turn 2 extends it, the shared part where it
 * diverges, none for another model's weights).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import type { GenerateResponse } from '../../../engines/protocol/types';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { engineCommand } from '../../../processes/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { TINY_TRANSFORMER } from '../../helpers/tiny-transformer';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;
const SPEC = { ...TINY_TRANSFORMER, maxSeq: 320 };

/** Deterministic pseudo-random tokens of the tiny vocabulary. */
const tokens = (n: number, salt: number) => Array.from({ length: n }, (_, i) => (i * 7 + salt * 13 + ((i * salt) % 5)) % SPEC.vocabSize);

describe('the PyTorch engine reuses an earlier turn’s rows, bit for bit', { skip }, () => {
  const engines: SpawnedEngine[] = [];
  let cached: EngineClient;
  let plain: EngineClient;
  before(async () => {
    const start = async (extra: string[]) => {
      const e = await spawnEngine(['--device', 'cpu', '--port', '0', ...extra], { quiet: true, command: engineCommand('pytorch') });
      engines.push(e);
      const c = await EngineClient.connect(e.listening.address);
      await c.initModel({ modelKey: 'm', spec: SPEC, seed: 3 });
      return c;
    };
    cached = await start([]);
    plain = await start(['--prefix-cache-bytes', '0']);
  });
  after(() => {
    cached?.close();
    plain?.close();
    for (const e of engines) e.child.kill('SIGTERM');
  });

  const both = async (contexts: number[][], maxTokens: number, modelKey = 'm') => {
    const req = { modelKey, version: 0, sampling: { temperature: 1, maxTokens }, sequences: contexts.map((context, i) => ({ context, seed: 900 + i })) };
    const before = (await cached.stats()).prefixRowsReused;
    const [a, b] = await Promise.all([cached.generate(req), plain.generate(req)]);
    const reused = (await cached.stats()).prefixRowsReused - before;
    a.sequences.forEach((s, i) => {
      const p = b.sequences[i]!;
      assert.deepEqual(s.tokens, p.tokens, `sequences[${i}]: tokens differ with the prefix cache`);
      assert.deepEqual(s.logprobs, p.logprobs, `sequences[${i}]: log-probs differ with the prefix cache`);
      assert.deepEqual(s.sampleLogprobs, p.sampleLogprobs, `sequences[${i}]: sample log-probs differ with the prefix cache`);
    });
    return { out: a, reused };
  };

  it('turn 2 extends turn 1: every row turn 1 ran is copied; a diverging turn reuses the shared part', async () => {
    const first = [tokens(20, 1), tokens(33, 2), tokens(20, 1), tokens(40, 3)]; // two sequences of one context (a group)
    const turn1 = await both(first, 10);
    assert.equal(turn1.reused, 0, 'nothing to reuse on the first turn');
    const t1: GenerateResponse['sequences'] = turn1.out.sequences;
    for (const s of t1) assert.equal(s.tokens.length, 10);

    const second = first.map((ctx, i) => [...ctx, ...t1[i]!.tokens, ...tokens(5, 10 + i)]);
    const turn2 = await both(second, 8);
    // each sequence's turn-1 rows: its context and every generated token but the last (never run)
    const expected = first.reduce((n, ctx) => n + ctx.length + 10 - 1, 0);
    assert.equal(turn2.reused, expected, 'turn 2 copies every row turn 1 ran');

    // a turn that keeps only 4 of the generated tokens (re-tokenized history) reuses the context and those 4
    const diverged = [[...first[3]!, ...t1[3]!.tokens.slice(0, 4), ...tokens(9, 20)]];
    const turn3 = await both(diverged, 6);
    assert.equal(turn3.reused, first[3]!.length + 4);
  });

  it('contexts whose rows fill whole steps before any row draws a token (3 x 300 rows) generate, and turn 2 reuses them', async () => {
    // a step holds at most 256 rows on CPU: the first step is context rows only (Generate failed on it before)
    const first = Array.from({ length: 3 }, (_, i) => tokens(300, 30 + i));
    const turn1 = await both(first, 4);
    const scored = await cached.score({
      modelKey: 'm',
      version: 0,
      sequences: first.map((context, i) => ({ context, tokens: turn1.out.sequences[i]!.tokens })),
    });
    scored.sequences.forEach((s, i) => assert.deepEqual(s.logprobs, turn1.out.sequences[i]!.logprobs, `sequences[${i}]: Score differs`));
    const turn2 = await both(
      first.map((ctx, i) => [...ctx, ...turn1.out.sequences[i]!.tokens, 3]),
      4,
    );
    assert.equal(turn2.reused, 3 * (300 + 4 - 1));
  });

  it('a negative --prefix-cache-bytes is refused naming the flag', async () => {
    await assert.rejects(
      spawnEngine(['--device', 'cpu', '--port', '0', '--prefix-cache-bytes', '-1'], { quiet: true, command: engineCommand('pytorch') }),
      /--prefix-cache-bytes must be >= 0/,
    );
  });

  it('another model’s weights never meet this one’s rows', async () => {
    await cached.initModel({ modelKey: 'other', spec: SPEC, seed: 4 });
    await plain.initModel({ modelKey: 'other', spec: SPEC, seed: 4 });
    const ctx = tokens(30, 5);
    const t1 = await both([ctx], 6);
    const next = [...ctx, ...t1.out.sequences[0]!.tokens, 1, 2];
    const elsewhere = await both([next], 4, 'other');
    assert.equal(elsewhere.reused, 0, 'model other reused model m’s rows');
    const same = await both([next], 4);
    assert.equal(same.reused, 30 + 6 - 1);
    assert.ok((await cached.stats()).prefixCacheBytes > 0);
    assert.equal((await plain.stats()).prefixCacheBytes, 0);
  });
});
