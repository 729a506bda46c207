/**
 * The production path for tests: a real Temporal server (built from its Go module, on
 * PostgreSQL, schema by temporal-sql-tool, configured by deploy/temporal/production.yaml),
 * frontend TLS with client certificates required (certificates made here with openssl),
 * a namespace and Troupe's search attributes created with the Temporal CLI, and Troupe's
 * workers as separate processes: one control worker and two pool workers, attached the way
 * docs/operations.md says (TEMPORAL_ADDRESS, TEMPORAL_TLS_*, DATABASE_URL, payload key).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Connection } from '@temporalio/client';
import { loadConfig, type TroupeConfig } from '../infra/config';
import { connect } from '../infra/db';
import { pidAlive, readRecord, spawnService, stopService, tailFile, type ServiceRecord } from '../stack/processes';
import { TROUPE_SEARCH_ATTRIBUTES } from '../infra/search-attributes';
import { ensureTemporalBinary } from '../stack/temporal';
import { pollerIdentities, temporalConnectionOptions, temporalServerVersion } from '../infra/temporal-connection';
import { setupTemporalSchema, temporalServerArgs } from '../stack/temporal-server';
import { repoRoot } from '../infra/paths';
import { makeCa, makeLeaf } from './certs';
import { freePort } from './ports';
import { childProcesses } from './chaos/stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const SERVER_NAME = 'temporal.troupe.test';

export interface Certs {
  ca: string;
  serverCert: string;
  serverKey: string;
  /** The server's system worker's client certificate. */
  workerCert: string;
  workerKey: string;
  /** Troupe's clients and workers. */
  clientCert: string;
  clientKey: string;
  /** Signed by another CA: the server must refuse it. */
  strangerCert: string;
  strangerKey: string;
}

/** A CA and leaf certificates (P-256) signed by it, with openssl, in `dir`. */
export function makeCerts(dir: string): Certs {
  makeCa(dir, 'troupe-test-ca');
  makeCa(dir, 'stranger-ca');
  makeLeaf(dir, 'server', 'troupe-test-ca', `subjectAltName=DNS:${SERVER_NAME}\nextendedKeyUsage=serverAuth,clientAuth`);
  makeLeaf(dir, 'system-worker', 'troupe-test-ca', 'subjectAltName=DNS:system-worker\nextendedKeyUsage=clientAuth');
  makeLeaf(dir, 'troupe', 'troupe-test-ca', 'subjectAltName=DNS:troupe-worker\nextendedKeyUsage=clientAuth');
  makeLeaf(dir, 'stranger', 'stranger-ca', 'subjectAltName=DNS:stranger\nextendedKeyUsage=clientAuth');
  const p = (f: string) => path.join(dir, f);
  return {
    ca: p('troupe-test-ca.pem'),
    serverCert: p('server.pem'),
    serverKey: p('server.key'),
    workerCert: p('system-worker.pem'),
    workerKey: p('system-worker.key'),
    clientCert: p('troupe.pem'),
    clientKey: p('troupe.key'),
    strangerCert: p('stranger.pem'),
    strangerKey: p('stranger.key'),
  };
}

export interface Cluster {
  dir: string;
  address: string;
  namespace: string;
  /** Temporal's two databases on the PostgreSQL server (dropped by shutdown). */
  databases: { database: string; visibilityDatabase: string };
  /** host:port of the server's Prometheus metrics. */
  metricsAddress: string;
  certs: Certs;
  /** What Troupe's processes get: TEMPORAL_ADDRESS, TEMPORAL_TLS_*, DATABASE_URL, ... */
  troupeEnv: Record<string, string>;
  /** loadConfig(troupeEnv). */
  config: TroupeConfig;
  server(): ServiceRecord | undefined;
  startServer(): Promise<void>;
  /** SIGKILL the server (no shutdown of any kind). */
  killServer(): Promise<number>;
  /** Start a Troupe worker process ('control-worker' or 'pool-worker-N'). */
  startWorker(name: string): ServiceRecord;
  /** A running service's record ('temporal', 'control-worker', 'pool-worker-N'), undefined when not running. */
  record(name: string): ServiceRecord | undefined;
  /** SIGKILL a worker and its children (a pool worker's engine). */
  killWorker(name: string): Promise<number>;
  /** Waits until each named worker polls its queue (by its pid in the poller identity). */
  waitForPollers(names: string[], timeoutMs?: number): Promise<void>;
  /** Connect a client as Troupe does (TLS, client certificate). */
  connect(): Promise<Connection>;
  shutdown(): Promise<void>;
}

