/**
 * Abort in the built-in engine (protocol v2): a Generate still waiting for the device
 * comes back at once with every sequence ABORTED and no tokens, leaves the batcher's
 * group and the queue depth, and later calls (also with the same request id) run as
 * if nothing happened; a call Abort does not name is untouched.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { generateOne } from '../../../activities/training/pool';
import { cpuEngine } from './helpers';

const spec = { family: 'tiny-lm', vocabSize: 8, contextWindow: 4, embedDim: 8, hiddenDim: 16 };
const request = (requestId: string | undefined, seed: number) => ({
  modelKey: 'm',
  version: 0,
  ...(requestId ? { requestId } : {}),
  sequences: [0, 1, 2].map((i) => ({ context: [1, 2], seed: seed + i })),
  sampling: { temperature: 1, maxTokens: 5 },
});

test('Abort answers a queued Generate at once with ABORTED sequences and takes it off the queue', async () => {
  // a long batch window: the calls wait in their group until aborted
  const engine = cpuEngine({ batchWindowMs: 60_000 });
  await engine.initModel({ modelKey: 'm', spec, seed: 3 });
  const named = engine.generate(request('r1', 10));
  const other = engine.generate(request('r2', 20));
  assert.equal(engine.health().queueDepth, 2);

  assert.deepEqual(engine.abort({ modelKey: 'm', requestIds: ['r1', 'unknown'] }), { abortedRequests: 1 });
  const res = await named;
  assert.equal(res.sequences.length, 3);
  for (const s of res.sequences) assert.deepEqual(s, { tokens: [], logprobs: [], sampleLogprobs: [], stopReason: 'aborted', version: 0 });
  assert.equal(engine.health().queueDepth, 1, 'the aborted call left the queue; r2 still waits');
  assert.deepEqual(engine.abort({ modelKey: 'm', requestIds: ['r1'] }), { abortedRequests: 0 }, 'nothing left to abort under r1');
  assert.deepEqual(engine.abort({ modelKey: 'other-model' }), { abortedRequests: 0 }, 'another model: r2 untouched');

  // abort everything of the model: r2 too
  assert.deepEqual(engine.abort({ modelKey: 'm' }), { abortedRequests: 1 });
  assert.ok((await other).sequences.every((s) => s.stopReason === 'aborted'));
  assert.equal(engine.health().queueDepth, 0);
});

test('after an Abort the same request runs normally and gives what it gives without one', async () => {
  const engine = cpuEngine({ batchWindowMs: 1 });
  await engine.initModel({ modelKey: 'm', spec, seed: 3 });
  const before = await engine.generate(request('x', 30));
  // aborting nothing in flight changes nothing
  assert.deepEqual(engine.abort({}), { abortedRequests: 0 });
  const after = await engine.generate(request('x', 30));
  assert.deepEqual(after, before);
  assert.ok(after.sequences.every((s) => s.stopReason !== 'aborted' && s.tokens.length > 0 && s.version === 0));
});

test('a pool turn whose generation was aborted fails retryably (it is not a sample)', async () => {
  const engine = cpuEngine({ batchWindowMs: 60_000 });
  await engine.initModel({ modelKey: 'run/m', spec, seed: 3 });
  const turn = generateOne({ generate: (req) => engine.generate({ ...req, requestId: 'turn' }) }, 'run', {
    model: 'm',
    version: 0,
    context: [1],
    seed: 1,
    maxTokens: 3,
    stopTokens: [],
    sampling: { temperature: 1, topK: 0, topP: 0 },
  } as unknown as Parameters<typeof generateOne>[2]);
  await new Promise((r) => setImmediate(r));
  assert.equal(engine.abort({ requestIds: ['turn'] }).abortedRequests, 1);
  await assert.rejects(turn, (e: { type?: string; nonRetryable?: boolean }) => e.type === 'GenerateAborted' && e.nonRetryable === false);
});
