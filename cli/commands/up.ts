// troupe up: start (or attach to) Temporal and PostgreSQL, apply migrations, start the
// control worker, one pool worker and the supervisor that restarts them (cli/commands/supervise.ts)
// in the background. Idempotent: what already runs is reused.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { type TroupeConfig, loadConfig, redactUrl } from '../../infra/config';
import { connect } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { repoRoot } from '../../infra/paths';
import { ensureDatabase } from '../../stack/postgres';
import { withLockFile } from '../../stack/lock';
import { type ServiceRecord, endStrayProcesses, pidAlive, runningService, spawnService, stopService, tailFile } from '../../stack/processes';
import { namespaceError, namespaceProblems } from '../../infra/namespace';
import { matchingRetentionDays, namespaceRetentionDays, setNamespaceRetention } from '../../infra/namespace-retention';
import { ensureTemporalServer } from '../../stack/temporal';
import { connectTemporal, pollerIdentities } from '../../infra/temporal-connection';
import { migrate } from '../../schema/migrate';
import { refuseNewerRuns } from '../../processes/workflow-compat';
import { ensureDashboard } from '../../stack/dashboard';
import { defineCommand } from '../command';
import { formatPingRow, runPing } from './ping';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const CONTROL_WORKER_ENTRY = path.join(repoRoot, 'processes', 'control-worker.ts');
export const POOL_WORKER_ENTRY = path.join(repoRoot, 'processes', 'pool-worker.ts');
const CLI_ENTRY = path.join(repoRoot, 'cli', 'bin.js');

function lastLines(file: string, n = 5): string {
  return tailFile(file, n)
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .slice(-n)
    .join(' | ')
    .slice(0, 500);
}

/**
 * Wait until the worker `rec` polls `taskQueue` under its own identity (`<pid>@<host> ...`,
 * processes/team-code.ts). Any other poller proves nothing: Temporal lists a killed worker's
 * entry for minutes. Returns false if the process exits first.
 */
export async function waitForPoller(
  rec: Pick<ServiceRecord, 'pid' | 'name' | 'log'>,
  address: string,
  namespace: string,
  taskQueue: string,
  kind: 'workflow' | 'activity',
  timeoutMs: number,
): Promise<boolean> {
  const connection = await connectTemporal(address);
  const own = `${rec.pid}@${os.hostname()} `;
  try {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!pidAlive(rec.pid)) return false;
      const ids = await pollerIdentities(connection, namespace, taskQueue, kind).catch(() => []);
      if (ids.some((id) => id.startsWith(own))) return true;
      await sleep(500);
    }
    throw new TroupeError(`${rec.name} (pid ${rec.pid}) did not start polling "${taskQueue}" in ${timeoutMs / 1000}s`, `see ${rec.log}`);
  } finally {
    await connection.close();
  }
}

function nodeTsArgs(entry: string, args: string[]): string[] {
  return ['--import', 'tsx', entry, ...args];
}

/**
 * Before starting service `name`: end any process of this state dir that still runs as `name`
 * without a record (replaced, or its record lost), so two never poll the same task queue.
 */
async function endStrays(config: TroupeConfig, name: string, log: (line: string) => void): Promise<void> {
  for (const p of await endStrayProcesses(config.stateDir, [name])) log(`troupe: ended a stray ${p.service} (pid ${p.pid}) that had no record`);
}

/** Service names of `n` pool workers: `pool-worker`, `pool-worker-2`, ... */
export function poolWorkerNames(n: number): string[] {
  return Array.from({ length: n }, (_, i) => (i === 0 ? 'pool-worker' : `pool-worker-${i + 1}`));
}

