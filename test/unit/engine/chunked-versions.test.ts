// LoadVersionChunks / ExportVersionChunks: a version larger than one chunk goes
// through a real gRPC server and client in chunks and arrives bit-identical.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EngineClient, InvalidRequestError } from '../../../engines/protocol/client';
import { startEngineServer, type RunningServer } from '../../../engines/onnx/server';
import { CHUNK_BYTES } from '../../../engines/protocol/proto';
import { byteChunks, joinChunks } from '../../../engines/protocol/wire';
import { cpuEngine } from './helpers';

test('byteChunks splits weights then optimizer state at the chunk size; joinChunks undoes it', () => {
  const w = Uint8Array.from([1, 2, 3, 4, 5]);
  const o = Uint8Array.from([6, 7]);
  const chunks = byteChunks(w, o, 2);
  assert.deepEqual(
    chunks.map((c) => [Array.from(c.weights), Array.from(c.optimizerState)]),
    [
      [[1, 2], []],
      [[3, 4], []],
      [[5], []],
      [[], [6, 7]],
    ],
  );
  assert.deepEqual(joinChunks(chunks), { weights: w, optimizerState: o });
  // Nothing to send is still one message (it carries the header).
  assert.equal(byteChunks(new Uint8Array(0), new Uint8Array(0)).length, 1);
});

// ~1.06M float32 parameters: weights just over one chunk, optimizer state two more.
const SPEC = { vocabSize: 16, contextWindow: 8, embedDim: 64, hiddenDim: 2048 };
let server: RunningServer;
let client: EngineClient;
const engine = cpuEngine();
before(async () => {
  server = await startEngineServer(engine, '127.0.0.1', 0);
  client = await EngineClient.connect(server.address);
});
after(async () => {
  client?.close();
  await server?.shutdown();
});

test('a version above one chunk exports and loads in chunks, bit-identical', async () => {
  await client.initModel({ modelKey: 'big', spec: SPEC, seed: 7 });
  const direct = await engine.exportVersion({ modelKey: 'big', version: 0 });
  assert.ok(direct.weights.length > CHUNK_BYTES, `weights ${direct.weights.length} bytes > one chunk`);
  const streamed = await client.exportVersion({ modelKey: 'big', version: 0 });
  assert.deepEqual(streamed.info, direct.info);
  assert.deepEqual(streamed.weights, direct.weights);
  assert.deepEqual(streamed.optimizerState, direct.optimizerState);

  const info = await client.loadVersion({
    modelKey: 'copy',
    version: 3,
    spec: SPEC,
    weights: streamed.weights,
    optimizerState: streamed.optimizerState,
    weightsSha256: direct.info.weightsSha256,
  });
  assert.equal(info.weightsSha256, direct.info.weightsSha256);
  assert.equal(info.optimizerSha256, direct.info.optimizerSha256);
  // Errors of the streamed form are the unary form's.
  await assert.rejects(
    client.loadVersion({ modelKey: 'copy', version: 4, spec: SPEC, weights: streamed.weights, weightsSha256: '0'.repeat(64) }),
    (e: Error) => e instanceof InvalidRequestError && /weights_sha256: the weights bytes hash to/.test(e.message),
  );
  await assert.rejects(client.exportVersion({ modelKey: 'big', version: 9 }), /VERSION_NOT_LOADED|not loaded|version 9/);
});
