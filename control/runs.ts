/**
 * Run control, for the CLI and the client API alike: connecting to Temporal and Postgres,
 * validating a run config, starting and resuming a trainingRun, and watching a run with a
 * live progress line.
 */
import { ApplicationFailure, type Client, WorkflowFailedError, WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import { getRun } from '../activities/store/runs';
import { loadTeam } from '../agents/team-registry';
import { loadConfig, temporalAddressOf, type TroupeConfig } from '../infra/config';
import { connect, type Sql } from '../infra/db';
import { TroupeError, errorMessage } from '../infra/errors';
import { ensureDatabase } from '../stack/postgres';
import { isTemporalOutage } from '../infra/outage';
import { connectTemporal, temporalClient } from '../infra/temporal-connection';
import { checkAgainstTeam, parseRunConfig, RunConfigError, withTeamRunDefaults, type RunConfig, type RunConfigInput } from '../schema/run-config';
import type { RunStatusView } from '../workflows/definitions';
import { statusQuery } from '../workflows/definitions';
import type { RunSummary, trainingRun } from '../workflows/training-run';
import { duration, progressText } from '../workflows/training-run/details';

export { duration };

export interface Connected {
  config: TroupeConfig;
  client: Client;
  sql: Sql;
  close(): Promise<void>;
}

/** Temporal client and database for commands that read or control runs (the stack must be up). */
export async function connectRuns(log: (l: string) => void): Promise<Connected> {
  const config = loadConfig();
  const connection = await connectTemporal(temporalAddressOf(config), 'Temporal', config);
  const db = await ensureDatabase(config, log);
  const sql = connect(db.url, { max: 2 });
  return {
    config,
    client: temporalClient(connection, config.namespace, config),
    sql,
    async close() {
      await sql.end({ timeout: 2 });
      await connection.close();
    },
  };
}

/** Validates a run config the way the workflow will, so the CLI fails before starting anything. */
export function validateRunConfig(input: RunConfigInput): RunConfig {
  try {
    const parsed = parseRunConfig(input);
    // A team that fails to load is a TeamLoadError (a user error with its own hint).
    const team = loadTeam(parsed.team, parsed.teamOptions);
    const config = team.run ? parseRunConfig(withTeamRunDefaults(input, team)) : parsed;
    checkAgainstTeam(config, team);
    return config;
  } catch (e) {
    if (e instanceof RunConfigError)
      throw new TroupeError(e.message, 'fix the fields named above (see `troupe train --help` and docs/running.md for the run config)');
    throw e;
  }
}

/**
 * Starts a trainingRun execution: a new run, or (resume) a new execution of a
 * run that did not finish. Its static summary in the Web UI names team, steps and run.
 */
export function startTrainingRun(client: Client, taskQueue: string, config: RunConfig, opts: { resume?: boolean } = {}) {
  const runId = config.runId!;
  const staticSummary = `${config.team}: ${config.steps} steps x ${config.groupsPerStep} groups x ${config.groupSize} episodes (${config.rollout}), run ${runId}${opts.resume ? ' (resumed)' : ''}`;
  return client.workflow.start<typeof trainingRun>('trainingRun', {
    taskQueue,
    workflowId: runId,
    args: opts.resume ? [config, null, { resume: true }] : [config],
    staticSummary,
  });
}

/**
 * `troupe resume`: a new execution of a failed, terminated or timed-out run (same workflow id,
 * the stored config). It picks up the versions, evals and optimizer changes committed in
 * Postgres, so no update is lost or repeated.
 */
export async function resumeRun(client: Client, sql: Sql, taskQueue: string, runId: string) {
  const run = await getRun(sql, runId);
  if (!run) throw new TroupeError(`no run ${runId} in the store`, 'list runs with `npx troupe list`');
  if (run.status === 'completed' || run.status === 'stopped') throw new TroupeError(`run ${runId} ${run.status}`, 'start a new run with `npx troupe train`');
  try {
    const d = await client.workflow.getHandle(runId).describe();
    if (d.status.name === 'RUNNING') throw new TroupeError(`run ${runId} is still running`, `watch it: npx troupe status ${runId} --watch`);
  } catch (e) {
    if (!(e instanceof WorkflowNotFoundError)) throw e;
  }
  const config = validateRunConfig(run.config);
  return startTrainingRun(client, taskQueue, { ...config, runId }, { resume: true });
}

function bar(done: number, total: number, width = 24): string {
  const filled = Math.round((Math.min(done, total) / Math.max(total, 1)) * width);
  return '#'.repeat(filled) + '.'.repeat(width - filled);
}

export function progressLine(v: RunStatusView): string {
  const rewards = Object.entries(v.rewards)
    .map(
      ([agent, cs]) =>
        `${agent} ${Object.values(cs)
          .reduce((a, b) => a + b, 0)
          .toFixed(2)}`,
    )
    .join('  ');
  const evalPart = v.lastEval ? `eval ${v.lastEval.success.toFixed(2)}` : 'eval -';
  const eta = v.secondsPerStep !== null ? `ETA ${duration(v.secondsPerStep * (v.steps - v.step))}` : 'ETA -';
  const inStep = v.progress ? `  [${progressText(v.progress)}]` : '';
  return `[${bar(v.step, v.steps)}] step ${v.step}/${v.steps} ${v.status.padEnd(10)} ${rewards}  ${evalPart}  ${eta}${inStep}`;
}

/**
 * Polls the run's status query and draws progress on stderr until the workflow closes.
 * The run does not depend on its watcher: while Temporal is unreachable (a restart, a
 * network cut) the watcher keeps the last progress line, says it is waiting, and goes on
 * once the server answers again.
 */
export async function watchRun(handle: WorkflowHandle<typeof trainingRun>, opts: { quiet?: boolean } = {}): Promise<RunSummary> {
  const tty = process.stderr.isTTY;
  let progress = '';
  let outageSince: number | undefined;
  let outageCause = '';
  const draw = (next: string, nowUnreachable: { cause: string } | null) => {
    const wasUnreachable = outageSince !== undefined;
    if (nowUnreachable && !wasUnreachable) outageSince = Date.now();
    if (nowUnreachable) outageCause = nowUnreachable.cause;
    if (!nowUnreachable) outageSince = undefined;
    const prev = progress;
    progress = next;
    if (opts.quiet) return;
    const waiting =
      outageSince !== undefined
        ? `waiting for Temporal (unreachable for ${Math.round((Date.now() - outageSince) / 1000)} s: ${outageCause}); the run goes on without this watcher`
        : '';
    if (tty) {
      process.stderr.write(`\r\x1b[2K${progress}${waiting ? `  [${waiting}]` : ''}`);
      return;
    }
    // Without a terminal: one line per change of progress (ETA aside) and per outage start/end.
    if (next && next.replace(/ETA \S+/, '') !== prev.replace(/ETA \S+/, '')) process.stderr.write(next + '\n');
    if (waiting && !wasUnreachable) process.stderr.write(`troupe: ${waiting}\n`);
    if (!waiting && wasUnreachable) process.stderr.write(`troupe: Temporal answers again; watching run ${handle.workflowId}\n`);
  };
  const outage = (e: unknown) => (isTemporalOutage(e) ? { cause: errorMessage(innermostCause(e)) } : null);
  let stop = false;
  const poll = (async () => {
    while (!stop) {
      try {
        draw(progressLine(await handle.query(statusQuery)), null);
      } catch (e) {
        // not started yet, between executions, closed, or Temporal unreachable
        if (isTemporalOutage(e)) draw(progress, outage(e));
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  try {
    for (;;) {
      try {
        return await handle.result();
      } catch (e) {
        if (!isTemporalOutage(e)) throw e;
        draw(progress, outage(e));
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  } catch (e) {
    if (e instanceof WorkflowFailedError) {
      const cause = (e.cause as { message?: string; cause?: { message?: string } } | undefined) ?? {};
      const reason = cause.cause?.message ? `${cause.message}: ${cause.cause.message}` : (cause.message ?? e.message);
      throw new TroupeError(`run ${handle.workflowId} failed: ${reason}`, failureHint(e, handle.workflowId));
    }
    throw e;
  } finally {
    stop = true;
    await poll;
    if (tty && !opts.quiet) process.stderr.write('\n');
  }
}

/**
 * What to do about a failed run. An engine's INVALID_REQUEST is a request the team or config
 * made that no retry changes; a resume would make it again with the run's stored model specs,
 * so the way on is a new run. Anything else: fix it, then resume.
 */
export function failureHint(e: unknown, runId: string): string {
  for (let c = e as { cause?: unknown; type?: unknown } | undefined; c; c = c.cause as typeof c)
    if (c instanceof ApplicationFailure && c.type === 'INVALID_REQUEST')
      return 'the engine refused a request the team or run config makes (the field is named above): fix it and start a new run';
  return `after fixing the cause: npx troupe resume ${runId}`;
}

/** The innermost error of a cause chain (the gRPC status, not the SDK's wrapper). */
export function innermostCause(e: unknown): unknown {
  let cur = e;
  while ((cur as { cause?: unknown })?.cause) cur = (cur as { cause?: unknown }).cause;
  return cur;
}
