/**
 * `troupe pause | resume | stop | set`: the workflow's own signals and update
 * (workflows/definitions.ts), sent to a run's open execution with the stack's
 * address and TLS settings (connectRuns). A run id that names no run, or a run
 * that is not running, is refused naming the run and what to do instead.
 */
import { WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import { getRun } from '../activities/store/runs';
import { loadTeam } from '../agents/team-registry';
import { TroupeError, errorMessage } from '../infra/errors';
import { optimizerChangeIssues, parseRunConfig } from '../schema/run-config';
import type { OptimizerChange } from '../schema/optimizer';
import { setOptimizerUpdate, statusQuery, type RunStatusView } from '../workflows/definitions';
import type { trainingRun } from '../workflows/training-run';
import type { Connected } from './runs';

export interface OpenRun {
  handle: WorkflowHandle<typeof trainingRun>;
  view: RunStatusView;
}

/** The run's workflow execution when it is open, with its live status; undefined when it is closed. */
export async function openRun(c: Pick<Connected, 'client' | 'sql'>, runId: string): Promise<OpenRun | undefined> {
  const run = await getRun(c.sql, runId);
  const handle = c.client.workflow.getHandle<typeof trainingRun>(runId);
  let status: string | undefined;
  try {
    status = (await handle.describe()).status.name;
  } catch (e) {
    if (!(e instanceof WorkflowNotFoundError)) throw e;
  }
  if (!run && !status) throw new TroupeError(`no run ${runId}`, 'list runs with `npx troupe list`');
  if (status !== 'RUNNING') return undefined;
  return { handle, view: await handle.query(statusQuery) };
}

/** An open run, or an error saying what state the run is in instead. */
export async function requireOpenRun(c: Pick<Connected, 'client' | 'sql'>, runId: string, what: string): Promise<OpenRun> {
  const open = await openRun(c, runId);
  if (open) return open;
  const run = await getRun(c.sql, runId);
  const state = run?.status ?? 'closed';
  const hint =
    state === 'failed' || state === 'running' || state === 'paused'
      ? `it is not running; continue it with \`npx troupe resume ${runId}\``
      : 'only a running run can be changed; start a new one with `npx troupe train`';
  throw new TroupeError(`${what}: run ${runId} is ${state === 'running' || state === 'paused' ? 'not running (its workflow closed)' : state}`, hint);
}

/**
 * A setOptimizer change checked here against the run's stored config and team, every problem
 * at once (schema/run-config.ts optimizerChangeIssues), then sent; the workflow's validator has
 * the last word (it also knows changes accepted but not yet applied).
 */
export async function setOptimizer(c: Pick<Connected, 'client' | 'sql'>, open: OpenRun, runId: string, change: unknown): Promise<{ effectiveStep: number }> {
  const run = await getRun(c.sql, runId);
  if (run) {
    // the effective optimizer: the stored config's, with the changes applied so far
    const [applied] =
      await c.sql`SELECT detail->'optimizer' AS optimizer FROM run_events WHERE run_id = ${runId} AND kind = 'optimizer-changed' ORDER BY id DESC LIMIT 1`;
    const config = parseRunConfig({ ...run.config, ...(applied?.optimizer ? { optimizer: applied.optimizer } : {}) });
    const issues = optimizerChangeIssues(change, config, loadTeam(config.team, config.teamOptions));
    if (issues.length > 0)
      throw new TroupeError(
        `invalid optimizer change: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
        'fix the fields named above (README: "Changing a running run")',
      );
  }
  try {
    return await open.handle.executeUpdate(setOptimizerUpdate, { args: [change as OptimizerChange] });
  } catch (e) {
    // The workflow's rejection names each field; it is the user's to fix.
    const cause = (e as { cause?: unknown }).cause;
    throw new TroupeError(errorMessage(cause ?? e), 'fix the fields named above');
  }
}
