/**
 * The model-family seam: specs dispatch to their family by name (errors by
 * field path), the engine serves a transformer next to tiny-lm through the
 * same gRPC wire, and a family's sequence rule refuses one bad caller alone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EngineClient, InvalidRequestError } from '../../../engines/protocol/client';
import { startEngineServer } from '../../../engines/onnx/server';
import { EngineFault } from '../../../engines/protocol/errors';
import { FAMILY_NAMES, normalizeModelSpec, paramCount } from '../../../engines/families';
import { ModelSpecError } from '../../../engines/families/model-family';
import { ModelSpec } from '../../../engines/protocol/proto';
import { specFromWire, specToWire } from '../../../engines/protocol/wire';
import { cpuEngine } from './helpers';

const TF = { family: 'transformer', vocabSize: 12, width: 16, layers: 1, heads: 2, maxSeq: 24 };

function issues(input: unknown): string[] {
  try {
    normalizeModelSpec(input, 'models.policy');
  } catch (e) {
    assert.ok(e instanceof ModelSpecError, String(e));
    return e.issues.map((i) => `${i.path}: ${i.message}`);
  }
  assert.fail(`accepted ${JSON.stringify(input)}`);
}

test('specs dispatch to their family by name; errors name the field under the prefix', () => {
  assert.deepEqual(FAMILY_NAMES, ['tiny-lm', 'transformer']);
  assert.equal(normalizeModelSpec({ vocabSize: 8 }).family, 'tiny-lm', 'no family = tiny-lm (protocol v1)');
  const tf = normalizeModelSpec(TF);
  assert.equal(tf.family, 'transformer');
  // hand count: tok_emb 12·16 + pos_emb 24·16 + ln1 32 + q,k,v,o 4·(256+16) + ln2 32 + w1 16·64+64 + w2 64·16+16 + lnf 32
  assert.equal(paramCount(tf), 192 + 384 + 32 + 1088 + 32 + 1088 + 1040 + 32);
  assert.match(issues({ family: 'gpt', vocabSize: 8 }).join(), /^models\.policy\.family: unknown model family "gpt" \(known: tiny-lm, transformer\)/);
  assert.ok(issues({ ...TF, heads: 3 }).includes('models.policy.heads: must divide width (16 is not a multiple of 3), or set headDim'));
  assert.ok(issues({ ...TF, layers: 0 }).some((i) => i.startsWith('models.policy.layers:')));
  assert.ok(issues({ ...TF, dropout: 0.1 }).some((i) => i.startsWith('models.policy.dropout: unknown option')));
  assert.ok(
    issues({ vocabSize: 8, heads: 2 }).some((i) => i.startsWith('models.policy.heads: unknown option')),
    'tiny-lm refuses options it does not have',
  );
  assert.deepEqual(issues({ vocabSize: 8, hiddenDim: 1e9 }), ['models.policy.hiddenDim: must be an integer in [1, 4096], got 1000000000']);
});

test("wire (v2): every family travels as config_json; tiny-lm's v1 fields 3-7 are still read", () => {
  const tiny = specToWire({ vocabSize: 8, contextWindow: 4 });
  assert.equal(tiny.family, 'tiny-lm');
  assert.equal(tiny.contextWindow, 0); // proto3 default: not on the wire
  assert.deepEqual(JSON.parse(tiny.configJson!), { contextWindow: 4 });
  assert.deepEqual(specFromWire(tiny), { family: 'tiny-lm', vocabSize: 8, contextWindow: 4 });
  // a v1 client's tiny-lm spec
  assert.deepEqual(specFromWire(ModelSpec.fromPartial({ family: '', vocabSize: 8, contextWindow: 4 })), { family: undefined, vocabSize: 8, contextWindow: 4 });
  const tf = specToWire(TF);
  assert.equal(tf.family, 'transformer');
  assert.equal(tf.contextWindow, 0);
  assert.deepEqual(JSON.parse(tf.configJson!), { width: 16, layers: 1, heads: 2, maxSeq: 24 });
  assert.deepEqual(specFromWire(tf), TF);
  assert.throws(
    () => specFromWire(ModelSpec.fromPartial({ family: 'transformer', vocabSize: 12, configJson: '[1]' })),
    /spec\.config_json: must be a JSON object/,
  );
});

test('the engine serves a transformer and tiny-lm side by side over gRPC', async () => {
  const engine = cpuEngine({ batchWindowMs: 5 });
  const server = await startEngineServer(engine, '127.0.0.1', 0);
  const client = new EngineClient(server.address);
  try {
    const info = await client.initModel({ modelKey: 't', spec: TF, seed: 3 });
    assert.equal(info.spec.family, 'transformer');
    assert.equal((info.spec as Record<string, unknown>).mlpWidth, 64, 'the normalized spec comes back with defaults filled');
    assert.equal(info.paramCount, paramCount(normalizeModelSpec(TF)));
    const tiny = await client.initModel({ modelKey: 'm', spec: { vocabSize: 12, contextWindow: 4 }, seed: 3 });
    assert.equal(tiny.spec.family, 'tiny-lm');

    const g = await client.generate({ modelKey: 't', version: 0, sequences: [{ context: [1, 2, 3], seed: 7 }], sampling: { maxTokens: 5 } });
    const seq = g.sequences[0]!;
    assert.equal(seq.tokens.length, 5);
    const s = await client.score({ modelKey: 't', version: 0, sequences: [{ context: [1, 2, 3], tokens: seq.tokens }] });
    s.sequences[0]!.logprobs.forEach((lp, i) => assert.ok(Math.abs(lp - seq.logprobs[i]!) < 1e-5, `Score vs Generate at ${i}: ${lp} vs ${seq.logprobs[i]}`));

    const u = await client.update({
      modelKey: 't',
      baseVersion: 0,
      requestId: 'u1',
      samples: [
        {
          context: [1, 2, 3],
          tokens: seq.tokens,
          lossMask: seq.tokens.map(() => 1),
          advantages: seq.tokens.map(() => 1),
          oldLogprobs: seq.logprobs,
          lossWeights: seq.tokens.map(() => 0.2),
        },
      ],
      settings: { lr: 0.01 },
    });
    assert.equal(u.info.version, 1);
    assert.ok(u.metrics.gradNorm > 0);
    // rollout–training mismatch: KV-cache decode vs full-sequence Score, float32 rounding only
    assert.ok(u.logprobGap.max < 1e-5 && u.logprobGap.mean <= u.logprobGap.max, JSON.stringify(u.logprobGap));

    // tiny-lm: Generate = Score bit for bit, so the gap is exactly 0; a shifted old log-prob shows up as itself
    const tg = await client.generate({ modelKey: 'm', version: 0, sequences: [{ context: [1, 2], seed: 5 }], sampling: { maxTokens: 4 } });
    const ts = tg.sequences[0]!;
    const tinySample = (old: number[]) => ({
      context: [1, 2],
      tokens: ts.tokens,
      lossMask: [1, 1, 1, 0],
      advantages: [1, 1, 1, 1],
      oldLogprobs: old,
      lossWeights: [0.25, 0.25, 0.25, 0.25],
    });
    const exact = await client.update({ modelKey: 'm', baseVersion: 0, requestId: 't1', samples: [tinySample(ts.logprobs)] });
    assert.deepEqual(exact.logprobGap, { mean: 0, max: 0 });
    const shifted = ts.logprobs.map((x, i) => (i === 1 ? x - 0.5 : i === 3 ? x + 9 : x)); // token 3 is not trained: ignored
    const off = await client.update({ modelKey: 'm', baseVersion: 0, requestId: 't2', allowStaleBase: true, samples: [tinySample(shifted)] });
    assert.ok(Math.abs(off.logprobGap.max - 0.5) < 1e-6 && Math.abs(off.logprobGap.mean - 0.5 / 3) < 1e-6, JSON.stringify(off.logprobGap));
    const exported = await client.exportVersion({ modelKey: 't', version: 1 });
    assert.equal(exported.weights.length, 4 * info.paramCount);

    // a fresh engine refilled from the bytes holds the same version
    const other = cpuEngine();
    const loaded = await other.loadVersion({ modelKey: 't', version: 1, spec: TF, weights: exported.weights, optimizerState: exported.optimizerState });
    assert.equal(loaded.weightsSha256, exported.info.weightsSha256);

    // the family's sequence rule, checked before batching: only the bad caller fails
    const ok = client.generate({ modelKey: 't', version: 0, sequences: [{ context: [4], seed: 1 }], sampling: { maxTokens: 2 } });
    const empty = client.generate({ modelKey: 't', version: 0, sequences: [{ context: [], seed: 1 }], sampling: { maxTokens: 2 } });
    const long = client.generate({ modelKey: 't', version: 0, sequences: [{ context: [1, 2], seed: 1 }], sampling: { maxTokens: 23 } });
    const [okR, emptyR, longR] = await Promise.allSettled([ok, empty, long]);
    assert.equal(okR.status === 'fulfilled' && okR.value.sequences[0]!.tokens.length, 2);
    assert.ok(emptyR.status === 'rejected' && emptyR.reason instanceof InvalidRequestError, String(emptyR));
    assert.match((emptyR as PromiseRejectedResult).reason.message, /sequences\[0\]\.context: needs at least one token/);
    assert.ok(longR.status === 'rejected' && longR.reason instanceof InvalidRequestError, String(longR));
    assert.match((longR as PromiseRejectedResult).reason.message, /sequences\[0\]: context \+ tokens = 25 exceeds the model's maxSeq 24/);
    await assert.rejects(
      engine.score({ modelKey: 't', version: 0, sequences: [{ context: [], tokens: [1] }] }),
      (e) => e instanceof EngineFault && e.reason === 'INVALID_REQUEST' && /sequences\[0\]\.context/.test(e.message),
    );
    await assert.rejects(
      client.initModel({ modelKey: 'x', spec: { ...TF, heads: 3 }, seed: 1 }),
      (e) => e instanceof InvalidRequestError && /spec\.heads: must divide width/.test(e.message),
    );
    const stats = await client.stats();
    assert.match(stats.batchInvariance, /transformer D16 L1 H2 .* V12: free/);
    assert.match(stats.batchInvariance, /tiny-lm W4 E16 H64 L1 tanh V12: free/);
  } finally {
    client.close();
    await server.shutdown();
  }
});
