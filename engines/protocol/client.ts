/**
 * Typed promise client for the engine's gRPC service, with error classes
 * callers can branch on:
 *
 *   try { await client.generate(req) }
 *   catch (e) {
 *     if (e instanceof VersionNotLoadedError || e instanceof ModelNotLoadedError) {
 *       await client.loadVersion(fromStore(...)); retry;            // the engine is a cache
 *     } else if (e instanceof NonFiniteUpdateError) { ...incident... }
 *   }
 *
 * Every error is an EngineError with `.code` (gRPC status) and `.reason`
 * (ErrorReason, from the engine's `troupe-error-reason` metadata).
 */
import * as grpc from '@grpc/grpc-js';
import { ERROR_REASON_METADATA, ErrorReason } from './errors';
import { CHUNK_BYTES, engineServiceDefinition, MAX_MESSAGE_BYTES } from './proto';
import type * as P from './proto';
import type * as T from './types';
import * as wire from './wire';

export { ErrorReason } from './errors';
export type * from './types';
export { DEFAULT_UPDATE_SETTINGS } from './types';

export class EngineError extends Error {
  constructor(
    message: string,
    readonly code: grpc.status,
    readonly reason: ErrorReason,
    readonly method: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
  /** Worth retrying the same call later (engine restarting, overloaded, timed out). */
  get transient(): boolean {
    return this.reason === ErrorReason.UNAVAILABLE || this.reason === ErrorReason.DEADLINE_EXCEEDED;
  }
}
export class InvalidRequestError extends EngineError {}
export class ModelNotLoadedError extends EngineError {}
export class VersionNotLoadedError extends EngineError {}
export class StaleBaseError extends EngineError {}
export class VersionConflictError extends EngineError {}
export class RequestIdReusedError extends EngineError {}
export class ReferenceUnreadableError extends EngineError {}
export class NonFiniteUpdateError extends EngineError {}
export class EngineUnavailableError extends EngineError {}
export class EngineCancelledError extends EngineError {}
export class EngineInternalError extends EngineError {}

const CLASS_BY_REASON: Record<ErrorReason, typeof EngineError> = {
  INVALID_REQUEST: InvalidRequestError,
  MODEL_NOT_LOADED: ModelNotLoadedError,
  VERSION_NOT_LOADED: VersionNotLoadedError,
  STALE_BASE: StaleBaseError,
  VERSION_CONFLICT: VersionConflictError,
  REQUEST_ID_REUSED: RequestIdReusedError,
  REFERENCE_UNREADABLE: ReferenceUnreadableError,
  NON_FINITE_UPDATE: NonFiniteUpdateError,
  INTERNAL: EngineInternalError,
  UNAVAILABLE: EngineUnavailableError,
  CANCELLED: EngineCancelledError,
  DEADLINE_EXCEEDED: EngineUnavailableError,
};

/** True when the engine lacks the model or version: load it from the store and retry. */
export function isNotLoaded(e: unknown): e is ModelNotLoadedError | VersionNotLoadedError {
  return e instanceof ModelNotLoadedError || e instanceof VersionNotLoadedError;
}

function reasonFor(err: grpc.ServiceError): ErrorReason {
  const fromEngine = err.metadata?.get(ERROR_REASON_METADATA)?.[0];
  if (typeof fromEngine === 'string' && fromEngine in CLASS_BY_REASON) return fromEngine as ErrorReason;
  switch (err.code) {
    case grpc.status.UNAVAILABLE:
      return ErrorReason.UNAVAILABLE;
    case grpc.status.CANCELLED:
      return ErrorReason.CANCELLED;
    case grpc.status.DEADLINE_EXCEEDED:
      return ErrorReason.DEADLINE_EXCEEDED;
    case grpc.status.INVALID_ARGUMENT:
      return ErrorReason.INVALID_REQUEST;
    default:
      return ErrorReason.INTERNAL;
  }
}

export function toEngineError(err: grpc.ServiceError, method: string): EngineError {
  const reason = reasonFor(err);
  const Cls = CLASS_BY_REASON[reason];
  return new Cls(`engine ${method}: ${err.details || err.message}`, err.code, reason, method);
}

export interface CallOptions {
  /** aborts the call (the engine drops a Generate that has not started) */
  signal?: AbortSignal;
  /** per-call deadline */
  timeoutMs?: number;
}

export interface ClientOptions {
  /**
   * Merge concurrent generate() calls for the same model version issued in the
   * same event-loop turn into one Generate RPC (default true). Results are
   * unchanged — each sequence's output does not depend on its batch — and the
   * per-call gRPC cost is paid once per turn instead of once per caller.
   */
  coalesce?: boolean;
  /** max sequences per merged RPC (default 1024) */
  maxCoalescedSequences?: number;
}

export interface ConnectOptions extends ClientOptions {
  /** how long connect() waits for the channel to become ready (default 10 s) */
  timeoutMs?: number;
}

interface PendingGenerate {
  req: T.GenerateRequest;
  opts: CallOptions;
  settled: boolean;
  resolve(r: T.GenerateResponse): void;
  reject(e: unknown): void;
}

export class EngineClient {
  private readonly client: grpc.Client;
  private readonly methods = engineServiceDefinition();
  private readonly coalesce: boolean;
  private readonly maxCoalesced: number;
  private readonly pendingGenerate = new Map<string, PendingGenerate[]>();
  private flushScheduled = false;
  private closed = false;

