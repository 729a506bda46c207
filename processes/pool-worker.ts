/**
 * Pool worker: a Temporal worker on a pool task queue (default TROUPE_POOL_TASK_QUEUE, `troupe-gpu`)
 * serving a run's pool activities (activities/training/pool.ts: turns, batched
 * rollouts, version 0, updates) against one engine over gRPC and the store.
 * It either connects to an engine that runs elsewhere (`--engine-address`) or
 * spawns `processes/onnx-engine.ts` as a child process and restarts it if it dies.
 *
 *   node --import tsx processes/pool-worker.ts [--task-queue troupe-gpu]
 *        [--temporal-address host:7233] [--namespace default]
 *        [--engine-address host:port | --device auto]
 *
 * In-process (tests, `troupe up`): `const pool = await createPoolWorker({...});
 * await pool.worker.runUntil(promise)` or `pool.run()` / `pool.shutdown()`.
 */
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { ApplicationFailure } from '@temporalio/common';
import { type NativeConnection, Worker } from '@temporalio/worker';
import { EngineClient } from '../engines/protocol/client';
import { EngineHungError, EngineSupervisor } from '../gpu-workers/engine-process';
import { DEFAULT_ENGINE_KIND, engineCommand, ENGINE_KINDS } from './engine-kinds';
import { createTrainingPoolActivities } from '../activities/training/pool';
import { EpisodeThreads } from '../activities/training/episode-threads';
import { DEFAULT_POOL } from '../agents/model';
import { payloadDataConverter } from '../infra/codec';
import { checkpointStoreOf, type CheckpointStore } from '../infra/checkpoint-store';
import { loadConfig, type PayloadKeysConfig } from '../infra/config';
import { gatewayListen } from '../gateway';
import { connect, dropPostgresJsStrays, type Sql } from '../infra/db';
import { enterProjectFromEnvironment } from './project';
import { loadTeamCode, workerIdentity } from './team-code';
import { untilAvailable } from '../infra/backoff';
import { connectTemporalWorker } from '../infra/temporal-connection';
import { TroupeError, isTroupeError } from '../infra/errors';
import { watchProcess } from '../stack/watchdog';
import { assertNamespaceReady } from '../infra/namespace';
import { installRuntime, metricsPortArg, prometheusTelemetry } from './prometheus';
import { pythonEnvironment } from '../stack/python-environment';
import { EngineScriptError, hfTargets } from '../engines/pytorch/scripts';

export interface PoolWorkerOptions {
  taskQueue?: string;
  /** default env TEMPORAL_ADDRESS or localhost:7233 (ignored when `connection` is given) */
  temporalAddress?: string;
  /** default env TEMPORAL_NAMESPACE or "default" */
  namespace?: string;
  /** reuse an existing connection (e.g. TestWorkflowEnvironment.nativeConnection) */
  connection?: NativeConnection;
  /** encrypt payloads with these keys (default env TROUPE_PAYLOAD_KEY...; see infra/codec.ts) */
  payloadKeys?: PayloadKeysConfig;
  /** connect to this engine instead of spawning one */
  engineAddress?: string;
  /** which engine to spawn (processes/engine-kinds.ts: onnx, pytorch; default env TROUPE_ENGINE or onnx) */
  engine?: string;
  /** device for a spawned engine (default env TROUPE_DEVICE or "auto") */
  device?: string;
  /** a spawned engine without progress for this long is killed and restarted (default DEFAULT_HANG_MS) */
  engineHangMs?: number;
  /** extra engine flags for a spawned engine */
  engineArgs?: string[];
  /** the store the activities read versions and episodes from and commit updates to */
  sql: Sql;
  /** where large versions' bytes go (default: the configured one, TROUPE_CHECKPOINT_DIR) */
  checkpoints?: CheckpointStore;
  /** max activities running at once (default 64, so many callers can be coalesced by the engine) */
  maxConcurrentActivities?: number;
  /** do not forward a spawned engine's log lines */
  quietEngine?: boolean;
  log?: (event: Record<string, unknown>) => void;
  /** stop waiting for the engine or Temporal at start-up once this returns true (shutdown) */
  stopped?: () => boolean;
}

export interface PoolWorker {
  worker: Worker;
  taskQueue: string;
  /** the engine client of the moment (changes when a spawned engine restarts) */
  getClient(): EngineClient;
  /** present when this pool worker spawned its engine */
  supervisor?: EngineSupervisor;
  /** runs until shutdown() (or a shutdown signal) */
  run(): Promise<void>;
  /** stops the worker, then the engine child and the connection if owned */
  shutdown(): Promise<void>;
}

