/**
 * Generation in-process: determinism, batch invariance (a sequence's tokens and
 * log-probs do not depend on what it was batched with), Score = Generate
 * log-probs, and the sampling semantics (greedy, temperature, top-k, top-p,
 * stop tokens) against the model's own distribution.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeWeights } from '../../../engines/protocol/version-bytes';
import { initWeights } from '../../../engines/families/tiny-lm/init';
import { normalizeSpec } from '../../../engines/families/tiny-lm/spec';
import type { GenerateRequest, GeneratedSequence, SamplingParams } from '../../../engines/protocol/types';
import { cpuEngine, rng, sameBits } from './helpers';

const V = 12;
const spec = normalizeSpec({ vocabSize: V, contextWindow: 6, embedDim: 8, hiddenDim: 32, layers: 2 });

/** An engine holding a version with peaked (non-uniform) next-token distributions. */
async function engineWithModel(opts: Parameters<typeof cpuEngine>[0] = {}) {
  const engine = cpuEngine(opts);
  const theta = initWeights(spec, 77).map((x) => x * 6);
  await engine.loadVersion({ modelKey: 'm', version: 3, spec, weights: encodeWeights(theta) });
  return engine;
}

const req = (sequences: GenerateRequest['sequences'], sampling: SamplingParams): GenerateRequest => ({
  modelKey: 'm',
  version: 3,
  sequences,
  sampling,
});

function assertSame(a: GeneratedSequence, b: GeneratedSequence, what: string) {
  assert.deepEqual(a.tokens, b.tokens, `${what}: tokens`);
  assert.ok(sameBits(a.logprobs, b.logprobs), `${what}: logprobs`);
  assert.ok(sameBits(a.sampleLogprobs, b.sampleLogprobs), `${what}: sample logprobs`);
  assert.equal(a.stopReason, b.stopReason, `${what}: stop reason`);
}

test('same version, contexts, settings and seeds give bit-identical results (also across engines)', async () => {
  const seqs = Array.from({ length: 8 }, (_, i) => ({ context: [i % V, (3 * i) % V], seed: 1000 + i }));
  const sampling = { temperature: 0.9, topK: 8, topP: 0.95, maxTokens: 12 };
  const a = await (await engineWithModel()).generate(req(seqs, sampling));
  const e2 = await engineWithModel();
  const b = await e2.generate(req(seqs, sampling));
  const c = await e2.generate(req(seqs, sampling));
  for (let i = 0; i < seqs.length; i++) {
    assertSame(a.sequences[i]!, b.sequences[i]!, `seq ${i} engine 1 vs 2`);
    assertSame(b.sequences[i]!, c.sequences[i]!, `seq ${i} repeat`);
  }
  assert.notDeepEqual(a.sequences[0]!.tokens, a.sequences[1]!.tokens, 'different seeds differ');
});

test('a sequence gets the same result alone, in one big batch, or coalesced with other callers', async () => {
  const engine = await engineWithModel({ batchWindowMs: 5 });
  const r = rng(5);
  const settings: SamplingParams[] = [
    { temperature: 1, maxTokens: 10 },
    { temperature: 0.7, topK: 4, maxTokens: 7, stopTokens: [2] },
    { temperature: 1.3, topP: 0.8, maxTokens: 16 },
    { temperature: 0, maxTokens: 5 },
  ];
  const calls = Array.from({ length: 48 }, (_, i) => ({
    seq: { context: Array.from({ length: r.int(9) }, () => r.int(V)), seed: String(BigInt(r.int(2 ** 31)) * 4294967296n + BigInt(i)) },
    sampling: settings[i % settings.length],
  }));
  // Alone: one call at a time (each run has one real row).
  const alone: GeneratedSequence[] = [];
  for (const c of calls) alone.push((await engine.generate(req([c.seq], c.sampling!))).sequences[0]!);
  // One batch per sampling setting, sequences in reverse order.
  for (const [k, s] of settings.entries()) {
    const group = calls
      .map((c, i) => ({ c, i }))
      .filter(({ i }) => i % settings.length === k)
      .reverse();
    const out = await engine.generate(
      req(
        group.map(({ c }) => c.seq),
        s,
      ),
    );
    group.forEach(({ i }, j) => assertSame(out.sequences[j]!, alone[i]!, `batched call ${i}`));
  }
  // All at once, concurrently: coalesced into shared runs with mixed settings.
  const before = await engine.stats();
  const together = await Promise.all(calls.map((c) => engine.generate(req([c.seq], c.sampling!))));
  together.forEach((out, i) => assertSame(out.sequences[0]!, alone[i]!, `concurrent call ${i}`));
  const after = await engine.stats();
  const runs = after.generateBatches - before.generateBatches;
  assert.ok(runs < calls.length / 4, `concurrent calls were coalesced (${calls.length} calls in ${runs} runs)`);
});

test('Score returns exactly the log-probs Generate reported', async () => {
  const engine = await engineWithModel();
  const seqs = Array.from({ length: 6 }, (_, i) => ({ context: [i, i + 1, i + 2], seed: i }));
  const gen = await engine.generate(req(seqs, { temperature: 1, topK: 5, maxTokens: 9 }));
  const score = await engine.score({
    modelKey: 'm',
    version: 3,
    sequences: seqs.map((s, i) => ({ context: s.context, tokens: gen.sequences[i]!.tokens })),
  });
  gen.sequences.forEach((g, i) => assert.ok(sameBits(score.sequences[i]!.logprobs, g.logprobs), `sequence ${i}`));
  // One token alone scores the same as inside the batch.
  const single = await engine.score({ modelKey: 'm', version: 3, sequences: [{ context: seqs[2]!.context, tokens: gen.sequences[2]!.tokens.slice(0, 1) }] });
  assert.ok(Object.is(single.sequences[0]!.logprobs[0], gen.sequences[2]!.logprobs[0]));
});

