/**
 * Team code: which version of the team registry (a project's teams: its
 * config, team and estimator modules and their local imports) a process runs. Workers load team code once, at start (the workflow bundle is built
 * then, and every team module is loaded then), so after a team file is edited
 * a running worker keeps the old code. Each worker built by Troupe therefore
 * puts a hash of the registry's files into its Temporal identity
 * (`<pid>@<host> team-code=<hash>`), and the CLI, before it starts or resumes a
 * run, compares the identities polling the run's task queues with the hash of
 * its own checkout (`staleTeamCodeWorkers`).
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Connection } from '@temporalio/client';
import { teamLoadErrors } from '../agents/team-registry';
import { pidAlive } from '../stack/processes';
import { activeProject, projectCodeFiles, type Project } from './project';

/**
 * sha256 over the sorted relative paths and contents of the team code, 12 hex digits: the
 * project's config, team and estimator modules and their local imports (none without a project).
 */
export function teamCodeHash(project: Pick<Project, 'dir' | 'configFile' | 'teamFiles' | 'estimatorFiles'> | undefined = activeProject()): string {
  const h = createHash('sha256');
  if (!project) return h.digest('hex').slice(0, 12);
  for (const f of projectCodeFiles(project)
    .map((f) => path.relative(project.dir, f))
    .sort()) {
    h.update(`${f.split(path.sep).join('/')}\0`);
    h.update(new Uint8Array(fs.readFileSync(path.join(project.dir, f))));
    h.update('\0');
  }
  return h.digest('hex').slice(0, 12);
}

/**
 * What a worker does at start: hash the registry, then load every team, so that
 * the code it runs is the code it hashed. Returns the hash and the teams that
 * failed to load (unusable in this worker, the others are fine).
 */
export function loadTeamCode(): { hash: string; failed: Record<string, string> } {
  const hash = teamCodeHash();
  return { hash, failed: teamLoadErrors() };
}

/** A worker identity: the SDK's default `<pid>@<host>` (what `troupe up` waits for), the project it serves (if any), and the team code. */
export function workerIdentity(hash: string, project: string | null = activeProject()?.dir ?? null): string {
  return `${process.pid}@${os.hostname()}${project ? ` project=${encodeURIComponent(project)}` : ''} team-code=${hash}`;
}

/** The project folder a worker serves, from its identity (undefined: none, i.e. a checkout's bundled teams). */
export function projectOf(identity: string): string | undefined {
  const m = / project=(\S+)/.exec(identity);
  return m ? decodeURIComponent(m[1]!) : undefined;
}

export function teamCodeOf(identity: string): string | undefined {
  return / team-code=([0-9a-f]+)$/.exec(identity)?.[1];
}

export interface Poller {
  taskQueue: string;
  kind: 'workflow' | 'activity';
  identity: string;
  /** when the poller last polled (ms since epoch) */
  lastAccessMs: number;
}

/** Pollers not seen for this long are gone (a live worker polls again within ~70 s). */
const GONE_AFTER_MS = 120_000;

/**
 * The pollers that run other team code than `hash` (or do not say which). Temporal lists a
 * poller for minutes after its process died: those on this host whose pid is gone, and
 * those silent for two minutes, are skipped.
 */
export function staleTeamCode(pollers: Poller[], hash: string, now = Date.now(), host = os.hostname(), alive = pidAlive): Poller[] {
  return pollers.filter((p) => {
    if (now - p.lastAccessMs > GONE_AFTER_MS) return false;
    const m = /^(\d+)@(\S+)/.exec(p.identity);
    if (m && m[2] === host && !alive(Number(m[1]))) return false;
    return teamCodeOf(p.identity) !== hash;
  });
}

/** Every poller of the given task queues, workflow and activity pollers both. */
export async function pollersOf(connection: Connection, namespace: string, taskQueues: string[]): Promise<Poller[]> {
  const out: Poller[] = [];
  for (const taskQueue of new Set(taskQueues)) {
    for (const kind of ['workflow', 'activity'] as const) {
      type DescribeRequest = Parameters<Connection['workflowService']['describeTaskQueue']>[0];
      const res = await connection.withDeadline(Date.now() + 5000, () =>
        connection.workflowService.describeTaskQueue({
          namespace,
          taskQueue: { name: taskQueue },
          taskQueueType: (kind === 'workflow' ? 1 : 2) as DescribeRequest['taskQueueType'],
        }),
      );
      for (const p of res.pollers ?? []) {
        const t = p.lastAccessTime;
        out.push({ taskQueue, kind, identity: p.identity ?? '', lastAccessMs: t ? Number(t.seconds ?? 0) * 1000 + Math.floor((t.nanos ?? 0) / 1e6) : 0 });
      }
    }
  }
  return out;
}

/** The pid of a poller on this host, if its identity says so. */
export function localPid(identity: string, host = os.hostname()): number | undefined {
  const m = /^(\d+)@(\S+)/.exec(identity);
  return m && m[2] === host ? Number(m[1]) : undefined;
}
