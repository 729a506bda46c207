/**
 * A gRPC client for the Engine service at the wire level: requests are the
 * generated messages of engines/protocol/proto.ts (fields left out take their
 * proto3 defaults) and go out as given, without the checks and conversions of
 * engines/protocol/client.ts, so the suite can send requests Troupe's client
 * would refuse (ids out of vocabulary, NaN, unknown versions, a chunk stream
 * without its header...). Errors come back as values with the gRPC code and the
 * `troupe-error-reason` trailing metadata, never thrown.
 */
import * as grpc from '@grpc/grpc-js';
import { ERROR_REASON_METADATA } from '../protocol/errors';
import {
  type DeepPartial,
  engineServiceDefinition,
  MAX_MESSAGE_BYTES,
  RPC_NAMES,
  RPCS,
  type RequestOf,
  type ResponseOf,
  type RpcName,
} from '../protocol/proto';

export interface WireError {
  code: grpc.status;
  /** status name, e.g. "INVALID_ARGUMENT" */
  codeName: string;
  /** `troupe-error-reason` from the trailing metadata; "" when absent */
  reason: string;
  message: string;
}

export type Outcome<T> = { ok: true; value: T } | { ok: false; error: WireError };

export const codeName = (c: number): string => (grpc.status as unknown as Record<number, string>)[c] ?? `code ${c}`;

function toWireError(e: unknown): WireError {
  const se = e as Partial<grpc.ServiceError>;
  const code = typeof se.code === 'number' ? se.code : grpc.status.UNKNOWN;
  const reason = se.metadata?.get(ERROR_REASON_METADATA)?.[0];
  return { code, codeName: codeName(code), reason: reason === undefined ? '' : String(reason), message: se.details ?? (e as Error)?.message ?? String(e) };
}

export const describeError = (e: WireError): string => `${e.codeName}/${e.reason || '(no troupe-error-reason)'}: ${e.message}`;

export interface WireClientOptions {
  /** max message size both ways (default MAX_MESSAGE_BYTES, as Troupe's own client; the gRPC default is 4 MiB) */
  maxMessageBytes?: number;
  /** deadline of each call (default 60 s) */
  timeoutMs?: number;
}

/** A request as the suite writes it: any field left out takes its proto3 default. */
export type Req<N extends RpcName> = DeepPartial<RequestOf<N>>;

/** The RPC names of engine.proto. */
export function protoRpcNames(): RpcName[] {
  return [...RPC_NAMES];
}

/** The full message for a request with fields left out. */
const complete = <N extends RpcName>(name: N, req: Req<N>): RequestOf<N> =>
  (RPCS[name].requestType as { fromPartial(o: unknown): unknown }).fromPartial(req) as RequestOf<N>;

export class WireClient {
  readonly client: grpc.Client;
  private readonly def = engineServiceDefinition();
  private readonly timeoutMs: number;

  constructor(
    readonly address: string,
    opts: WireClientOptions = {},
  ) {
    const max = opts.maxMessageBytes ?? MAX_MESSAGE_BYTES;
    this.client = new grpc.Client(address, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': max,
      'grpc.max_send_message_length': max,
    });
    this.timeoutMs = opts.timeoutMs ?? 60_000;
  }

  /** Resolves when the channel is connected; rejects after `timeoutMs`. */
  waitForReady(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => this.client.waitForReady(Date.now() + timeoutMs, (err) => (err ? reject(err) : resolve())));
  }

  close(): void {
    this.client.close();
  }

  private method(name: RpcName): grpc.MethodDefinition<unknown, unknown> {
    return this.def[name] as grpc.MethodDefinition<unknown, unknown>;
  }

  private deadline(timeoutMs?: number): grpc.CallOptions {
    return { deadline: Date.now() + (timeoutMs ?? this.timeoutMs) };
  }

  unary<N extends RpcName>(name: N, req: Req<N>, timeoutMs?: number): Promise<Outcome<ResponseOf<N>>> {
    type Res = ResponseOf<N>;
    const m = this.method(name);
    return new Promise((resolve) => {
      this.client.makeUnaryRequest(
        m.path,
        m.requestSerialize,
        m.responseDeserialize,
        complete(name, req),
        new grpc.Metadata(),
        this.deadline(timeoutMs),
        (err, res) => resolve(err ? { ok: false, error: toWireError(err) } : { ok: true, value: res as Res }),
      );
    });
  }

  /** Server streaming: every message, or the error (with the messages before it); `sizes` are the messages' encoded sizes in bytes. */
  serverStream<N extends RpcName>(
    name: N,
    req: Req<N>,
    timeoutMs?: number,
  ): Promise<Outcome<ResponseOf<N>[]> & { messages: ResponseOf<N>[]; sizes: number[] }> {
    type Res = ResponseOf<N>;
    const m = this.method(name);
    return new Promise((resolve) => {
      const messages: Res[] = [];
      const sizes: number[] = [];
      const call = this.client.makeServerStreamRequest(
        m.path,
        m.requestSerialize,
        (buf: Buffer) => {
          sizes.push(buf.length);
          return m.responseDeserialize(buf) as Res;
        },
        complete(name, req),
        new grpc.Metadata(),
        this.deadline(timeoutMs),
      );
      let done = false;
      call.on('data', (d: Res) => messages.push(d));
      call.on('error', (e) => {
        if (done) return;
        done = true;
        resolve({ ok: false, error: toWireError(e), messages, sizes });
      });
      call.on('end', () => {
        if (done) return;
        done = true;
        resolve({ ok: true, value: messages, messages, sizes });
      });
    });
  }

  /** Client streaming: writes every message, then half-closes. */
  clientStream<N extends RpcName>(name: N, reqs: Req<N>[], timeoutMs?: number): Promise<Outcome<ResponseOf<N>>> {
    type Res = ResponseOf<N>;
    const m = this.method(name);
    return new Promise((resolve) => {
      const call = this.client.makeClientStreamRequest(
        m.path,
        m.requestSerialize,
        m.responseDeserialize,
        new grpc.Metadata(),
        this.deadline(timeoutMs),
        (err, res) => resolve(err ? { ok: false, error: toWireError(err) } : { ok: true, value: res as Res }),
      );
      for (const r of reqs) call.write(complete(name, r));
      call.end();
    });
  }
}
