/**
 * The engine as a process over gRPC: startup line, --help, clean startup
 * errors (port taken, cuda unavailable), auto fallback reported in Stats, and
 * bad requests mapped to gRPC codes + typed client errors while the engine keeps
 * serving with its versions unchanged.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as net from 'node:net';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import {
  EngineClient,
  InvalidRequestError,
  ModelNotLoadedError,
  StaleBaseError,
  VersionConflictError,
  VersionNotLoadedError,
  isNotLoaded,
} from '../../../engines/protocol/client';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { ENGINE_MAIN, BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';

const run = promisify(execFile);
const engineCmd = (args: string[]) => run(process.execPath, ['--import', 'tsx', ENGINE_MAIN, ...args], { timeout: 60_000 });

let engine: SpawnedEngine;
let client: EngineClient;

before(async () => {
  engine = await spawnEngine(['--device', 'auto', '--port', '0'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  client = await EngineClient.connect(engine.listening.address);
});

after(async () => {
  client?.close();
  engine?.child.kill('SIGTERM');
});

test('prints one listening line; auto falls back to cpu and says why (stdout, Health, Stats)', async () => {
  const l = engine.listening;
  assert.equal(l.event, 'listening');
  assert.ok(l.port > 0);
  assert.equal(l.device, 'cpu');
  assert.equal(l.fell_back, true, 'no CUDA libraries here');
  assert.match(l.fallback_reason, /CUDA/);
  const health = await client.health();
  assert.equal(health.status, 'SERVING');
  assert.equal(health.requestedDevice, 'auto');
  const stats = await client.stats();
  assert.equal(stats.device, 'cpu');
  assert.equal(stats.fellBack, true);
  assert.match(stats.fallbackReason, /libonnxruntime_providers|CUDA/);
  assert.equal(stats.intraOpThreads, 1);
});

test('--help, a taken port and an unusable cuda device give one clear line and exit 1', async () => {
  const help = await engineCmd(['--help']);
  assert.match(help.stdout, /--device D .*cpu \| cuda \| cuda:N \| auto/);
  assert.match(help.stdout, /--port N/);

  const blocker = net.createServer();
  await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
  const port = (blocker.address() as net.AddressInfo).port;
  try {
    await assert.rejects(engineCmd(['--device', 'cpu', '--port', String(port)]), (e: { code: number; stderr: string; stdout: string }) => {
      assert.equal(e.code, 1);
      assert.equal(e.stderr.trim(), `engine: port ${port} on 127.0.0.1 is already in use`);
      assert.equal(e.stdout, '');
      return true;
    });
  } finally {
    blocker.close();
  }

  await assert.rejects(engineCmd(['--device', 'cuda:0', '--port', '0']), (e: { code: number; stderr: string }) => {
    assert.equal(e.code, 1);
    // onnxruntime's own loader error, not a silent CPU fallback.
    assert.match(e.stderr, /engine: --device cuda:0: CUDA EP unavailable: .*Failed to load/);
    assert.match(e.stderr, /libonnxruntime_providers_shared\.so/);
    return true;
  });

  await assert.rejects(engineCmd(['--device', 'cpu', '--trainer-thread', 'yes']), (e: { code: number; stderr: string }) => {
    assert.equal(e.code, 1);
    assert.match(e.stderr, /--trainer-thread must be auto, on or off, got "yes"/);
    return true;
  });

  await assert.rejects(engineCmd(['--device', 'tpu']), (e: { code: number; stderr: string }) => {
    assert.equal(e.code, 1);
    assert.match(e.stderr, /invalid device "tpu"/);
    return true;
  });
});

test('an engine over its --rss-limit-bytes exits at once with one memory-exceeded line, before it takes the host', async () => {
  // 64 MiB: below what a started engine holds, so the watchdog fires as it starts.
  await assert.rejects(engineCmd(['--device', 'cpu', '--port', '0', '--rss-limit-bytes', String(64 * 2 ** 20)]), (e: { signal: string; stderr: string }) => {
    assert.equal(e.signal, 'SIGKILL', e.stderr);
    const line = JSON.parse(e.stderr.split('\n').find((l) => l.includes('"event":"memory-exceeded"')) ?? 'null') as { limitBytes: number; message: string };
    assert.equal(line.limitBytes, 64 * 2 ** 20);
    assert.match(
      line.message,
      /^engine: resident memory \d+ MiB is over the limit of 64 MiB; .*--rss-limit-bytes \/ TROUPE_ENGINE_RSS_LIMIT_BYTES raises the limit\)$/,
    );
    return true;
  });
  await assert.rejects(engineCmd(['--rss-limit-bytes', 'lots']), (e: { code: number; stderr: string }) => {
    assert.equal(e.code, 1);
    assert.match(e.stderr, /--rss-limit-bytes must be an integer >= 1, got "lots"/);
    return true;
  });
});

test('bad requests map to gRPC codes and typed errors; the engine keeps serving, versions unchanged', async () => {
  const spec = { vocabSize: 8, contextWindow: 4, embedDim: 4, hiddenDim: 16 };
  const v0 = await client.initModel({ modelKey: 'g', spec, seed: 5 });
  const gen = { modelKey: 'g', version: 0, sequences: [{ context: [1], seed: 1 }], sampling: { maxTokens: 2 } };
  const sample = { context: [1], tokens: [2, 3], lossMask: [1, 1], advantages: [1, -1], oldLogprobs: [-2, -2], lossWeights: [0.5, 0.5] };
  const expectErr = async (p: Promise<unknown>, cls: abstract new (...args: never[]) => Error, code: grpc.status, message: RegExp) => {
    await assert.rejects(p, (e: Error & { code: number; reason: string }) => {
      assert.ok(e instanceof cls, `${e.name}: ${e.message}`);
      assert.equal(e.code, code, e.message);
      assert.match(e.message, message);
      return true;
    });
  };
  await expectErr(client.generate({ ...gen, modelKey: 'nope' }), ModelNotLoadedError, grpc.status.NOT_FOUND, /model "nope" is not loaded/);
  await expectErr(client.generate({ ...gen, version: 3 }), VersionNotLoadedError, grpc.status.NOT_FOUND, /version 3 is not loaded/);
  await expectErr(
    client.generate({ ...gen, sequences: [{ context: [9], seed: 1 }] }),
    InvalidRequestError,
    grpc.status.INVALID_ARGUMENT,
    /token id 9 is outside the vocabulary \[0, 7\]/,
  );
  await expectErr(client.generate({ ...gen, sequences: [] }), InvalidRequestError, grpc.status.INVALID_ARGUMENT, /empty batch/);
  await expectErr(client.generate({ ...gen, sampling: { maxTokens: 0 } }), InvalidRequestError, grpc.status.INVALID_ARGUMENT, /max_tokens/);
  await expectErr(
    client.update({ modelKey: 'g', baseVersion: 0, requestId: 'x', samples: [{ ...sample, advantages: [NaN, 1] }] }),
    InvalidRequestError,
    grpc.status.INVALID_ARGUMENT,
    /samples\[0\]\.advantages\[0\]: must be finite, got NaN/,
  );
  await expectErr(
    client.update({ modelKey: 'g', baseVersion: 0, requestId: 'x', samples: [{ ...sample, lossWeights: [0.5] }] }),
    InvalidRequestError,
    grpc.status.INVALID_ARGUMENT,
    /loss_weights: has 1 entries, expected 2/,
  );
  await expectErr(client.initModel({ modelKey: 'g', spec, seed: 6 }), VersionConflictError, grpc.status.FAILED_PRECONDITION, /immutable/);
  const err = await client.score({ modelKey: 'g', version: 7, sequences: [{ context: [], tokens: [1] }] }).catch((e) => e);
  assert.ok(isNotLoaded(err), 'callers branch on isNotLoaded to refill from the store');

  // Still serving, nothing changed; then a real update and a stale one.
  const stats = await client.stats();
  assert.deepEqual(stats.models.find((m) => m.modelKey === 'g')?.versions, [0]);
  const ok = await client.generate(gen);
  assert.equal(ok.sequences[0]!.tokens.length, 2);
  const u = await client.update({ modelKey: 'g', baseVersion: 0, requestId: 'u1', samples: [sample] });
  assert.equal(u.info.version, 1);
  assert.equal(u.baseVersion, 0);
  assert.ok(u.metrics.gradNorm > 0);
  await expectErr(
    client.update({ modelKey: 'g', baseVersion: 0, requestId: 'u2', samples: [sample] }),
    StaleBaseError,
    grpc.status.FAILED_PRECONDITION,
    /not the latest version \(1\)/,
  );
  const again = await client.update({ modelKey: 'g', baseVersion: 0, requestId: 'u1', samples: [sample] });
  assert.equal(again.replayed, true);
  assert.equal(again.info.weightsSha256, u.info.weightsSha256);
  const exported = await client.exportVersion({ modelKey: 'g', version: 1 });
  assert.equal(exported.info.weightsSha256, u.info.weightsSha256);
  assert.equal(exported.weights.length, 4 * v0.paramCount);
});
