/**
 * gRPC transport for the Engine: proto ↔ TypeScript conversion and error
 * mapping (EngineFault → status code + `troupe-error-reason` metadata). A
 * handler failure never takes the process down.
 */
import * as grpc from '@grpc/grpc-js';
import { ERROR_REASON_METADATA, ErrorReason, EngineFault, invalid } from '../protocol/errors';
import { ModelRequestError } from '../families/model-family';
import { engineServiceDefinition, MAX_MESSAGE_BYTES } from '../protocol/proto';
import type * as P from '../protocol/proto';
import * as wire from '../protocol/wire';
import type { UpdateProgress, UpdateResponse } from '../protocol/types';
import type { CancelSignal, Engine } from './engine';
import { RequestCounts } from './metrics';

/** Records one answered RPC by its status code. */
type Answered = (code: grpc.status) => void;

/** An engine fault as is; a request the model cannot run (it names the field) is INVALID_REQUEST, not retried; anything else INTERNAL. */
function faultOf(err: unknown): EngineFault {
  if (err instanceof EngineFault) return err;
  if (err instanceof ModelRequestError) return invalid(err.message);
  return new EngineFault(ErrorReason.INTERNAL, `internal engine error: ${(err as Error)?.message ?? String(err)}`);
}

function toServiceError(err: unknown): grpc.ServiceError {
  const fault = faultOf(err);
  const metadata = new grpc.Metadata();
  metadata.set(ERROR_REASON_METADATA, fault.reason);
  const e = new Error(fault.message) as grpc.ServiceError;
  e.code = fault.code;
  e.details = fault.message;
  e.metadata = metadata;
  return e;
}

function unary<Req, Res>(answered: Answered, fn: (req: Req, cancel: CancelSignal) => Promise<Res>): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const cancel: CancelSignal = { onCancel: (f) => call.on('cancelled', f) };
    const fail = (err: unknown) => {
      const e = toServiceError(err);
      answered(call.cancelled ? grpc.status.CANCELLED : e.code);
      if (!call.cancelled) callback(e);
    };
    let result: Promise<Res>;
    try {
      result = fn(call.request, cancel);
    } catch (e) {
      fail(e);
      return;
    }
    result.then((res) => {
      answered(grpc.status.OK);
      callback(null, res);
    }, fail);
  };
}

/** LoadVersionChunks: gathers the stream, then loads as LoadVersion does. */
function loadVersionChunks(engine: Engine, answered: Answered): grpc.handleClientStreamingCall<P.LoadVersionChunk, P.VersionInfo> {
  return (call, reply) => {
    const callback: grpc.sendUnaryData<P.VersionInfo> = (err, res) => {
      answered(err ? (err.code ?? grpc.status.UNKNOWN) : grpc.status.OK);
      reply(err, res);
    };
    const chunks: P.LoadVersionChunk[] = [];
    call.on('data', (c: P.LoadVersionChunk) => chunks.push(c));
    call.on('error', () => undefined); // the client went away: nothing to answer
    call.on('end', () => {
      const header = chunks[0]?.header;
      if (!header) return callback(toServiceError(invalid('header: the first LoadVersionChunk must carry the request header')));
      engine.loadVersion({ ...wire.loadVersionFromWire(header), ...wire.joinChunks(chunks) }).then(
        (info) => callback(null, wire.versionInfoToWire(info)),
        (e) => callback(toServiceError(e)),
      );
    });
  };
}

/** ExportVersionChunks: the version's info, then its bytes in chunks. */
function exportVersionChunks(engine: Engine, answered: Answered): grpc.handleServerStreamingCall<P.ExportVersionRequest, P.ExportVersionChunk> {
  return (call) => {
    const fail = (e: unknown) => {
      const err = toServiceError(e);
      answered(err.code);
      call.emit('error', err);
    };
    if (call.request.destinationUri) {
      fail(invalid('destination_uri: export by reference is for the unary ExportVersion only'));
      return;
    }
    engine.exportVersion(wire.exportVersionFromWire(call.request)).then((v) => {
      wire.byteChunks(v.weights, v.optimizerState).forEach((c, i) => call.write({ info: i === 0 ? wire.versionInfoToWire(v.info) : undefined, ...c }));
      answered(grpc.status.OK);
      call.end();
    }, fail);
  };
}

/** How often UpdateStream repeats its latest progress while an update waits or runs. */
const PROGRESS_EVERY_MS = 2000;