/** Full next-token distribution after `context` (log-probs for all V ids). */
async function distribution(engine: Awaited<ReturnType<typeof engineWithModel>>, context: number[]): Promise<number[]> {
  const out = await engine.score({
    modelKey: 'm',
    version: 3,
    sequences: Array.from({ length: V }, (_, v) => ({ context, tokens: [v] })),
  });
  return out.sequences.map((s) => s.logprobs[0]!);
}

test('greedy and top_k = 1 pick the most likely token; stop tokens end the sequence', async () => {
  const engine = await engineWithModel();
  const context = [4, 7, 1];
  const greedy = (await engine.generate(req([{ context, seed: 1 }], { temperature: 0, maxTokens: 6 }))).sequences[0]!;
  const top1 = (await engine.generate(req([{ context, seed: 2 }], { temperature: 1.5, topK: 1, maxTokens: 6 }))).sequences[0]!;
  assert.deepEqual(top1.tokens, greedy.tokens);
  const ctx = [...context];
  for (const tok of greedy.tokens) {
    const lp = await distribution(engine, ctx);
    assert.equal(tok, lp.indexOf(Math.max(...lp)), 'argmax');
    ctx.push(tok);
  }
  assert.ok(
    greedy.sampleLogprobs.every((x) => x === 0),
    'greedy sample log-prob is 0',
  );
  assert.equal(greedy.stopReason, 'max_tokens');
  const stopAt = greedy.tokens[2]!;
  const stopped = (await engine.generate(req([{ context, seed: 1 }], { temperature: 0, maxTokens: 6, stopTokens: [stopAt] }))).sequences[0]!;
  const first = greedy.tokens.indexOf(stopAt);
  assert.deepEqual(stopped.tokens, greedy.tokens.slice(0, first + 1), 'ends with the stop token');
  assert.equal(stopped.stopReason, 'stop_token');
});

test('sampling frequencies follow temperature, top-k and top-p', async () => {
  const engine = await engineWithModel();
  const context = [3, 3, 9];
  const lp = await distribution(engine, context);
  const p = lp.map(Math.exp);
  const order = p.map((_, i) => i).sort((a, b) => p[b]! - p[a]! || a - b);
  const n = 3000;
  const sample = async (s: Omit<SamplingParams, 'maxTokens'>) => {
    const seqs = Array.from({ length: n }, (_, i) => ({ context, seed: 7_000_000 + i }));
    const out = await engine.generate(req(seqs, { ...s, maxTokens: 1 }));
    const counts = new Array(V).fill(0);
    for (const q of out.sequences) counts[q.tokens[0]!]++;
    return { counts, out };
  };
  const expectFreq = (counts: number[], q: number[], what: string) => {
    for (let v = 0; v < V; v++) {
      const sd = Math.sqrt(n * q[v]! * (1 - q[v]!) || 1e-12);
      assert.ok(Math.abs(counts[v]! - n * q[v]!) <= 5 * sd + 1, `${what}: token ${v} seen ${counts[v]}, expected ${(n * q[v]!).toFixed(1)}`);
    }
  };
  const normalize = (xs: number[]) => {
    const s = xs.reduce((a, b) => a + b, 0);
    return xs.map((x) => x / s);
  };

  const t1 = await sample({ temperature: 1 });
  expectFreq(t1.counts, p, 'temperature 1');
  t1.out.sequences.forEach((q) => assert.ok(Object.is(q.sampleLogprobs[0], q.logprobs[0]), 'T=1: sampled from π itself'));

  const q05 = normalize(p.map((x) => x ** 2)); // softmax(z / 0.5) ∝ p²
  expectFreq((await sample({ temperature: 0.5 })).counts, q05, 'temperature 0.5');

  const top3 = new Set(order.slice(0, 3));
  const qk = normalize(p.map((x, v) => (top3.has(v) ? x : 0)));
  const k = await sample({ temperature: 1, topK: 3 });
  expectFreq(k.counts, qk, 'top-k 3');
  k.out.sequences.forEach((q) => assert.ok(Math.abs(q.sampleLogprobs[0]! - Math.log(qk[q.tokens[0]!]!)) < 1e-4, 'top-k sample log-prob'));

  // top-p 0.6: the smallest prefix of the sorted distribution whose mass reaches 0.6.
  const kept = new Set<number>();
  let mass = 0;
  for (const v of order) {
    if (mass >= 0.6) break;
    kept.add(v);
    mass += p[v]!;
  }
  assert.ok(kept.size >= 2 && kept.size < V, `top-p keeps ${kept.size} tokens (a meaningful case)`);
  expectFreq((await sample({ temperature: 1, topP: 0.6 })).counts, normalize(p.map((x, v) => (kept.has(v) ? x : 0))), 'top-p 0.6');
});

test('a Generate cancelled before its batch runs is dropped; the others in the batch complete', async () => {
  const engine = await engineWithModel({ batchWindowMs: 20 });
  let fire = () => {};
  const cancel = { onCancel: (f: () => void) => (fire = f) };
  const before = await engine.stats();
  const doomed = engine.generate(req([{ context: [1], seed: 1 }], { maxTokens: 4 }), cancel);
  const kept = engine.generate(req([{ context: [2], seed: 2 }], { maxTokens: 4 }));
  fire();
  await assert.rejects(doomed, /cancelled by the caller/);
  assert.equal((await kept).sequences[0]!.tokens.length, 4);
  const after = await engine.stats();
  assert.equal(after.generateBatches - before.generateBatches, 1);
  assert.equal(after.tokensGenerated - before.tokensGenerated, 4, 'only the live caller was generated');
});
