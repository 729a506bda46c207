// troupe down: stop exactly what `troupe up` started (its pid files in <state>/), nothing else.
// An external Temporal (TEMPORAL_ADDRESS) or PostgreSQL (DATABASE_URL) is never touched.
import { loadConfig } from '../../infra/config';
import { stopRecordedPostgres } from '../../infra/postgres';
import { EXTRA_POOL_WORKER, readRecord, recordedServiceNames, stopService } from '../../infra/processes';
import { defineCommand } from '../command';

/** Stop order: the supervisor (so it restarts nothing), the dashboard, workers (they finish in-flight tasks), Temporal, PostgreSQL. */
export const SERVICES = ['supervisor', 'dashboard', 'pool-worker', 'control-worker', 'temporal', 'postgres'] as const;

/** SERVICES, with the extra pool workers of `up --pool-workers N` (pool-worker-2, ...) after the first. */
function recordedServices(stateDir: string): string[] {
  const extra = recordedServiceNames(stateDir, EXTRA_POOL_WORKER);
  return SERVICES.flatMap((name) => (name === 'pool-worker' ? [name, ...extra] : [name]));
}

export async function down(stateDir: string, log: (line: string) => void = console.log): Promise<number> {
  let stopped = 0;
  for (const name of recordedServices(stateDir)) {
    const rec = readRecord(stateDir, name);
    if (!rec) continue;
    const t0 = Date.now();
    const outcome =
      name === 'postgres'
        ? await stopRecordedPostgres(stateDir)
        : await stopService(stateDir, name, { timeoutMs: name === 'temporal' ? 15_000 : 30_000 });
    if (outcome === 'not-running') {
      log(`  ${name.padEnd(15)} was not running (removed stale pid file)`);
    } else {
      stopped++;
      const secs = ((Date.now() - t0) / 1000).toFixed(1);
      log(`  ${name.padEnd(15)} ${outcome === 'killed' ? 'killed (did not stop in time)' : 'stopped'} (pid ${rec.pid}, ${secs}s)`);
    }
  }
  return stopped;
}

export default defineCommand({
  name: 'down',
  summary: 'Stop the processes `troupe up` started (from their pid files), and nothing else',
  usage: 'troupe down',
  description: 'Data stays: the dev server\'s SQLite file and the embedded PostgreSQL data dir are kept in <state>/.',
  async run() {
    const config = loadConfig();
    console.log(`Stopping what \`troupe up\` started (state ${config.stateDir}):`);
    const n = await down(config.stateDir);
    if (n === 0) console.log('  nothing was running');
    return 0;
  },
});
