// troupe up: start (or attach to) Temporal and PostgreSQL, apply migrations, start the
// control worker, one pool worker and the supervisor that restarts them (cli/commands/supervise.ts)
// in the background. Idempotent: what already runs is reused.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TroupeConfig, loadConfig, redactUrl } from '../../infra/config';
import { connect } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { repoRoot } from '../../infra/paths';
import { ensureDatabase } from '../../infra/postgres';
import { withLockFile } from '../../infra/lock';
import { ServiceRecord, pidAlive, runningService, spawnService, tailFile } from '../../infra/processes';
import { connectTemporal, ensureTemporalServer, pollerIdentities } from '../../infra/temporal';
import { migrate } from '../../schema/migrate';
import { ensureDashboard } from '../../dashboard/service';
import { defineCommand } from '../command';
import { formatPingRow, runPing } from './ping';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const CONTROL_WORKER_ENTRY = path.join(repoRoot, 'infra', 'control-worker-main.ts');
export const POOL_WORKER_ENTRY = path.join(repoRoot, 'gpu-workers', 'pool-worker.ts');
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
 * Wait until the worker `rec` polls `taskQueue`: a poller identity `<pid>@<host>` (the SDK's
 * default), or with `anyPoller` any poller at all (for workers that set their own identity).
 * Returns false if the process exits first.
 */
