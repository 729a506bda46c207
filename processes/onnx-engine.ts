/**
 * The engine process: `node --import tsx processes/onnx-engine.ts --device auto --port 0`.
 * Prints one JSON line {"event":"listening","port":N,"device":"cpu",...} on stdout
 * when ready; logs JSON lines on stderr. See --help.
 */
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { Engine } from '../engines/onnx/engine';
import { defaultMemoryPolicy, freeMemoryBytes, parseDevice, resolveDevice } from '../engines/onnx/device';
import { RequestCounts, serveEngineMetrics } from '../engines/onnx/metrics';
import { PortInUseError, startEngineServer } from '../engines/onnx/server';
import { watchProcess } from '../stack/watchdog';

const HELP = `troupe engine: serves Generate / Score / Update for model versions over gRPC.

usage: node --import tsx processes/onnx-engine.ts [options]

  --device D          cpu | cuda | cuda:N | auto   (default: env TROUPE_DEVICE or auto)
                      cuda fails with onnxruntime's loader error if CUDA is unusable;
                      auto falls back to cpu and reports why (log, Health, Stats)
  --port N            port to listen on; 0 picks a free one (default 0)
  --host H            interface to bind (default 127.0.0.1)
  --metrics-port N    serve Prometheus GET /metrics on this port (troupe_engine_*: requests, tokens
                      generated and trained, queue depth, device runs, versions, memory); default env
                      TROUPE_ENGINE_METRICS_PORT; 0 or unset: none
  --metrics-host H    interface of /metrics (default: env TROUPE_METRICS_HOST, else 127.0.0.1)
  --threads N         onnxruntime intra-op threads of generate/score sessions (default 1;
                      updates always use 1 thread so they stay bitwise reproducible)
  --batch-window-ms X how long a Generate waits to be batched with others (default 2)
  --max-batch N       max sequences per fused generate run (default 1024)
  --max-versions N    cached versions per model before LRU eviction (default 64)
  --max-models N      models held before those unused for 10 minutes are dropped, least
                      recently used first (default 32); a dropped model asked for again is
                      loaded from the store, as after a restart
  --batch-shape S     auto | free | fixed  (default auto: probed per model spec)
  --memory-bytes N    memory one model spec may use: weights, optimizer state, one run's
                      activations; larger specs are refused naming the field (default: env
                      TROUPE_ENGINE_MEMORY_BYTES, else the host's MemAvailable at start-up plus
                      what the engine holds; on CUDA give the GPU's memory)
  --rss-limit-bytes N the engine exits (one "memory-exceeded" JSON line on stderr) when its
                      resident memory passes N, before the host runs out: its supervisor
                      restarts it and the call in flight fails as retryable (default: env
                      TROUPE_ENGINE_RSS_LIMIT_BYTES, else 90% of what the host can give at
                      start-up: MemAvailable plus what the engine holds)
  --micro-batch-bytes N  activations one update micro-batch may hold (default 268435456;
                      keep it equal across a pool so retried updates give the same bits)
  --trainer-thread X  auto | on | off: Score and Update on a second thread beside Generate, so an
                      asynchronous run's rollout overlaps the previous step's update; auto (the
                      default on cpu) starts it with the first call that would wait for Generate,
                      on with the first call, off (the default on cuda) never. The same bits
                      either way; LoRA models stay on the engine's thread. The thread costs ~40 MB
                      and a copy of the version a call uses while it runs.
  --exit-with-stdin   exit when stdin closes (used by a supervising parent so the
                      engine never outlives it)
  -h, --help          this text

stdout: one line {"event":"listening","port":N,"address":"host:N","device":"cpu|cuda:N",...}
exit codes: 0 on SIGINT/SIGTERM, 1 on startup errors (bad flag, port in use, cuda unavailable)`;

function fail(message: string): never {
  process.stderr.write(`engine: ${message}\n`);
  process.exit(1);
}

