// troupe supervise: the supervisor `troupe up` leaves running in the background (one machine).
// Every second it checks what `up` started (Temporal dev server, embedded PostgreSQL, control
// and pool workers); when one has died it runs `up` again, which starts exactly what is
// missing, with capped backoff while that fails and a log line each time. `troupe down`
// stops it first. On a cluster, a process manager (systemd, Kubernetes) plays this role.
import { loadConfig, type TroupeConfig } from '../../infra/config';
import { backoffDelay } from '../../infra/backoff';
import { errorMessage } from '../../infra/errors';
import { embeddedPostgresStatus } from '../../stack/postgres';
import { logFilePath, runningService, tailFile } from '../../stack/processes';
import { defineCommand } from '../command';
import { poolWorkerNames, up } from './up';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The processes `up` starts, each with its pid now (undefined: not running). */
function servicePids(config: TroupeConfig, opts: { pool: boolean; poolWorkers?: number }): Map<string, number | undefined> {
  const names = [
    ...(config.temporalAddress ? [] : ['temporal']),
    ...(config.databaseUrl ? [] : ['postgres']),
    'control-worker',
    ...(opts.pool ? poolWorkerNames(opts.poolWorkers ?? 1) : []),
  ];
  return new Map(names.map((name) => [name, name === 'postgres' ? embeddedPostgresStatus(config.stateDir).pid : runningService(config.stateDir, name)?.pid]));
}

/** What `up` started that is not running now, each with the last line of its log. */
export function deadServices(config: TroupeConfig, opts: { pool: boolean; poolWorkers?: number }): Array<{ name: string; lastLine: string }> {
  const dead = [...servicePids(config, opts)].filter(([, pid]) => pid === undefined).map(([name]) => name);
  return dead.map((name) => ({
    name,
    lastLine: (
      tailFile(logFilePath(config.stateDir, name), 5)
        .split('\n')
        .filter((l) => l.trim())
        .at(-1) ?? ''
    ).slice(0, 200),
  }));
}

/** Runs until `stopped()`: restarts whatever of the stack dies. */
export async function supervise(
  config: TroupeConfig,
  opts: { pool: boolean; poolWorkers?: number; log: (line: string) => void; stopped: () => boolean; intervalMs?: number },
): Promise<void> {
  const log = (line: string) => opts.log(`${new Date().toISOString()} supervisor: ${line}`);
  log(`watching ${config.stateDir} (pool worker ${opts.pool ? 'included' : 'not started by up'})`);
  let failures = 0;
  while (!opts.stopped()) {
    const dead = deadServices(config, opts);
    if (dead.length === 0) {
      failures = 0;
      await sleep(opts.intervalMs ?? 1000);
      continue;
    }
    const before = servicePids(config, opts);
    log(`not running: ${dead.map((d) => `${d.name}${d.lastLine ? ` (last log line: ${d.lastLine})` : ''}`).join('; ')}; restarting`);
    try {
      const { ok, lines } = await up(config, { pool: opts.pool, poolWorkers: opts.poolWorkers, supervise: false, log });
      if (!ok) throw new Error(lines.filter((l) => /FAILED/.test(l)).join('; ') || 'up reported a partial start');
      failures = 0;
      // Also what died while `up` ran: every process whose pid changed.
      const after = servicePids(config, opts);
      log(
        `restarted ${[...after]
          .filter(([name, pid]) => pid !== before.get(name))
          .map(([name, pid]) => `${name} (pid ${pid})`)
          .join(', ')}`,
      );
    } catch (e) {
      failures++;
      const delay = backoffDelay(failures, { initialMs: 1000, maxMs: 30_000 });
      log(`restart failed (attempt ${failures}): ${errorMessage(e)}; next try in ${Math.round(delay / 1000)} s`);
      await sleep(delay);
    }
  }
}

export default defineCommand({
  name: 'supervise',
  summary: 'Restart whatever `troupe up` started when it dies (`up` runs this in the background)',
  usage: 'troupe supervise [--no-pool] [--pool-workers N]',
  description: [
    'Checks every second that the processes `troupe up` started are running (Temporal dev server,',
    'embedded PostgreSQL, control worker, pool worker) and runs `up` again when one is not, with',
    'backoff (1 s doubling to 30 s) while that fails. Logs to <state>/supervisor.log when started',
    'by `up`. `troupe down` stops it before the rest.',
  ].join('\n'),
  options: {
    'no-pool': { type: 'boolean', description: 'do not start or restart a pool worker' },
    'pool-workers': { type: 'number', valueName: 'N', example: '2', description: 'pool workers `up` started (default 1)' },
  },
  async run({ values }) {
    // Stop at once: what a restart in flight already spawned is recorded, and `down` stops it next.
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(0));
    await supervise(loadConfig(), { pool: !values['no-pool'], poolWorkers: values['pool-workers'], log: (l) => console.log(l), stopped: () => false });
    return 0;
  },
});