/** UpdateStream: progress events (one on arrival, then each phase, and every PROGRESS_EVERY_MS), then the result. */
function updateStream(engine: Engine, answered: Answered): grpc.handleServerStreamingCall<P.UpdateRequest, P.UpdateEvent> {
  return (call) => {
    const t0 = performance.now();
    let last: UpdateProgress = { phase: 'received', queuePosition: 0, innerStep: 0, innerSteps: 0, microBatches: 0, elapsedMs: 0 };
    const send = () => {
      if (!call.cancelled && call.writable) call.write({ progress: { ...last, elapsedMs: performance.now() - t0 } });
    };
    send();
    const timer = setInterval(send, PROGRESS_EVERY_MS);
    const fail = (e: unknown) => {
      clearInterval(timer);
      const err = toServiceError(e);
      answered(call.cancelled ? grpc.status.CANCELLED : err.code);
      if (!call.cancelled) call.emit('error', err);
    };
    let result: Promise<UpdateResponse>;
    try {
      // updateFromWire throws synchronously on a malformed request
      result = engine.update(wire.updateFromWire(call.request), (p) => {
        last = { ...last, ...p };
        send();
      });
    } catch (e) {
      fail(e);
      return;
    }
    result.then((res) => {
      clearInterval(timer);
      answered(grpc.status.OK);
      call.write({ result: wire.updateResponseToWire(res) });
      call.end();
    }, fail);
  };
}

/** The service's handlers; each answered RPC is counted in `requests` (served at /metrics). */
export function engineHandlers(engine: Engine, requests = new RequestCounts()): grpc.UntypedServiceImplementation {
  const by =
    (rpc: string): Answered =>
    (code) =>
      requests.count(rpc, code);
  return {
    InitModel: unary(by('InitModel'), async (req: P.InitModelRequest) => wire.versionInfoToWire(await engine.initModel(wire.initModelFromWire(req)))),
    LoadVersion: unary(by('LoadVersion'), async (req: P.LoadVersionRequest) => wire.versionInfoToWire(await engine.loadVersion(wire.loadVersionFromWire(req)))),
    ExportVersion: unary(by('ExportVersion'), async (req: P.ExportVersionRequest) =>
      wire.exportedToWire(await engine.exportVersion(wire.exportVersionFromWire(req))),
    ),
    LoadVersionChunks: loadVersionChunks(engine, by('LoadVersionChunks')),
    ExportVersionChunks: exportVersionChunks(engine, by('ExportVersionChunks')),
    Generate: unary(by('Generate'), async (req: P.GenerateRequest, cancel) =>
      wire.generateResponseToWire(await engine.generate(wire.generateFromWire(req), cancel)),
    ),
    Score: unary(by('Score'), async (req: P.ScoreRequest) => wire.scoreResponseToWire(await engine.score(wire.scoreFromWire(req)))),
    Update: unary(by('Update'), async (req: P.UpdateRequest) => wire.updateResponseToWire(await engine.update(wire.updateFromWire(req)))),
    UpdateStream: updateStream(engine, by('UpdateStream')),
    Abort: unary(by('Abort'), async (req: P.AbortRequest) => engine.abort(req)),
    Health: unary(by('Health'), async () => wire.healthToWire(engine.health())),
    Stats: unary(by('Stats'), async () => wire.statsToWire(await engine.stats())),
  };
}

export class PortInUseError extends Error {}

export interface RunningServer {
  server: grpc.Server;
  port: number;
  address: string;
  shutdown(): Promise<void>;
}

/** Serve `engine` on host:port (port 0 = any free port). */
export function startEngineServer(engine: Engine, host: string, port: number, requests?: RequestCounts): Promise<RunningServer> {
  const server = new grpc.Server({
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
  });
  server.addService(engineServiceDefinition(), engineHandlers(engine, requests));
  const target = host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (err, bound) => {
      if (err) {
        server.forceShutdown();
        const inUse = /EADDRINUSE|address already in use/i.test(err.message);
        reject(inUse ? new PortInUseError(`port ${port} on ${host} is already in use`) : err);
        return;
      }
      const address = `${host.includes(':') ? `[${host}]` : host}:${bound}`;
      resolve({
        server,
        port: bound,
        address,
        shutdown: () =>
          new Promise<void>((res) => {
            server.tryShutdown(() => res());
            setTimeout(() => {
              server.forceShutdown();
              res();
            }, 2000).unref();
          }),
      });
    });
  });
}