interface Db {
  host: string;
  port: number;
  user: string;
  password: string;
}

function dbOf(serverUrl: string): Db {
  const u = new URL(serverUrl);
  return { host: u.hostname, port: Number(u.port || 5432), user: decodeURIComponent(u.username || 'postgres'), password: decodeURIComponent(u.password) };
}

/** The Temporal server's TEMPORAL_SERVER_* settings of production.yaml: databases, ports, mTLS. */
function temporalServerEnvironment(
  db: Db,
  databases: { database: string; visibilityDatabase: string },
  ports: Record<'grpc' | 'http' | 'history' | 'matching' | 'worker' | 'metrics', number>,
  membership: Record<'frontend' | 'history' | 'matching' | 'worker', number>,
  certs: Certs,
  extra: Record<string, string> | undefined,
): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    TEMPORAL_SERVER_DB: databases.database,
    TEMPORAL_SERVER_VISIBILITY_DB: databases.visibilityDatabase,
    TEMPORAL_SERVER_DB_HOST: db.host,
    TEMPORAL_SERVER_DB_PORT: String(db.port),
    TEMPORAL_SERVER_DB_USER: db.user,
    TEMPORAL_SERVER_DB_PASSWORD: db.password,
    TEMPORAL_SERVER_PORT: String(ports.grpc),
    TEMPORAL_SERVER_HTTP_PORT: String(ports.http),
    TEMPORAL_SERVER_HISTORY_PORT: String(ports.history),
    TEMPORAL_SERVER_MATCHING_PORT: String(ports.matching),
    TEMPORAL_SERVER_WORKER_PORT: String(ports.worker),
    TEMPORAL_SERVER_FRONTEND_MEMBERSHIP_PORT: String(membership.frontend),
    TEMPORAL_SERVER_HISTORY_MEMBERSHIP_PORT: String(membership.history),
    TEMPORAL_SERVER_MATCHING_MEMBERSHIP_PORT: String(membership.matching),
    TEMPORAL_SERVER_WORKER_MEMBERSHIP_PORT: String(membership.worker),
    TEMPORAL_SERVER_METRICS_ADDRESS: `127.0.0.1:${ports.metrics}`,
    TEMPORAL_SERVER_TLS_CERT: certs.serverCert,
    TEMPORAL_SERVER_TLS_KEY: certs.serverKey,
    TEMPORAL_SERVER_TLS_CA: certs.ca,
    TEMPORAL_SERVER_TLS_REQUIRE_CLIENT_AUTH: 'true',
    TEMPORAL_SERVER_TLS_SERVER_NAME: SERVER_NAME,
    TEMPORAL_SERVER_TLS_WORKER_CERT: certs.workerCert,
    TEMPORAL_SERVER_TLS_WORKER_KEY: certs.workerKey,
    ...extra,
  };
}

