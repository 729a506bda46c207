// troupe down: stop what `troupe up` started (its pid files in <state>/), then any process of
// this state dir that lost its record (stack/processes.ts strayProcesses), and nothing else.
// An external Temporal (TEMPORAL_ADDRESS) or PostgreSQL (DATABASE_URL) is never touched.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig } from '../../infra/config';
import { withLockFile } from '../../stack/lock';
import { stopRecordedPostgres } from '../../stack/postgres';
import { EXTRA_POOL_WORKER, endStrayProcesses, readRecord, recordedServiceNames, stopService } from '../../stack/processes';
import { defineCommand } from '../command';

/** Stop order: the supervisor (so it restarts nothing), the dashboard, workers (they finish in-flight tasks), Temporal, PostgreSQL. */
export const SERVICES = ['supervisor', 'dashboard', 'pool-worker', 'control-worker', 'temporal', 'postgres'] as const;

/** SERVICES, with the extra pool workers of `up --pool-workers N` (pool-worker-2, ...) after the first. */
function recordedServices(stateDir: string): string[] {
  const extra = recordedServiceNames(stateDir, EXTRA_POOL_WORKER);
  return SERVICES.flatMap((name) => (name === 'pool-worker' ? [name, ...extra] : [name]));
}

export async function down(stateDir: string, log: (line: string) => void = console.log): Promise<number> {
  if (!fs.existsSync(stateDir)) return 0;
  // The supervisor first, outside the lock: it may hold the lock in a restart, and would restart what we stop.
  let stopped = await stopOne(stateDir, 'supervisor', log);
  // Then under `up`'s lock, so no `up` (a `train` in another terminal) starts a process we would miss.
  return withLockFile(
    path.join(stateDir, 'up.lock'),
    async () => {
      for (const name of recordedServices(stateDir)) stopped += await stopOne(stateDir, name, log);
      for (const p of await endStrayProcesses(stateDir)) {
        stopped++;
        log(`  ${p.service.padEnd(15)} stopped a process without a record (pid ${p.pid}: ${p.argv.slice(0, 4).join(' ')})`);
      }
      return stopped;
    },
    { onWait: (pid) => log(`  waiting for \`up\` (pid ${pid}) to finish starting the stack...`) },
  );
}

/** Stop the recorded service `name`; 1 if it was running. */
async function stopOne(stateDir: string, name: string, log: (line: string) => void): Promise<number> {
  const rec = readRecord(stateDir, name);
  if (!rec) return 0;
  const t0 = Date.now();
  const outcome =
    name === 'postgres' ? await stopRecordedPostgres(stateDir) : await stopService(stateDir, name, { timeoutMs: name === 'temporal' ? 15_000 : 30_000 });
  if (outcome === 'not-running') {
    log(`  ${name.padEnd(15)} was not running (removed stale pid file)`);
    return 0;
  }
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  log(`  ${name.padEnd(15)} ${outcome === 'killed' ? 'killed (did not stop in time)' : 'stopped'} (pid ${rec.pid}, ${secs}s)`);
  return 1;
}

export default defineCommand({
  name: 'down',
  summary: 'Stop the processes `troupe up` started (from their pid files, and any that lost theirs), and nothing else',
  usage: 'troupe down',
  description: "Data stays: the dev server's SQLite file and the embedded PostgreSQL data dir are kept in <state>/.",
  async run() {
    const config = loadConfig();
    console.log(`Stopping what \`troupe up\` started (state ${config.stateDir}):`);
    const n = await down(config.stateDir);
    if (n === 0) console.log('  nothing was running');
    return 0;
  },
});