async function waitForPoller(
  rec: ServiceRecord,
  address: string,
  namespace: string,
  taskQueue: string,
  kind: 'workflow' | 'activity',
  timeoutMs: number,
  anyPoller = false,
): Promise<boolean> {
  const connection = await connectTemporal(address);
  try {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!pidAlive(rec.pid)) return false;
      const ids = await pollerIdentities(connection, namespace, taskQueue, kind).catch(() => []);
      if (ids.some((id) => id.startsWith(`${rec.pid}@`)) || (anyPoller && ids.length > 0)) return true;
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

export interface UpResult {
  address: string;
  namespace: string;
  uiUrl?: string;
  databaseUrl: string;
  control: ServiceRecord;
  pool?: ServiceRecord;
  supervisor?: ServiceRecord;
  dashboardUrl?: string;
}

/**
 * Everything `troupe up` does, callable from code. One `up` at a time per state dir (a lock
 * file), so the supervisor and a user's `up` or `train` never start the same process twice.
 * `supervise: false` starts no supervisor (the supervisor's own calls; harnesses that restart
 * processes themselves).
 */
export async function up(
  config: TroupeConfig,
  opts: { pool?: boolean; supervise?: boolean; log?: (line: string) => void } = {},
): Promise<{ result: UpResult; lines: string[]; ok: boolean }> {
  const log = opts.log ?? ((l: string) => process.stderr.write(l + '\n'));
  fs.mkdirSync(config.stateDir, { recursive: true });
  return withLockFile(path.join(config.stateDir, 'up.lock'), () => upLocked(config, opts, log), {
    onWait: (pid) => log(`troupe: another \`up\` (pid ${pid}) is starting the stack; waiting for it...`),
  });
}

async function upLocked(
  config: TroupeConfig,
  opts: { pool?: boolean; supervise?: boolean },
  log: (line: string) => void,
): Promise<{ result: UpResult; lines: string[]; ok: boolean }> {
  const lines: string[] = [];
  let ok = true;

  // 1. Temporal
  const temporal = await ensureTemporalServer(config, log);
  const how = temporal.managed ? (temporal.rec ? `dev server, pid ${temporal.rec.pid}` : 'dev server') : 'external, left alone by `down`';
  lines.push(`Temporal     ${temporal.address}  namespace ${temporal.namespace}  (server ${temporal.serverVersion}; ${how})`);
  if (temporal.uiUrl) lines.push(`Web UI       ${temporal.uiUrl}`);

  // 2. PostgreSQL + migrations
  const db = await ensureDatabase(config, log);
  const sql = connect(db.url, { max: 1 });
  let schema: string;
  try {
    const m = await migrate(sql, { log });
    schema = m.from === m.to ? `schema ${m.to}` : `schema ${m.from} -> ${m.to}`;
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
    control = spawnService({
      stateDir: config.stateDir,
      name: 'control-worker',
      command: process.execPath,
      args: nodeTsArgs(CONTROL_WORKER_ENTRY, [
        '--temporal-address', temporal.address,
        '--namespace', config.namespace,
        '--task-queue', config.taskQueue,
      ]),
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

  // 4. Pool worker
  let pool: ServiceRecord | undefined;
  if (opts.pool === false) {
    lines.push('pool         not started (--no-pool)');
  } else if ((pool = runningService(config.stateDir, 'pool-worker'))) {
    lines.push(`pool         already running (pid ${pool.pid}), task queue ${config.poolTaskQueue}, log ${pool.log}`);
  } else {
    pool = spawnService({
      stateDir: config.stateDir,
      name: 'pool-worker',
      command: process.execPath,
      args: nodeTsArgs(POOL_WORKER_ENTRY, [
        '--task-queue', config.poolTaskQueue,
        '--temporal-address', temporal.address,
        '--namespace', config.namespace,
        '--device', config.device,
      ]),
      env: childEnv,
      cwd: repoRoot,
    });
    log(`troupe: started pool worker (pid ${pool.pid}); waiting for it to poll "${config.poolTaskQueue}"...`);
    const polling = await waitForPoller(pool, temporal.address, config.namespace, config.poolTaskQueue, 'activity', 90_000, true).catch(
      (err: Error) => {
        lines.push(`pool         pid ${pool!.pid} started but not polling yet: ${err.message}`);
        return undefined;
      },
    );
    if (polling === false) {
      ok = false;
      lines.push(`pool         FAILED: exited during start-up: ${lastLines(pool.log)} (log ${pool.log})`);
      pool = undefined;
    } else if (polling) {
      lines.push(`pool         pid ${pool.pid}, task queue ${config.poolTaskQueue}, device ${config.device}, log ${pool.log}`);
    }
  }
  const dashboard = await ensureDashboard(config, childEnv, temporal.uiUrl);
  lines.push(dashboard.line);
  // 6. Supervisor: restarts what dies from now on (the dashboard too).
  let supervisor: ServiceRecord | undefined;
  if (opts.supervise !== false) {
    if ((supervisor = runningService(config.stateDir, 'supervisor'))) {
      lines.push(`supervisor   already running (pid ${supervisor.pid}), log ${supervisor.log}`);
    } else {
      supervisor = spawnService({
        stateDir: config.stateDir,
        name: 'supervisor',
        command: process.execPath,
        args: [CLI_ENTRY, 'supervise', ...(opts.pool === false ? ['--no-pool'] : [])],
        env: { ...process.env, TROUPE_STATE_DIR: config.stateDir },
        cwd: repoRoot,
      });
      lines.push(`supervisor   pid ${supervisor.pid}: restarts what dies, log ${supervisor.log}`);
    }
  }
  lines.push(`state        ${config.stateDir}`);
  return {
    result: { address: temporal.address, namespace: config.namespace, uiUrl: temporal.uiUrl, databaseUrl: db.url, control, pool, supervisor, dashboardUrl: dashboard.url },
    lines,
    ok,
  };
}

export default defineCommand({
  name: 'up',
  summary: 'Start (or attach to) Temporal and PostgreSQL, apply migrations, start the workers in the background',
  usage: 'troupe up [--ping] [--no-pool] [--no-supervise]',
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
    'no-supervise': { type: 'boolean', description: 'leave no supervisor: nothing restarts a process that dies' },
  },
  async run({ values, log }) {
    const config = loadConfig();
    const { result, lines, ok } = await up(config, { pool: !values['no-pool'], supervise: !values['no-supervise'], log });
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
