/**
 * Generate under load over gRPC: 64 concurrent callers (mixed sampling
 * settings, lengths and contexts) each receive exactly — bit for bit — what
 * they get when calling alone, while the engine coalesces them into shared runs.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';
import type { GeneratedSequence, GenerateRequest, SamplingParams } from '../../../engines/protocol/types';

let engine: SpawnedEngine;
let client: EngineClient;

before(async () => {
  engine = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  client = await EngineClient.connect(engine.listening.address);
});

after(async () => {
  client?.close();
  engine?.child.kill('SIGTERM');
});

function same(a: GeneratedSequence, b: GeneratedSequence): boolean {
  return (
    a.stopReason === b.stopReason &&
    a.tokens.length === b.tokens.length &&
    a.tokens.every((t, i) => t === b.tokens[i]) &&
    a.logprobs.every((x, i) => Object.is(x, b.logprobs[i])) &&
    a.sampleLogprobs.every((x, i) => Object.is(x, b.sampleLogprobs[i]))
  );
}

test('64 concurrent callers each get exactly what they get alone', async () => {
  const V = 32;
  await client.initModel({ modelKey: 'load', spec: { vocabSize: V, layers: 2 }, seed: 2026 });
  // Make the policy peaked enough that tiny numeric differences would show.
  const base = await client.exportVersion({ modelKey: 'load', version: 0 });
  const theta = new Float32Array(base.weights.buffer.slice(base.weights.byteOffset, base.weights.byteOffset + base.weights.byteLength));
  for (let i = 0; i < theta.length; i++) theta[i]! *= 5;
  await client.loadVersion({ modelKey: 'load', version: 1, spec: base.info.spec, weights: new Uint8Array(theta.buffer) });

  const samplings: SamplingParams[] = [
    { temperature: 1, maxTokens: 16 },
    { temperature: 0.8, topK: 5, maxTokens: 12, stopTokens: [0, 1] },
    { temperature: 1.2, topP: 0.9, maxTokens: 20 },
    { temperature: 0, maxTokens: 8 },
    { temperature: 1, topK: 10, topP: 0.7, maxTokens: 24, stopTokens: [31] },
  ];
  const calls: GenerateRequest[] = Array.from({ length: 64 }, (_, i) => ({
    modelKey: 'load',
    version: 1,
    sequences: [{ context: Array.from({ length: i % 11 }, (_, j) => (i * 7 + j * 3) % V), seed: `${9_000_000_000_000 + i * 7919}` }],
    sampling: samplings[i % samplings.length],
  }));

  const alone: GeneratedSequence[] = [];
  for (const c of calls) alone.push((await client.generate(c)).sequences[0]!);

  // Server-side batching: 64 separate RPCs (client coalescing off).
  const plain = await EngineClient.connect(engine.listening.address, { coalesce: false });
  try {
    const before = await client.stats();
    for (let round = 0; round < 2; round++) {
      const together = await Promise.all(calls.map((c) => plain.generate(c)));
      together.forEach((r, i) => assert.ok(same(r.sequences[0]!, alone[i]!), `caller ${i} (round ${round}) differs from its solo result`));
    }
    const after = await client.stats();
    const runs = after.generateBatches - before.generateBatches;
    console.log(`server-side batching: 128 concurrent RPCs ran as ${runs} fused runs`);
    assert.ok(runs <= 32, `128 concurrent calls were coalesced into ${runs} runs`);
    assert.ok(after.meanRequestsPerBatch > 1);
  } finally {
    plain.close();
  }

  // Client-side coalescing (the default): one merged RPC per event-loop turn, same results.
  const before = await client.stats();
  const merged = await Promise.all(calls.map((c) => client.generate(c)));
  merged.forEach((r, i) => assert.ok(same(r.sequences[0]!, alone[i]!), `caller ${i} (client-coalesced) differs from its solo result`));
  const after = await client.stats();
  assert.equal(after.generateBatches - before.generateBatches, 1, '64 callers in one turn: one RPC, one fused run');
  assert.ok(alone.some((s) => s.stopReason === 'stop_token') && alone.some((s) => s.stopReason === 'max_tokens'));

  // One malformed caller in a merged batch fails alone, with its own field path.
  const mixed = await Promise.allSettled([
    client.generate(calls[0]!),
    client.generate({ ...calls[1]!, sequences: [{ context: [V + 3], seed: 1 }] }),
    client.generate(calls[2]!),
  ]);
  assert.equal(mixed[0].status, 'fulfilled');
  assert.equal(mixed[2].status, 'fulfilled');
  assert.ok(mixed[1].status === 'rejected' && /sequences\[0\]\.context\[0\]: token id 35/.test(String(mixed[1].reason)));
  assert.ok(same((mixed[0] as PromiseFulfilledResult<{ sequences: GeneratedSequence[] }>).value.sequences[0]!, alone[0]!));

  // A multi-sequence request splits into the same per-sequence results too.
  const multi = await client.generate({ ...calls[0]!, sequences: calls.filter((_, i) => i % 5 === 0).map((c) => c.sequences[0]!) });
  multi.sequences.forEach((s, j) => assert.ok(same(s, alone[j * 5]!), `sequence ${j} of a batched request`));
});
