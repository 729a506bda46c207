// troupe worker control|pool: one worker in the foreground, for a process manager (systemd
// Restart=always, a Kubernetes Deployment) to run and restart. It waits for what it needs
// (Temporal, PostgreSQL, its engine) instead of exiting, exits 1 on what waiting cannot fix
// (a bad setting, a namespace that is not ready) and 0 after SIGTERM once in-flight tasks are
// done. `--health-port` serves GET /healthz: 200 once the worker polls (a pool worker: and its
// engine is up) and its event loop runs on time, else 503.
import { loadConfig, temporalAddressOf } from '../../infra/config';
import { runControlWorkerProcess } from '../../processes/control-worker';
import { TroupeError } from '../../infra/errors';
import { eventLoopLag } from '../../stack/watchdog';
import { serveHealth, type Readiness } from '../../infra/health';
import { embeddedPostgresStatus, embeddedPostgresUrl } from '../../stack/postgres';
import { runPoolWorkerProcess } from '../../processes/pool-worker';
import { metricsPortArg } from '../../processes/prometheus';
import { defineCommand } from '../command';

export default defineCommand({
  name: 'worker',
  summary: 'Run a control or pool worker in the foreground (for systemd or Kubernetes)',
  usage: 'troupe worker control|pool [--queue Q] [--engine onnx|pytorch] [--device D] [--engine-address A] [--health-port P] [--metrics-port P]',
  description: [
    'control: all workflows and control activities, on TROUPE_TASK_QUEUE (or --queue).',
    'pool: the pool activities on TROUPE_POOL_TASK_QUEUE (or --queue), against an engine it spawns',
    'on --device (default TROUPE_DEVICE) or the one at --engine-address; needs DATABASE_URL',
    '(default: the embedded PostgreSQL of `troupe up`, when it is running).',
    'Temporal and the namespace come from TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE. Run one pool worker',
    'per GPU; several on one queue share its work. Logs go to stdout/stderr.',
    'Readiness: with --health-port P, GET http://<host>:P/healthz is 200 when ready, 503 before (and while',
    'its event loop lags by more than half of TROUPE_BLOCKED_LOOP_S; at the whole of it the worker exits).',
  ].join('\n'),
  positionals: true,
  options: {
    queue: { type: 'string', valueName: 'Q', description: 'task queue to poll' },
    device: {
      type: 'string',
      valueName: 'D',
      description: 'pool: device of the spawned engine (cpu, cuda, cuda:N, auto; --engine pytorch also a list, cuda:0,cuda:1: FSDP2 updates)',
    },
    'engine-address': { type: 'string', valueName: 'A', description: 'pool: use the engine at host:port instead of spawning one' },
    engine: {
      type: 'string',
      valueName: 'KIND',
      description: 'pool: the engine to spawn: onnx (built-in, default TROUPE_ENGINE or onnx) or pytorch (engines/pytorch)',
    },
    'health-port': { type: 'number', valueName: 'P', example: '9464', description: 'serve GET /healthz on this port (all interfaces)' },
    'metrics-port': {
      type: 'number',
      valueName: 'P',
      example: '9465',
      description: 'serve Prometheus GET /metrics on this port, at TROUPE_METRICS_HOST (default TROUPE_CONTROL_METRICS_PORT / TROUPE_POOL_METRICS_PORT)',
    },
  },
  async run({ values, positionals }) {
    const [kind, ...rest] = positionals;
    if ((kind !== 'control' && kind !== 'pool') || rest.length > 0) {
      throw new TroupeError(
        `worker: expected \`control\` or \`pool\`, got ${positionals.length ? positionals.map((p) => JSON.stringify(p)).join(' ') : 'nothing'}`,
        'e.g. `npx troupe worker pool --device cuda:0`',
      );
    }
    if (kind === 'control' && (values.device || values['engine-address'] || values.engine)) {
      throw new TroupeError('worker control: --device, --engine and --engine-address are for pool workers', 'drop them, or run `troupe worker pool`');
    }
    const port = values['health-port'];
    const metricsPortOf = (p: number | undefined) => (p === undefined ? undefined : metricsPortArg(String(p)));
    if (port !== undefined && !(Number.isInteger(port) && port >= 1 && port <= 65535)) {
      throw new TroupeError(`--health-port: must be a port number (1-65535), got ${port}`, 'e.g. --health-port 9464');
    }
    const config = loadConfig();
    // Next to `troupe up` (an extra pool, e.g. --engine pytorch), the store is the embedded one.
    if (kind === 'pool' && !process.env.DATABASE_URL) {
      const embedded = embeddedPostgresStatus(config.stateDir);
      if (embedded.running) process.env.DATABASE_URL = embeddedPostgresUrl(embedded.port ?? config.postgresPort);
    }
    // Until the worker exists, the endpoint says what it is waiting for.
    let readiness: () => Readiness = () => ({ ready: false, kind, state: 'starting' });
    // A loop that runs late (user code hogging it) is not ready; one that stops runs into the worker's watchdog.
    const lag = eventLoopLag();
    const lagLimitMs = (config.blockedLoopS * 1000) / 2;
    const health =
      port === undefined
        ? undefined
        : await serveHealth({ port }, () => {
            const r = readiness();
            const l = lag();
            return { ...r, ...l, ready: r.ready && l.eventLoopLagMs < lagLimitMs };
          });
    try {
      const common = {
        temporalAddress: temporalAddressOf(config),
        namespace: config.namespace,
        taskQueue: values.queue,
        metricsPort: metricsPortOf(values['metrics-port']),
      };
      if (kind === 'control') {
        await runControlWorkerProcess({
          ...common,
          onReady: (worker) =>
            (readiness = () => ({ ready: worker.getState() === 'RUNNING', kind, state: worker.getState(), taskQueue: worker.options.taskQueue })),
        });
      } else {
        await runPoolWorkerProcess({
          ...common,
          device: values.device,
          engineAddress: values['engine-address'],
          engine: values.engine,
          onReady: (pool) =>
            (readiness = () => {
              const engineUp = pool.supervisor ? pool.supervisor.running : true;
              return {
                ready: pool.worker.getState() === 'RUNNING' && engineUp,
                kind,
                state: pool.worker.getState(),
                taskQueue: pool.taskQueue,
                engine: engineUp ? 'up' : 'restarting',
              };
            }),
        });
      }
    } finally {
      health?.close();
    }
    return 0;
  },
});