/** What Troupe's processes and CLI read to reach this cluster (the variables of docs/operations.md). */
function troupeEnvironment(address: string, namespace: string, certs: Certs, troupeDatabaseUrl: string, dir: string): Record<string, string> {
  return {
    TEMPORAL_ADDRESS: address,
    TEMPORAL_NAMESPACE: namespace,
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: certs.ca,
    TEMPORAL_TLS_CLIENT_CERT_PATH: certs.clientCert,
    TEMPORAL_TLS_CLIENT_KEY_PATH: certs.clientKey,
    TEMPORAL_TLS_SERVER_NAME: SERVER_NAME,
    DATABASE_URL: troupeDatabaseUrl,
    TROUPE_STATE_DIR: path.join(dir, 'state'),
    TROUPE_TASK_QUEUE: 'troupe',
    TROUPE_POOL_TASK_QUEUE: 'troupe-gpu',
    TROUPE_DEVICE: 'cpu',
    TROUPE_PAYLOAD_KEY: randomBytes(32).toString('base64'),
    TROUPE_PAYLOAD_KEY_ID: 'prod-test',
  };
}

/**
 * Sets up and starts the server from `serverBin` / `sqlTool` against the PostgreSQL server at
 * `serverUrl` (own databases, prefixed troupe_test_ so a crashed run's are dropped later), with
 * Troupe's store at `troupeDatabaseUrl`.
 */