/** Reuses or starts the pool worker `name` and waits for its own poller; undefined if it exited during start-up. */
async function ensurePoolWorker(
  config: TroupeConfig,
  name: string,
  address: string,
  env: NodeJS.ProcessEnv,
  lines: string[],
  log: (line: string) => void,
): Promise<ServiceRecord | undefined> {
  const label = name.replace('-worker', '').padEnd(12);
  const running = runningService(config.stateDir, name);
  if (running) {
    lines.push(`${label} already running (pid ${running.pid}), task queue ${config.poolTaskQueue}, log ${running.log}`);
    return running;
  }
  await endStrays(config, name, log);
  const pool = spawnService({
    stateDir: config.stateDir,
    name,
    command: process.execPath,
    args: nodeTsArgs(POOL_WORKER_ENTRY, [
      '--task-queue',
      config.poolTaskQueue,
      '--temporal-address',
      address,
      '--namespace',
      config.namespace,
      '--device',
      config.device,
    ]),
    env,
    cwd: repoRoot,
  });
  log(`troupe: started ${name} (pid ${pool.pid}); waiting for it to poll "${config.poolTaskQueue}"...`);
  const polling = await waitForPoller(pool, address, config.namespace, config.poolTaskQueue, 'activity', 90_000).catch((err: Error) => {
    lines.push(`${label} pid ${pool.pid} started but not polling yet: ${err.message}`);
    return undefined;
  });
  if (polling === false) {
    lines.push(`${label} FAILED: exited during start-up: ${lastLines(pool.log)} (log ${pool.log})`);
    return undefined;
  }
  if (polling) lines.push(`${label} pid ${pool.pid}, task queue ${config.poolTaskQueue}, device ${config.device}, log ${pool.log}`);
  return pool;
}

export interface UpResult {
  address: string;
  namespace: string;
  uiUrl?: string;
  databaseUrl: string;
  control: ServiceRecord;
  /** The first pool worker (`pool-worker`), and all of them. */
  pool?: ServiceRecord;
  pools: ServiceRecord[];
  supervisor?: ServiceRecord;
  dashboardUrl?: string;
}

/**
 * Everything `troupe up` does, callable from code. One `up` at a time per state dir (a lock
 * file), so the supervisor and a user's `up` or `train` never start the same process twice.
 * `supervise: false` starts no supervisor (the supervisor's own calls; harnesses that restart
 * processes themselves).
 */
export interface UpOptions {
  pool?: boolean;
  poolWorkers?: number;
  supervise?: boolean;
  /**
   * Services to stop first and start anew (team code changed). Done under the `up` lock, so
   * the supervisor cannot start a second one in between.
   */
  replace?: readonly string[];
  log?: (line: string) => void;
}

export async function up(config: TroupeConfig, opts: UpOptions = {}): Promise<{ result: UpResult; lines: string[]; ok: boolean }> {
  const log = opts.log ?? ((l: string) => process.stderr.write(l + '\n'));
  fs.mkdirSync(config.stateDir, { recursive: true });
  return withLockFile(path.join(config.stateDir, 'up.lock'), () => upLocked(config, opts, log), {
    onWait: (pid) => log(`troupe: another \`up\` (pid ${pid}) is starting the stack; waiting for it...`),
  });
}