export async function createPoolWorker(opts: PoolWorkerOptions): Promise<PoolWorker> {
  const log = opts.log ?? (() => undefined);
  const taskQueue = opts.taskQueue ?? DEFAULT_POOL;
  const waiting = (message: string) => log({ event: 'waiting', message });
  let supervisor: EngineSupervisor | undefined;
  let external: EngineClient | undefined;
  if (opts.engineAddress) {
    const address = opts.engineAddress;
    external = await untilAvailable(`the engine at ${address}`, () => EngineClient.connect(address), { log: waiting, stopped: opts.stopped });
  } else {
    supervisor = new EngineSupervisor({
      command: engineCommand(opts.engine ?? process.env.TROUPE_ENGINE ?? DEFAULT_ENGINE_KIND),
      device: opts.device ?? process.env.TROUPE_DEVICE ?? 'auto',
      extraArgs: opts.engineArgs,
      quiet: opts.quietEngine,
      hangMs: opts.engineHangMs,
      log,
      stopped: opts.stopped,
    });
    await supervisor.start();
  }
  // An engine given up as hung fails each activity that asks for it, for good: a retry would hang it again.
  const getClient = () => {
    if (external) return external;
    try {
      return supervisor!.client();
    } catch (e) {
      if (e instanceof EngineHungError) throw ApplicationFailure.create({ message: e.message, type: 'ENGINE_HUNG', nonRetryable: true });
      throw e;
    }
  };
  const checkpoints = opts.checkpoints ?? checkpointStoreOf(loadConfig());
  // a PEFT adapter over a transformers-layout model imports in the PyTorch engine's layout: its Python says which (if installed)
  const enginePythonTargets = (spec: unknown) => {
    const env = pythonEnvironment({ install: false });
    if ('missing' in env) throw new EngineScriptError(`the adapter's layout needs the PyTorch engine's Python: ${env.missing}`);
    return hfTargets(env.python, spec);
  };

  // Temporal may be down or still starting: connect and create the worker (which checks the
  // namespace) until both succeed.
  // Batched rollouts run team code here too: say which (see processes/team-code.ts).
  const teams = loadTeamCode();
  for (const [team, why] of Object.entries(teams.failed)) log({ event: 'team_unusable', team, error: why });
  // Batched episodes run on threads of their own, so that a runaway one cannot block this one.
  const episodes = new EpisodeThreads(EPISODE_THREAD, undefined, log);
  const ownConnection = !opts.connection;
  const address = opts.temporalAddress ?? process.env.TEMPORAL_ADDRESS ?? 'localhost:7233';
  const namespace = opts.namespace ?? process.env.TEMPORAL_NAMESPACE ?? 'default';
  let connection: NativeConnection;
  let worker: Worker;
  try {
    ({ connection, worker } = await untilAvailable(
      `Temporal at ${opts.connection ? 'the given connection' : address} (namespace ${namespace})`,
      async () => {
        const connection = opts.connection ?? (await connectTemporalWorker(address));
        try {
          await assertNamespaceReady(connection, namespace, address);
          const worker = await Worker.create({
            identity: workerIdentity(teams.hash),
            connection,
            namespace,
            taskQueue,
            activities: createTrainingPoolActivities({ sql: opts.sql, engine: getClient, checkpoints, episodes, hfTargets: enginePythonTargets }),
            maxConcurrentActivityTaskExecutions: opts.maxConcurrentActivities ?? 64,
            // a cancellation (a terminated run) reaches an activity only with a heartbeat's answer: send
            // them every 2 s, not every 0.8 x heartbeatTimeout (8 s), so a run's episodes stop within seconds
            maxHeartbeatThrottleInterval: '2 seconds',
            dataConverter: payloadDataConverter(opts.payloadKeys ?? loadConfig().payloadKeys),
          });
          return { connection, worker };
        } catch (e) {
          if (ownConnection) await connection.close().catch(() => undefined);
          throw e;
        }
      },
      // A namespace that is not ready is a fix for the operator (the error says which), not an outage.
      { log: waiting, stopped: opts.stopped, retryable: (e) => !isTroupeError(e) },
    ));
  } catch (e) {
    await episodes.close();
    await supervisor?.stop();
    external?.close();
    throw e;
  }
  log({ event: 'pool_worker_ready', taskQueue });

  let running: Promise<void> | undefined;
  const cleanup = async () => {
    await episodes.close();
    await supervisor?.stop();
    external?.close();
    if (ownConnection) await connection.close();
  };
  return {
    worker,
    taskQueue,
    getClient,
    supervisor,
    run: () => (running ??= worker.run().finally(cleanup)),
    async shutdown() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      if (running) await running;
      else await cleanup();
    },
  };
}

/** The episode threads' wiring (./episode-thread.ts, beside this file). */
const EPISODE_THREAD = path.join(__dirname, 'episode-thread.ts');

