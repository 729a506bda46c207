/**
 * Before the CLI starts or resumes a run: bring the stack up and make sure the
 * workers polling the run's task queues run this checkout's team code (see
 * processes/team-code.ts). Workers that `troupe up` started from this state dir are
 * restarted (runs survive a worker restart); any other worker with other team
 * code is refused with what to do, since Troupe cannot restart it.
 */
import type { TroupeConfig } from '../infra/config';
import { TroupeError } from '../infra/errors';
import { EXTRA_POOL_WORKER, recordedServiceNames, runningService } from '../stack/processes';
import { activeProject } from '../processes/project';
import { localPid, pollersOf, projectOf, staleTeamCode, teamCodeHash, teamCodeOf, type Poller } from '../processes/team-code';
import { connectTemporal } from '../infra/temporal-connection';
import { up } from './commands/up';

const WORKERS = ['control-worker', 'pool-worker'] as const;

async function stalePollers(config: TroupeConfig, address: string, hash: string): Promise<Poller[]> {
  const connection = await connectTemporal(address);
  try {
    return staleTeamCode(await pollersOf(connection, config.namespace, [config.taskQueue, config.poolTaskQueue]), hash);
  } finally {
    await connection.close();
  }
}

export async function upWithCurrentTeams(config: TroupeConfig, log: (line: string) => void, opts: { pool?: boolean } = {}) {
  let stack = await up(config, { ...opts, log });
  if (!stack.ok) throw new TroupeError('the stack did not come up completely', stack.lines.join('; '));
  const hash = teamCodeHash();
  const stale = await stalePollers(config, stack.result.address, hash);
  if (stale.length === 0) return stack;

  // `up --pool-workers N` recorded more pool workers: they are ours too, and restarted as many.
  const extra = recordedServiceNames(config.stateDir, EXTRA_POOL_WORKER);
  const ours = [...WORKERS, ...extra].flatMap((name) => {
    const rec = runningService(config.stateDir, name);
    return rec && stale.some((p) => localPid(p.identity) === rec.pid) ? [name] : [];
  });
  const foreign = stale.find((p) => !ours.some((name) => runningService(config.stateDir, name)?.pid === localPid(p.identity)));
  if (foreign) {
    throw new TroupeError(
      projectOf(foreign.identity) !== activeProject()?.dir
        ? `worker "${foreign.identity}" on task queue "${foreign.taskQueue}" serves ${projectOf(foreign.identity) ? `project ${projectOf(foreign.identity)}` : 'no project'}, not this one`
        : `worker "${foreign.identity}" on task queue "${foreign.taskQueue}" runs team code ${teamCodeOf(foreign.identity) ?? '(unknown)'}, this project's is ${hash} (the team code changed since it started)`,
      projectOf(foreign.identity) !== activeProject()?.dir
        ? 'stop it (`npx troupe down` in its project), or give each project its own task queues (stack: { TROUPE_TASK_QUEUE, TROUPE_POOL_TASK_QUEUE } in troupe.config.ts)'
        : 'restart that worker so it loads the current teams (workers load team code once, at start), then run this again',
    );
  }
  for (const name of ours) log(`troupe: the team code changed since the ${name} started (team code ${hash}): restarting it`);
  // Stopped and started again inside one `up` (under its lock): the supervisor, which restarts
  // what dies, must not see the stopped worker missing and start a second one.
  stack = await up(config, { ...opts, poolWorkers: 1 + extra.length, replace: ours, log });
  if (!stack.ok) throw new TroupeError('the stack did not come up completely', stack.lines.join('; '));
  return stack;
}