async function upLocked(config: TroupeConfig, opts: UpOptions, log: (line: string) => void): Promise<{ result: UpResult; lines: string[]; ok: boolean }> {
  const lines: string[] = [];
  let ok = true;
  for (const name of opts.replace ?? []) {
    const outcome = await stopService(config.stateDir, name, { timeoutMs: 30_000 });
    if (outcome !== 'not-running') log(`troupe: ${name} ${outcome}; starting it anew`);
  }

  // 1. Temporal
  const temporal = await ensureTemporalServer(config, log);
  const how = temporal.managed ? (temporal.rec ? `dev server, pid ${temporal.rec.pid}` : 'dev server') : 'external, left alone by `down`';
  lines.push(`Temporal     ${temporal.address}  namespace ${temporal.namespace}  (server ${temporal.serverVersion}; ${how})`);
  if (temporal.uiUrl) lines.push(`Web UI       ${temporal.uiUrl}`);
  // Workers on a namespace without Troupe's search attributes would start, and runs hang.
  // A dev server registers them right after it answers: give the one we manage a moment.
  const connection = await connectTemporal(temporal.address);
  try {
    const deadline = Date.now() + (temporal.managed ? 15_000 : 0);
    for (;;) {
      const problems = await namespaceProblems(connection, config.namespace, temporal.address);
      if (problems.length === 0) break;
      if (Date.now() >= deadline) throw namespaceError(config.namespace, problems);
      await sleep(500);
    }
    // Episodes kept D days (TROUPE_RETENTION_EPISODE_DAYS): the dev server we manage keeps closed
    // workflows' histories as long. An external cluster's retention is its operator's to set.
    const keepDays = config.episodeRetention?.keepDays;
    if (temporal.managed && keepDays !== undefined) {
      const days = matchingRetentionDays(keepDays);
      if ((await namespaceRetentionDays(connection, config.namespace)) !== days) {
        await setNamespaceRetention(connection, config.namespace, days);
        log(`troupe: namespace ${config.namespace} now keeps closed workflows ${days} day(s), as TROUPE_RETENTION_EPISODE_DAYS keeps episodes`);
      }
    }
  } finally {
    await connection.close();
  }

  // 2. PostgreSQL + migrations
  const db = await ensureDatabase(config, log);
  const sql = connect(db.url, { max: 1 });
  let schema: string;
  try {
    const m = await migrate(sql, { log });
    schema = m.from === m.to ? `schema ${m.to}` : `schema ${m.from} -> ${m.to}`;
    // Before any worker starts: one that cannot replay the store's runs would wedge them.
    await refuseNewerRuns(sql);
  } finally {
    await sql.end({ timeout: 2 });
  }
  const dbHow = db.source === 'embedded' ? `embedded, ${db.started ? 'started now' : 'already running'}` : 'DATABASE_URL';
  lines.push(`PostgreSQL   ${redactUrl(db.url)}  (${db.serverVersion}; ${dbHow}; ${schema})`);

  // 3. Control worker
  const childEnv = { ...process.env, DATABASE_URL: db.url, TEMPORAL_NAMESPACE: config.namespace };
  let control = runningService(config.stateDir, 'control-worker');
  if (control) {
    lines.push(`control      already running (pid ${control.pid}), task queue ${config.taskQueue}, log ${control.log}`);
  } else {
    await endStrays(config, 'control-worker', log);
    control = spawnService({
      stateDir: config.stateDir,
      name: 'control-worker',
      command: process.execPath,
      args: nodeTsArgs(CONTROL_WORKER_ENTRY, ['--temporal-address', temporal.address, '--namespace', config.namespace, '--task-queue', config.taskQueue]),
      env: childEnv,
      cwd: repoRoot,
    });
    log(`troupe: started control worker (pid ${control.pid}); waiting for it to poll "${config.taskQueue}"...`);
    const polling = await waitForPoller(control, temporal.address, config.namespace, config.taskQueue, 'workflow', 180_000);
    if (!polling) {
      throw new TroupeError(`the control worker exited during start-up: ${lastLines(control.log)}`, `see ${control.log}`);
    }
    lines.push(`control      pid ${control.pid}, task queue ${config.taskQueue}, log ${control.log}`);
  }

  // 4. Pool workers: several on one machine share the pool queue's work.
  const pools: ServiceRecord[] = [];
  if (opts.pool === false) lines.push('pool         not started (--no-pool)');
  else {
    for (const name of poolWorkerNames(opts.poolWorkers ?? 1)) {
      const started = await ensurePoolWorker(config, name, temporal.address, childEnv, lines, log);
      if (started) pools.push(started);
      else ok = false;
    }
  }
  const dashboard = await ensureDashboard(config, childEnv, [process.execPath, CLI_ENTRY, 'dashboard'], temporal.uiUrl);
  lines.push(dashboard.line);
  // 6. Supervisor: restarts what dies from now on (the dashboard too).
  let supervisor: ServiceRecord | undefined;
  if (opts.supervise !== false) {
    if ((supervisor = runningService(config.stateDir, 'supervisor'))) {
      lines.push(`supervisor   already running (pid ${supervisor.pid}), log ${supervisor.log}`);
    } else {
      await endStrays(config, 'supervisor', log);
      supervisor = spawnService({
        stateDir: config.stateDir,
        name: 'supervisor',
        command: process.execPath,
        args: [CLI_ENTRY, 'supervise', ...(opts.pool === false ? ['--no-pool'] : ['--pool-workers', String(opts.poolWorkers ?? 1)])],
        env: { ...process.env, TROUPE_STATE_DIR: config.stateDir },
        cwd: repoRoot,
      });
      lines.push(`supervisor   pid ${supervisor.pid}: restarts what dies, log ${supervisor.log}`);
    }
  }
  lines.push(`state        ${config.stateDir}`);
  return {
    result: {
      address: temporal.address,
      namespace: config.namespace,
      uiUrl: temporal.uiUrl,
      databaseUrl: db.url,
      control,
      pool: pools[0],
      pools,
      supervisor,
      dashboardUrl: dashboard.url,
    },
    lines,
    ok,
  };
}