function intFlag(name: string, v: string | undefined, def: number, min: number): number {
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) fail(`--${name} must be an integer >= ${min}, got "${v}"`);
  return n;
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        device: { type: 'string' },
        port: { type: 'string' },
        host: { type: 'string' },
        'metrics-port': { type: 'string' },
        'metrics-host': { type: 'string' },
        threads: { type: 'string' },
        'batch-window-ms': { type: 'string' },
        'max-batch': { type: 'string' },
        'max-versions': { type: 'string' },
        'max-models': { type: 'string' },
        'batch-shape': { type: 'string' },
        'memory-bytes': { type: 'string' },
        'micro-batch-bytes': { type: 'string' },
        'rss-limit-bytes': { type: 'string' },
        'trainer-thread': { type: 'string' },
        'exit-with-stdin': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (e) {
    fail(`${(e as Error).message}\n${HELP}`);
  }
  if (values.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const requested = values.device ?? process.env.TROUPE_DEVICE ?? 'auto';
  try {
    parseDevice(requested);
  } catch (e) {
    fail((e as Error).message);
  }
  const port = intFlag('port', values.port, 0, 0);
  if (port > 65535) fail(`--port must be <= 65535, got ${port}`);
  const host = values.host ?? '127.0.0.1';
  const metricsPort = intFlag(
    values['metrics-port'] === undefined && process.env.TROUPE_ENGINE_METRICS_PORT ? 'metrics-port (from TROUPE_ENGINE_METRICS_PORT)' : 'metrics-port',
    values['metrics-port'] ?? (process.env.TROUPE_ENGINE_METRICS_PORT || undefined),
    0,
    0,
  );
  if (metricsPort > 65535) fail(`--metrics-port must be <= 65535, got ${metricsPort}`);
  const metricsHost = values['metrics-host'] ?? (process.env.TROUPE_METRICS_HOST || '127.0.0.1');
  const threads = intFlag('threads', values.threads, 1, 1);
  const windowMs = values['batch-window-ms'] === undefined ? 2 : Number(values['batch-window-ms']);
  if (!(windowMs >= 0)) fail(`--batch-window-ms must be a number >= 0`);
  const maxBatch = intFlag('max-batch', values['max-batch'], 1024, 1);
  const maxVersions = intFlag('max-versions', values['max-versions'], 64, 1);
  const maxModels = intFlag('max-models', values['max-models'], 32, 1);
  const shape = values['batch-shape'] ?? 'auto';
  if (shape !== 'auto' && shape !== 'free' && shape !== 'fixed') fail(`--batch-shape must be auto, free or fixed`);
  const trainerThread = values['trainer-thread'];
  if (trainerThread !== undefined && trainerThread !== 'auto' && trainerThread !== 'on' && trainerThread !== 'off')
    fail(`--trainer-thread must be auto, on or off, got "${trainerThread}"`);
  const defaults = defaultMemoryPolicy();
  const memory = {
    budgetBytes: intFlag(
      values['memory-bytes'] === undefined && process.env.TROUPE_ENGINE_MEMORY_BYTES ? 'memory-bytes (from TROUPE_ENGINE_MEMORY_BYTES)' : 'memory-bytes',
      values['memory-bytes'] ?? process.env.TROUPE_ENGINE_MEMORY_BYTES,
      defaults.budgetBytes,
      1,
    ),
    microBatchBytes: intFlag('micro-batch-bytes', values['micro-batch-bytes'], defaults.microBatchBytes, 1),
  };

  // ONNX Runtime allocates synchronously on this thread: only a thread beside it can stop a run that outgrows the host.
  const rssLimitBytes = intFlag(
    values['rss-limit-bytes'] === undefined && process.env.TROUPE_ENGINE_RSS_LIMIT_BYTES
      ? 'rss-limit-bytes (from TROUPE_ENGINE_RSS_LIMIT_BYTES)'
      : 'rss-limit-bytes',
    values['rss-limit-bytes'] ?? process.env.TROUPE_ENGINE_RSS_LIMIT_BYTES,
    Math.floor(0.9 * freeMemoryBytes()),
    1,
  );
  watchProcess({
    what: 'engine',
    rssLimitBytes,
    rssHint: 'a smaller model, --max-batch or --micro-batch-bytes; --rss-limit-bytes / TROUPE_ENGINE_RSS_LIMIT_BYTES raises the limit',
  });

  const log = (event: Record<string, unknown>) => process.stderr.write(`${JSON.stringify({ ts: new Date().toISOString(), ...event })}\n`);

  let device;
  try {
    device = await resolveDevice(requested);
  } catch (e) {
    fail((e as Error).message);
  }
  if (device.fellBack) log({ event: 'device_fallback', requested, device: device.device, reason: device.fallbackReason });

  const engine = new Engine({
    device,
    intraOpThreads: threads,
    batchWindowMs: windowMs,
    maxBatch,
    maxVersionsPerModel: maxVersions,
    maxModels,
    batchShape: shape,
    memory,
    log,
    ...(trainerThread === undefined ? {} : { trainerThread }),
  });
  const requests = new RequestCounts();
  if (metricsPort > 0) {
    try {
      await serveEngineMetrics(engine, requests, metricsHost, metricsPort);
    } catch (e) {
      fail((e as Error).message);
    }
  }
  let server;
  grpc.setLogVerbosity(grpc.logVerbosity.NONE); // a failed bind is reported below in one line, not by grpc-js too
  try {
    server = await startEngineServer(engine, host, port, requests);
  } catch (e) {
    fail(e instanceof PortInUseError ? e.message : `cannot listen on ${host}:${port}: ${(e as Error).message}`);
  } finally {
    grpc.setLogVerbosity(grpc.logVerbosity.ERROR);
  }
  process.stdout.write(
    `${JSON.stringify({
      event: 'listening',
      port: server.port,
      address: server.address,
      device: device.device,
      requested_device: requested,
      fell_back: device.fellBack,
      fallback_reason: device.fallbackReason,
      pid: process.pid,
      ...(metricsPort > 0 ? { metrics_address: `${metricsHost.includes(':') ? `[${metricsHost}]` : metricsHost}:${metricsPort}` } : {}),
    })}\n`,
  );
  const stop = (signal: string) => {
    log({ event: 'shutdown', signal });
    void server.shutdown().then(() => process.exit(0));
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
  if (values['exit-with-stdin']) {
    process.stdin.on('end', () => stop('parent gone (stdin closed)'));
    process.stdin.resume();
  }
}

main().catch((e) => fail(`fatal: ${(e as Error).stack ?? String(e)}`));