const HELP = `troupe pool worker: serves a run's pool activities (engine + store) on a Temporal task queue.
DATABASE_URL (postgres://...) names the store.

usage: node --import tsx processes/pool-worker.ts [options]

  --task-queue Q         pool task queue (default env TROUPE_POOL_TASK_QUEUE or ${DEFAULT_POOL})
  --temporal-address A   Temporal frontend (default env TEMPORAL_ADDRESS or localhost:7233)
  --namespace N          Temporal namespace (default env TEMPORAL_NAMESPACE or default)
  --engine-address A     use the engine at host:port instead of spawning one
  --engine KIND          the engine to spawn: ${Object.keys(ENGINE_KINDS).join(' | ')} (default env TROUPE_ENGINE or ${DEFAULT_ENGINE_KIND})
  --device D             device of the spawned engine: cpu | cuda:N | auto, or for --engine pytorch a list
                         (cuda:0,cuda:1: FSDP2 updates) (default env TROUPE_DEVICE or auto)
  --metrics-port P       serve Prometheus /metrics on this port (default env TROUPE_POOL_METRICS_PORT; unset: none)
  -h, --help             this text`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'task-queue': { type: 'string' },
      'temporal-address': { type: 'string' },
      namespace: { type: 'string' },
      'engine-address': { type: 'string' },
      engine: { type: 'string' },
      device: { type: 'string' },
      'metrics-port': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  await runPoolWorkerProcess({
    taskQueue: values['task-queue'],
    temporalAddress: values['temporal-address'],
    namespace: values.namespace,
    engineAddress: values['engine-address'],
    engine: values.engine,
    device: values.device,
    metricsPort: metricsPortArg(values['metrics-port']),
  });
}

/**
 * The pool worker as a process (this file's entry, `troupe worker pool`): the store from
 * DATABASE_URL, logs as JSON lines on stderr, runs until SIGINT/SIGTERM. `onReady` gets the
 * worker once it exists (before it polls).
 */
export async function runPoolWorkerProcess(
  opts: Pick<PoolWorkerOptions, 'taskQueue' | 'temporalAddress' | 'namespace' | 'engineAddress' | 'engine' | 'device'> & {
    onReady?: (pool: PoolWorker) => void;
    /** Port of the Prometheus endpoint (default TROUPE_POOL_METRICS_PORT; none: no endpoint). */
    metricsPort?: number;
  },
): Promise<void> {
  const log = (e: Record<string, unknown>) => process.stderr.write(`${JSON.stringify({ ts: new Date().toISOString(), ...e })}\n`);
  // the project's teams, before anything loads one (batched rollouts run team code here)
  const project = enterProjectFromEnvironment({ required: false });
  if (project) log({ event: 'project', dir: project.dir, teams: Object.keys(project.config.teams), warnings: project.warnings });
  // The activities read versions from and commit updates to the store; `troupe up` always passes one.
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl)
    throw new TroupeError(
      'DATABASE_URL is not set: the pool activities need the store',
      'set DATABASE_URL=postgres://user:password@host:5432/db (the database the control worker uses)',
    );
  const sql = connect(databaseUrl, { max: 8 });
  // The Temporal runtime shuts the worker down on SIGINT/SIGTERM; a terminal's Ctrl-C also
  // reaches the engine child, which must then not be restarted. Before the worker exists,
  // the same signals end the waiting for the engine or Temporal.
  let stopping = false;
  let pool: PoolWorker | undefined;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      stopping = true;
      pool?.supervisor?.beginStop();
    });
  }
  const config = loadConfig();
  const metrics = prometheusTelemetry({ host: config.metrics.host, port: opts.metricsPort ?? config.metrics.poolPort });
  if (metrics) installRuntime({ telemetryOptions: { metrics } });
  // its episode threads start their gateways from the same environment: an unreadable certificate stops the worker now
  gatewayListen(config.gateway);
  const watchdog = watchProcess({ what: 'troupe pool worker', blockedLoopMs: config.blockedLoopS * 1000 });
  dropPostgresJsStrays(log);
  pool = await createPoolWorker({
    ...opts,
    taskQueue: opts.taskQueue ?? config.poolTaskQueue,
    engineHangMs: config.engineHangS * 1000,
    log,
    stopped: () => stopping,
    sql,
  });
  opts.onReady?.(pool);
  await pool.run();
  await sql.end({ timeout: 2 });
  await watchdog.stop();
}

if (require.main === module) {
  main().catch((e) => {
    // The whole message: an engine's start-up error carries its stderr on the lines after the first.
    process.stderr.write(`pool-worker: ${(e as Error).message}\n${isTroupeError(e) && e.hint ? `  → ${e.hint}\n` : ''}`);
    process.exit(1);
  });
}