export default defineCommand({
  name: 'up',
  summary: 'Start (or attach to) Temporal and PostgreSQL, apply migrations, start the workers in the background',
  usage: 'troupe up [--ping] [--no-pool] [--pool-workers N] [--no-supervise]',
  description: [
    'Temporal: TEMPORAL_ADDRESS if set, else a local dev server (built with Go on first use)',
    'with its SQLite state in <state>/temporal.db and the Web UI on TROUPE_TEMPORAL_UI_PORT.',
    'PostgreSQL: DATABASE_URL if set, else the embedded PostgreSQL in <state>/postgres.',
    'Workers: the control worker (task queue TROUPE_TASK_QUEUE) and one pool worker',
    '(TROUPE_POOL_TASK_QUEUE, device TROUPE_DEVICE). Pid files and logs go to <state>/.',
    'A supervisor (`troupe supervise`) stays in the background and restarts what dies.',
    'Running it again reuses whatever is already running. `troupe down` stops what it started.',
  ].join('\n'),
  options: {
    ping: { type: 'boolean', description: 'run the trivial workflow afterwards (like `troupe ping`)' },
    'no-pool': { type: 'boolean', description: 'do not start the pool worker' },
    'pool-workers': { type: 'number', valueName: 'N', example: '2', description: 'pool workers to start on this machine, each with its engine (default 1)' },
    'no-supervise': { type: 'boolean', description: 'leave no supervisor: nothing restarts a process that dies' },
  },
  async run({ values, log }) {
    const config = loadConfig();
    const poolWorkers = values['pool-workers'] ?? 1;
    if (!Number.isInteger(poolWorkers) || poolWorkers < 1)
      throw new TroupeError(`--pool-workers: must be a whole number >= 1, got ${poolWorkers}`, 'e.g. --pool-workers 2');
    const { result, lines, ok } = await up(config, { pool: !values['no-pool'], poolWorkers, supervise: !values['no-supervise'], log });
    console.log(ok ? 'Troupe is up.' : 'Troupe is partly up:');
    for (const l of lines) console.log('  ' + l);
    if (result.uiUrl) console.log(`\nOpen the Temporal Web UI: ${result.uiUrl}`);
    if (result.dashboardUrl) console.log(`Open the dashboard: ${result.dashboardUrl}`);
    console.log('Stop everything `up` started: npx troupe down');
    if (values.ping) {
      const { row } = await runPing({
        address: result.address,
        namespace: result.namespace,
        taskQueue: config.taskQueue,
        message: 'hello from troupe up --ping',
      });
      console.log(formatPingRow(row));
    }
    return ok ? 0 : 1;
  },
});
