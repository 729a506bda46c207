/**
 * The engine API on the wire: the messages and codecs generated from engine.proto
 * (gen/engine.ts, by ts-proto; stack/install.js regenerates it when engine.proto
 * changes), and grpc-js's service definition built from them. Messages are camelCase,
 * uint64 as decimal strings (seeds use all 64 bits), enums by name, bytes as Uint8Array.
 */
import type * as grpc from '@grpc/grpc-js';
import type { BinaryWriter } from '@bufbuild/protobuf/wire';
import { EngineDefinition } from './gen/engine';

export * from './gen/engine';

type Methods = EngineDefinition['methods'];
/** The RPCs by their engine.proto names ("Generate", "UpdateStream", ...). */
export type Rpcs = { [K in keyof Methods as Methods[K]['name']]: Methods[K] };
export type RpcName = keyof Rpcs;
export type RequestOf<N extends RpcName> = ReturnType<Rpcs[N]['requestType']['decode']>;
export type ResponseOf<N extends RpcName> = ReturnType<Rpcs[N]['responseType']['decode']>;

export const SERVICE_NAME = EngineDefinition.fullName;
export const RPCS = Object.fromEntries(Object.values(EngineDefinition.methods).map((m) => [m.name, m])) as unknown as Rpcs;
export const RPC_NAMES = Object.keys(RPCS) as RpcName[];

/** gRPC message size limit on both ends (Update batches and exported weights can be large). */
export const MAX_MESSAGE_BYTES = 256 * 1024 * 1024;

/**
 * Bytes per message of LoadVersionChunks / ExportVersionChunks: 4 MiB less room for the
 * message's framing and header, so every chunk message fits gRPC's default 4 MiB receive
 * limit (an engine or client built with default settings accepts it).
 */
export const CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024;

/** The encoded bytes as a Buffer view (no copy: weights can be hundreds of MiB). */
const toBuffer = (w: BinaryWriter): Buffer => {
  const b = w.finish();
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
};

/** A plain Uint8Array view of a received Buffer, so decoded bytes fields are plain Uint8Arrays too (as the API says). */
const fromBuffer = (b: Buffer): Uint8Array => new Uint8Array(b.buffer, b.byteOffset, b.byteLength);

let cached: grpc.ServiceDefinition | undefined;

/** grpc-js's definition of the Engine service, keyed by RPC name, with the generated codecs. */
export function engineServiceDefinition(): grpc.ServiceDefinition {
  cached ??= Object.fromEntries(
    Object.values(EngineDefinition.methods).map((m) => {
      // one codec pair per message type; the union of all methods' types is too wide for TypeScript here
      const req = m.requestType as unknown as Codec;
      const res = m.responseType as unknown as Codec;
      const def: grpc.MethodDefinition<unknown, unknown> = {
        path: `/${SERVICE_NAME}/${m.name}`,
        requestStream: m.requestStream,
        responseStream: m.responseStream,
        requestSerialize: (v) => toBuffer(req.encode(v)),
        requestDeserialize: (b) => req.decode(fromBuffer(b)),
        responseSerialize: (v) => toBuffer(res.encode(v)),
        responseDeserialize: (b) => res.decode(fromBuffer(b)),
      };
      return [m.name, def];
    }),
  );
  return cached;
}

interface Codec {
  encode(message: unknown): BinaryWriter;
  decode(input: Uint8Array): unknown;
}