  constructor(
    readonly address: string,
    opts: ClientOptions = {},
  ) {
    this.client = new grpc.Client(address, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
      'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
    });
    this.coalesce = opts.coalesce ?? true;
    this.maxCoalesced = opts.maxCoalescedSequences ?? 1024;
  }

  /** A client whose channel is ready (rejects with EngineUnavailableError after timeoutMs). */
  static async connect(address: string, opts: ConnectOptions = {}): Promise<EngineClient> {
    const c = new EngineClient(address, opts);
    await c.waitForReady(opts.timeoutMs ?? 10_000);
    return c;
  }

  waitForReady(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.client.waitForReady(Date.now() + timeoutMs, (err) => {
        if (err) {
          reject(
            new EngineUnavailableError(
              `engine at ${this.address} not reachable within ${timeoutMs} ms: ${err.message}`,
              grpc.status.UNAVAILABLE,
              ErrorReason.UNAVAILABLE,
              'connect',
            ),
          );
        } else resolve();
      });
    });
  }

  private call<N extends P.RpcName>(method: N, req: P.RequestOf<N>, opts: CallOptions = {}): Promise<P.ResponseOf<N>> {
    const def = this.methods[method]!;
    if (this.closed) return Promise.reject(this.closedError(method));
    type Req = P.RequestOf<N>;
    type Res = P.ResponseOf<N>;
    return new Promise<Res>((resolve, reject) => {
      if (opts.signal?.aborted) {
        reject(new EngineCancelledError(`engine ${method}: aborted before the call`, grpc.status.CANCELLED, ErrorReason.CANCELLED, method));
        return;
      }
      const callOpts: grpc.CallOptions = {};
      if (opts.timeoutMs !== undefined) callOpts.deadline = Date.now() + opts.timeoutMs;
      const call = this.client.makeUnaryRequest<Req, Res>(
        def.path,
        def.requestSerialize as (r: Req) => Buffer,
        def.responseDeserialize as (b: Buffer) => Res,
        req,
        new grpc.Metadata(),
        callOpts,
        (err, res) => {
          opts.signal?.removeEventListener('abort', onAbort);
          if (err) reject(toEngineError(err, method));
          else resolve(res as Res);
        },
      );
      const onAbort = () => call.cancel();
      opts.signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  async initModel(req: T.InitModelRequest, opts?: CallOptions): Promise<T.VersionInfo> {
    return wire.versionInfoFromWire(await this.call('InitModel', wire.initModelToWire(req), opts));
  }

  /** Bytes above one chunk are streamed (LoadVersionChunks): no message nears the gRPC limit. */
  async loadVersion(req: T.LoadVersionRequest, opts?: CallOptions): Promise<T.VersionInfo> {
    const { weights = new Uint8Array(0), optimizerState = new Uint8Array(0) } = req;
    if (weights.length + optimizerState.length <= CHUNK_BYTES)
      return wire.versionInfoFromWire(await this.call('LoadVersion', wire.loadVersionToWire(req), opts));
    const header = wire.loadVersionToWire({ ...req, weights: undefined, optimizerState: undefined });
    const chunks = wire.byteChunks(weights, optimizerState).map((c, i) => ({ header: i === 0 ? header : undefined, ...c }));
    return wire.versionInfoFromWire(await this.clientStream('LoadVersionChunks', chunks, opts));
  }

  /** Streamed (ExportVersionChunks; unary with a destinationUri); an engine without that RPC answers the unary ExportVersion. */
  async exportVersion(req: T.ExportVersionRequest, opts?: CallOptions): Promise<T.ExportedVersion> {
    // by reference: the answer is two references, not bytes
    if (req.destinationUri) return wire.exportedFromWire(await this.call('ExportVersion', wire.exportVersionToWire(req), opts));
    let chunks: P.ExportVersionChunk[];
    try {
      chunks = await this.serverStream('ExportVersionChunks', wire.exportVersionToWire(req), opts);
    } catch (e) {
      if ((e as EngineError).code !== grpc.status.UNIMPLEMENTED) throw e;
      return wire.exportedFromWire(await this.call('ExportVersion', wire.exportVersionToWire(req), opts));
    }
    return { info: wire.versionInfoFromWire(chunks[0]!.info!), ...wire.joinChunks(chunks) };
  }

  private clientStream<N extends P.RpcName>(method: N, messages: P.RequestOf<N>[], opts: CallOptions = {}): Promise<P.ResponseOf<N>> {
    type Res = P.ResponseOf<N>;
    const def = this.methods[method]!;
    if (this.closed) return Promise.reject(this.closedError(method));
    return new Promise<Res>((resolve, reject) => {
      const callOpts: grpc.CallOptions = opts.timeoutMs !== undefined ? { deadline: Date.now() + opts.timeoutMs } : {};
      const call = this.client.makeClientStreamRequest<P.RequestOf<N>, Res>(
        def.path,
        def.requestSerialize as (r: P.RequestOf<N>) => Buffer,
        def.responseDeserialize as (b: Buffer) => Res,
        new grpc.Metadata(),
        callOpts,
        (err, res) => (err ? reject(toEngineError(err, method)) : resolve(res as Res)),
      );
      opts.signal?.addEventListener('abort', () => call.cancel(), { once: true });
      for (const m of messages) call.write(m);
      call.end();
    });
  }

  /** A server-streaming call's messages, once its status is OK; `onMessage` hears each as it arrives. */
  private serverStream<N extends P.RpcName>(
    method: N,
    req: P.RequestOf<N>,
    opts: CallOptions = {},
    onMessage?: (m: P.ResponseOf<N>) => void,
  ): Promise<P.ResponseOf<N>[]> {
    type Msg = P.ResponseOf<N>;
    const def = this.methods[method]!;
    if (this.closed) return Promise.reject(this.closedError(method));
    return new Promise<Msg[]>((resolve, reject) => {
      const callOpts: grpc.CallOptions = opts.timeoutMs !== undefined ? { deadline: Date.now() + opts.timeoutMs } : {};
      const call = this.client.makeServerStreamRequest<P.RequestOf<N>, Msg>(
        def.path,
        def.requestSerialize as (r: P.RequestOf<N>) => Buffer,
        def.responseDeserialize as (b: Buffer) => Msg,
        req,
        new grpc.Metadata(),
        callOpts,
      );
      if (opts.signal?.aborted) call.cancel();
      const onAbort = () => call.cancel();
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      call.on('close', () => opts.signal?.removeEventListener('abort', onAbort));
      const out: Msg[] = [];
      call.on('data', (m: Msg) => {
        out.push(m);
        onMessage?.(m);
      });
      call.on('error', (err: grpc.ServiceError) => reject(toEngineError(err, method)));
      // The status comes after the last message; only OK means the stream is whole.
      call.on('status', (s: grpc.StatusObject) => s.code === grpc.status.OK && resolve(out));
    });
  }

  async generate(req: T.GenerateRequest, opts: CallOptions = {}): Promise<T.GenerateResponse> {
    // A named call stays its own RPC, so Abort can find it by its request_id.
    if (!this.coalesce || req.requestId) return this.generateNow(req, opts);
    return new Promise<T.GenerateResponse>((resolve, reject) => {
      const item: PendingGenerate = { req, opts, settled: false, resolve, reject };
      const settle = (f: () => void) => {
        if (!item.settled) {
          item.settled = true;
          f();
        }
      };
      item.resolve = (r) => settle(() => resolve(r));
      item.reject = (e) => settle(() => reject(e));
      const cancelled = () =>
        item.reject(new EngineCancelledError('engine Generate: cancelled by the caller', grpc.status.CANCELLED, ErrorReason.CANCELLED, 'Generate'));
      if (opts.signal?.aborted) return cancelled();
      opts.signal?.addEventListener('abort', cancelled, { once: true });
      if (opts.timeoutMs !== undefined) {
        setTimeout(
          () =>
            item.reject(
              new EngineUnavailableError(
                `engine Generate: no answer within ${opts.timeoutMs} ms`,
                grpc.status.DEADLINE_EXCEEDED,
                ErrorReason.DEADLINE_EXCEEDED,
                'Generate',
              ),
            ),
          opts.timeoutMs,
        ).unref();
      }
      const key = `${req.modelKey}\u0000${req.version}`;
      const group = this.pendingGenerate.get(key) ?? [];
      group.push(item);
      this.pendingGenerate.set(key, group);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flushGenerate());
      }
    });
  }

  private generateNow(req: T.GenerateRequest, opts?: CallOptions): Promise<T.GenerateResponse> {
    return this.call('Generate', wire.generateToWire(req), opts).then(wire.generateResponseFromWire);
  }

  private flushGenerate(): void {
    this.flushScheduled = false;
    const groups = [...this.pendingGenerate.values()];
    this.pendingGenerate.clear();
    for (const group of groups) {
      let chunk: PendingGenerate[] = [];
      let n = 0;
      for (const item of group) {
        if (item.settled) continue;
        if (chunk.length > 0 && n + item.req.sequences.length > this.maxCoalesced) {
          void this.sendMerged(chunk);
          chunk = [];
          n = 0;
        }
        chunk.push(item);
        n += item.req.sequences.length;
      }
      if (chunk.length > 0) void this.sendMerged(chunk);
    }
  }

  /** One RPC for several callers; each sequence carries its caller's sampling. */
  private async sendMerged(items: PendingGenerate[]): Promise<void> {
    if (items.length === 1) {
      const [only] = items;
      return this.generateNow(only!.req, { signal: only!.opts.signal }).then(only!.resolve, only!.reject);
    }
    const first = items[0]!.req;
    // The first caller's sampling is the request default; others' sequences carry theirs only if different.
    const shared = JSON.stringify(first.sampling ?? null);
    const merged: T.GenerateRequest = {
      modelKey: first.modelKey,
      version: first.version,
      sampling: first.sampling,
      sequences: items.flatMap((i) =>
        i.req === first || JSON.stringify(i.req.sampling ?? null) === shared
          ? i.req.sequences
          : i.req.sequences.map((q) => ({ ...q, sampling: q.sampling ?? i.req.sampling })),
      ),
    };
    try {
      const res = await this.generateNow(merged);
      let at = 0;
      for (const i of items) {
        i.resolve({ version: res.version, sequences: res.sequences.slice(at, at + i.req.sequences.length) });
        at += i.req.sequences.length;
      }
    } catch (e) {
      if (e instanceof InvalidRequestError) {
        // Someone's request is malformed: send each on its own so only that caller fails, with its own field paths.
        for (const i of items) this.generateNow(i.req, { signal: i.opts.signal }).then(i.resolve, i.reject);
      } else {
        for (const i of items) i.reject(e);
      }
    }
  }

  async score(req: T.ScoreRequest, opts?: CallOptions): Promise<T.ScoreResponse> {
    return wire.scoreResponseFromWire(await this.call('Score', wire.scoreToWire(req), opts));
  }

  async update(req: T.UpdateRequest, opts?: CallOptions): Promise<T.UpdateResponse> {
    return wire.updateResponseFromWire(await this.call('Update', wire.updateToWire(req), opts));
  }

  /**
   * Update through UpdateStream: `onProgress` hears each progress event (the pool activity
   * heartbeats on them). An engine that answers UpdateStream UNIMPLEMENTED (one that lists
   * only Update) gets the unary Update.
   */
  async updateStream(req: T.UpdateRequest, onProgress: (p: T.UpdateProgress) => void, opts?: CallOptions): Promise<T.UpdateResponse> {
    let events: P.UpdateEvent[];
    try {
      events = await this.serverStream('UpdateStream', wire.updateToWire(req), opts, (ev) => ev.progress && onProgress(ev.progress));
    } catch (e) {
      if ((e as EngineError).code !== grpc.status.UNIMPLEMENTED) throw e;
      return this.update(req, opts);
    }
    const result = events.find((ev) => ev.result)?.result;
    if (!result) throw new Error('engine UpdateStream: the stream ended without a result');
    return wire.updateResponseFromWire(result);
  }

  /** Ends in-flight Generate calls (all of a model, or those with the given request ids) early. */
  async abort(req: T.AbortRequest, opts?: CallOptions): Promise<T.AbortResponse> {
    return this.call('Abort', { modelKey: req.modelKey ?? '', requestIds: req.requestIds ?? [] }, opts);
  }

  async health(opts?: CallOptions): Promise<T.HealthResponse> {
    return wire.healthFromWire(await this.call('Health', {}, opts));
  }

  async stats(opts?: CallOptions): Promise<T.StatsResponse> {
    return wire.statsFromWire(await this.call('Stats', {}, opts));
  }

  close(): void {
    this.closed = true;
    this.client.close();
  }

  /**
   * A call on a closed client (its engine died and the supervisor replaced it): retryable like
   * an unreachable engine, instead of grpc-js's untyped "Channel has been shut down".
   */
  private closedError(method: string): EngineUnavailableError {
    return new EngineUnavailableError(
      `engine ${method}: the client of the engine at ${this.address} is closed (the engine was restarted); retry with the current one`,
      grpc.status.UNAVAILABLE,
      ErrorReason.UNAVAILABLE,
      method,
    );
  }
}
