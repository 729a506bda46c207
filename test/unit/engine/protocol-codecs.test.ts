/**
 * The generated codecs (engines/protocol/gen, ts-proto) put the same bytes on the wire
 * as an independent encoder of engine.proto (protobufjs, parsing the .proto itself),
 * and read them back unchanged: uint64 at its maximum, enums, proto3 optional fields
 * set to 0, oneofs, bytes, packed repeated fields.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { test } from 'node:test';
import * as protobuf from 'protobufjs';
import * as P from '../../../engines/protocol/proto';
import * as wire from '../../../engines/protocol/wire';

const root = protobuf.loadSync(path.join(__dirname, '../../../engines/protocol/engine.proto'));
const MAX_U64 = '18446744073709551615';

/** Encodes with the service definition (as client and server do) and with protobufjs; both must agree. */
function roundTrip(rpc: P.RpcName, side: 'request' | 'response', msg: object): unknown {
  const def = P.engineServiceDefinition()[rpc]!;
  const ours = side === 'request' ? def.requestSerialize(msg) : def.responseSerialize(msg);
  const typeName =
    side === 'request'
      ? root.lookupService('troupe.engine.v2.Engine').methods[rpc]!.requestType
      : root.lookupService('troupe.engine.v2.Engine').methods[rpc]!.responseType;
  const type = root.lookupType(`troupe.engine.v2.${typeName}`);
  const theirs = type.encode(type.fromObject(msg)).finish();
  assert.deepEqual([...ours], [...theirs], `${rpc} ${side}: bytes differ from protobufjs's`);
  return side === 'request' ? def.requestDeserialize(ours) : def.responseDeserialize(ours);
}

/** float fields are float32 on the wire: compare what float32 keeps (double fields here are exact in float32). */
const asFloat32 = (m: unknown): unknown =>
  JSON.parse(JSON.stringify(m, (_k, v: unknown) => (typeof v === 'number' ? Math.fround(v) : v instanceof Uint8Array ? [...v] : v)));

test('generated codecs: the same bytes as protobufjs for every kind of field, read back unchanged', () => {
  const spec = wire.specToWire({ family: 'transformer', vocabSize: 16, width: 8 } as never);
  const requests: [P.RpcName, object][] = [
    ['InitModel', P.InitModelRequest.fromPartial({ modelKey: 'm', spec, seed: MAX_U64 })],
    [
      'Generate',
      P.GenerateRequest.fromPartial({
        modelKey: 'm',
        version: MAX_U64,
        requestId: 'r',
        sampling: { temperature: 0.5, topK: 3, topP: 0.9, maxTokens: 4, stopTokens: [1, 2] },
        sequences: [
          { context: [1, 300000], seed: MAX_U64, sampling: { maxTokens: 1 } },
          { context: [], seed: '0' },
        ],
      }),
    ],
    [
      'Update',
      P.UpdateRequest.fromPartial({
        modelKey: 'm',
        baseVersion: '7',
        requestId: 'u',
        allowStaleBase: true,
        samples: [
          { context: [1], tokens: [2, 3], lossMask: [1, 0], advantages: [-1.5, 0.25], oldLogprobs: [-0.5, -2], lossWeights: [0.5, 0.5], refLogprobs: [] },
        ],
        settings: { lr: 0, dualClip: 0, innerSteps: 2, klType: P.KlType.K1 },
      }),
    ],
    [
      'LoadVersionChunks',
      P.LoadVersionChunk.fromPartial({
        header: { modelKey: 'm', version: '1', spec, weightsRef: { uri: 'file:///w', size: MAX_U64, sha256: 'ab' } },
        weights: new Uint8Array([1, 2, 3]),
      }),
    ],
    ['Abort', P.AbortRequest.fromPartial({ modelKey: 'm', requestIds: ['a', 'b'] })],
  ];
  for (const [rpc, msg] of requests) assert.deepEqual(asFloat32(roundTrip(rpc, 'request', msg)), asFloat32(msg), `${rpc} request`);
  const responses: [P.RpcName, object][] = [
    [
      'Generate',
      P.GenerateResponse.fromPartial({
        version: '3',
        sequences: [
          { tokens: [1, 2], logprobs: [-1, -0.5], sampleLogprobs: [0, 0], stopReason: P.StopReason.ABORTED, version: MAX_U64 },
          { stopReason: P.StopReason.STOP_TOKEN },
        ],
      }),
    ],
    ['UpdateStream', P.UpdateEvent.fromPartial({ progress: { phase: 'queued', queuePosition: 2, elapsedMs: 1.5 } })],
    [
      'UpdateStream',
      P.UpdateEvent.fromPartial({
        result: {
          info: { modelKey: 'm', version: '8', spec },
          baseVersion: '7',
          metrics: { loss: 1, gradNorm: 2 },
          stepMetrics: [{ loss: 1 }],
          replayed: true,
          durationMs: 12.25,
          logprobGapMax: 1e-6,
        },
      }),
    ],
    [
      'Health',
      P.HealthResponse.fromPartial({ status: 'SERVING', deviceRuns: MAX_U64, capabilities: { protocolVersion: 2, rpcs: ['Generate'], scoreTolerance: 0.001 } }),
    ],
    [
      'Stats',
      P.StatsResponse.fromPartial({ models: [{ modelKey: 'm', spec, versions: ['0', MAX_U64], latestVersion: MAX_U64 }], tokensGenerated: '5', uptimeS: 3.5 }),
    ],
  ];
  for (const [rpc, msg] of responses) assert.deepEqual(asFloat32(roundTrip(rpc, 'response', msg)), asFloat32(msg), `${rpc} response`);
});

test('wire conversions: versions past 2^53 read as NaN (never a wrong version); seeds keep all 64 bits', () => {
  assert.equal(wire.u64ToNumber('9007199254740991'), Number.MAX_SAFE_INTEGER);
  assert.ok(Number.isNaN(wire.u64ToNumber('9007199254740993')));
  const req = wire.generateFromWire(P.GenerateRequest.fromPartial({ modelKey: 'm', version: '2', sequences: [{ context: [1], seed: MAX_U64 }] }));
  assert.equal(req.sequences[0]!.seed, MAX_U64);
  assert.equal(wire.generateToWire(req).sequences[0]!.seed, MAX_U64);
  assert.equal(wire.initModelToWire({ modelKey: 'm', spec: { vocabSize: 4 }, seed: 2n ** 64n - 1n }).seed, MAX_U64);
  // a stop reason the engine leaves unset reads as max_tokens; the sequence's version defaults to the response's
  const res = wire.generateResponseFromWire(P.GenerateResponse.fromPartial({ version: '4', sequences: [{ tokens: [1] }] }));
  assert.deepEqual([res.sequences[0]!.stopReason, res.sequences[0]!.version], ['max_tokens', 4]);
  // KL type: unset on the wire = the engine's default (undefined here), names map both ways
  const u = (klType?: 'k1' | 'low_var_kl') =>
    wire.updateFromWire(wire.updateToWire({ modelKey: 'm', baseVersion: 1, requestId: 'r', samples: [], settings: { klType, lr: 0 } })).settings!;
  assert.deepEqual([u('k1').klType, u('low_var_kl').klType, u().klType, u().lr, u().beta1], ['k1', 'low_var_kl', undefined, 0, undefined]);
});