export async function startCluster(opts: {
  serverBin: string;
  sqlTool: string;
  serverUrl: string;
  troupeDatabaseUrl: string;
  log: (line: string) => void;
  /** More TEMPORAL_SERVER_* settings of production.yaml (e.g. TEMPORAL_SERVER_HISTORY_SHARDS). */
  serverEnv?: Record<string, string>;
}): Promise<Cluster> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-prod-'));
  const id = `${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const db = dbOf(opts.serverUrl);
  const databases = { database: `troupe_test_temporal_${id}`, visibilityDatabase: `troupe_test_temporal_vis_${id}` };
  setupTemporalSchema(opts.sqlTool, { ...db, ...databases }, opts.log);
  const certs = makeCerts(dir);
  const ports = {
    grpc: await freePort(),
    http: await freePort(),
    history: await freePort(),
    matching: await freePort(),
    worker: await freePort(),
    metrics: await freePort(),
  };
  // Temporal stores membership ports as smallint
  const membership = { frontend: await freePort(32_767), history: await freePort(32_767), matching: await freePort(32_767), worker: await freePort(32_767) };
  const serverEnv = temporalServerEnvironment(db, databases, ports, membership, certs, opts.serverEnv);
  const address = `127.0.0.1:${ports.grpc}`;
  const namespace = 'troupe-production';
  const troupeEnv = troupeEnvironment(address, namespace, certs, opts.troupeDatabaseUrl, dir);
  const config = loadConfig(troupeEnv);
  const stateDir = config.stateDir;
  const rec = (name: string): ServiceRecord | undefined => {
    const r = readRecord(stateDir, name);
    return r && pidAlive(r.pid) ? r : undefined;
  };
  const workerEnv = { ...process.env, ...troupeEnv };
  for (const k of Object.keys(workerEnv)) if (k.startsWith('TEMPORAL_SERVER_')) delete workerEnv[k];

  const kill = async (pid: number, children: number[]) => {
    for (const p of [pid, ...children]) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    for (let i = 0; i < 100 && pidAlive(pid); i++) await sleep(50);
  };

  const cluster: Cluster = {
    dir,
    address,
    namespace,
    certs,
    databases,
    metricsAddress: serverEnv.TEMPORAL_SERVER_METRICS_ADDRESS!,
    troupeEnv,
    config,
    server: () => rec('temporal'),
    record: rec,
    async startServer() {
      const r = spawnService({ stateDir, name: 'temporal', command: opts.serverBin, args: temporalServerArgs(), env: serverEnv });
      const deadline = Date.now() + 120_000;
      while (!(await temporalServerVersion(address, 2000, config))) {
        if (!pidAlive(r.pid)) throw new Error(`the Temporal server exited during start-up: ${tailFile(r.log, 5)}`);
        if (Date.now() > deadline) throw new Error(`the Temporal server did not answer in 120 s: ${tailFile(r.log, 5)}`);
        await sleep(500);
      }
    },
    async killServer() {
      const r = rec('temporal');
      if (!r) throw new Error('the Temporal server is not running');
      await kill(r.pid, []);
      return r.pid;
    },
    startWorker(name) {
      const entry = name === 'control-worker' ? path.join(repoRoot, 'processes', 'control-worker.ts') : path.join(repoRoot, 'processes', 'pool-worker.ts');
      return spawnService({ stateDir, name, command: process.execPath, args: ['--import', 'tsx', entry], env: workerEnv, cwd: repoRoot });
    },
    async killWorker(name) {
      const r = rec(name);
      if (!r) throw new Error(`${name} is not running`);
      await kill(
        r.pid,
        childProcesses(r.pid).map((c) => c.pid),
      );
      return r.pid;
    },
    async waitForPollers(names, timeoutMs = 180_000) {
      const connection = await cluster.connect();
      try {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const control = await pollerIdentities(connection, namespace, config.taskQueue, 'workflow').catch(() => []);
          const pool = await pollerIdentities(connection, namespace, config.poolTaskQueue, 'activity').catch(() => []);
          const missing = names.filter((n) => {
            const pid = rec(n)?.pid;
            return pid === undefined || !(n === 'control-worker' ? control : pool).some((id) => id.startsWith(`${pid}@`));
          });
          if (missing.length === 0) return;
          if (Date.now() > deadline)
            throw new Error(
              `not polling after ${timeoutMs / 1000} s: ${missing.map((n) => `${n} (${tailFile(path.join(stateDir, `${n}.log`), 3)})`).join('; ')}`,
            );
          await sleep(500);
        }
      } finally {
        await connection.close();
      }
    },
    connect: () => Connection.connect({ ...temporalConnectionOptions(config), connectTimeout: 10_000 }),
    async shutdown() {
      for (const name of fs
        .readdirSync(stateDir)
        .filter((f) => f.endsWith('.pid'))
        .map((f) => f.slice(0, -4))) {
        await stopService(stateDir, name, { timeoutMs: 10_000 }).catch(() => undefined);
      }
      const admin = connect(opts.serverUrl, { max: 1 });
      try {
        for (const name of Object.values(databases)) await admin.unsafe(`drop database if exists "${name}" with (force)`);
      } finally {
        await admin.end({ timeout: 1 });
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  fs.mkdirSync(stateDir, { recursive: true });
  try {
    await cluster.startServer();
    await createNamespace(cluster, opts.log);
  } catch (e) {
    await cluster.shutdown().catch(() => undefined);
    throw e;
  }
  return cluster;
}

/**
 * The namespace and Troupe's search attributes, with the Temporal CLI: the commands of
 * docs/operations.md, configured by the same TEMPORAL_* variables as Troupe's workers (the
 * Temporal CLI reads these names too), so a plain-text or certificate-less CLI would be refused.
 */
async function createNamespace(cluster: Cluster, log: (line: string) => void): Promise<void> {
  const cli = (await ensureTemporalBinary({ log })).path;
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, ...cluster.troupeEnv };
  const run = (args: string[]) => {
    const r = spawnSync(cli, args, { encoding: 'utf8', env });
    if (r.status !== 0) throw new Error(`temporal ${args.join(' ')} failed: ${(r.stderr || r.stdout).trim()}`);
  };
  run(['operator', 'namespace', 'create', '--namespace', cluster.namespace, '--retention', '1d']);
  for (const [name, type] of Object.entries(TROUPE_SEARCH_ATTRIBUTES))
    run(['operator', 'search-attribute', 'create', '--namespace', cluster.namespace, '--name', name, '--type', type]);
  log(`troupe: namespace ${cluster.namespace} and ${Object.keys(TROUPE_SEARCH_ATTRIBUTES).length} search attributes created`);
}
