/**
 * A run's stored state reconciled with its workflow. The workflow records its
 * own end (completed, stopped, failed through its failure handler); one that
 * closed without running that code (terminated, timed out, or failed or
 * cancelled before the handler wrote the store) would leave the run
 * "running" forever. Whoever reads runs with a Temporal client at hand
 * (`troupe status` and `list`, the dashboard) passes the runs stored as
 * running or paused through here: a closed workflow's end is recorded
 * (status, updated_at = its close time, a `workflow-closed` event), so every
 * reader agrees from then on.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Sql } from '../../infra/db';
import { TroupeRunId } from '../../infra/search-attributes';
import type { RunStatus } from './runs';

/** The stored status of a run whose workflow closed this way without recording its end. */
const CLOSED: Partial<Record<string, RunStatus>> = { TERMINATED: 'terminated', TIMED_OUT: 'timed-out', FAILED: 'failed', CANCELLED: 'cancelled' };

/** Phases (TroupeStatus, the status query) of a workflow still working: it had not recorded an end. */
const OPEN_PHASES = new Set(['starting', 'running', 'paused', 'stopping', 'evaluating']);

/**
 * The phase to show for an execution: its TroupeStatus, unless the workflow closed while in an
 * open phase (terminated, timed out...), which no code of it could record: then how it closed.
 */
export function phaseAfterClose(workflowStatus: string, phase: unknown): unknown {
  const closed = CLOSED[workflowStatus];
  return closed && (phase === undefined || OPEN_PHASES.has(String(phase))) ? closed : phase;
}

/** Statuses a run has while its workflow may still be open. */
export const OPEN_RUN_STATUSES: readonly RunStatus[] = ['running', 'paused'];

export interface WorkflowEnd {
  status: RunStatus;
  workflowStatus: string;
  closedAt: Date;
  executionId: string;
}

/** How the run's newest execution that worked on it ended, or undefined while it is open (or when Temporal has no such workflow). */
export async function workflowEnd(client: Client, runId: string): Promise<WorkflowEnd | undefined> {
  let d;
  try {
    d = await client.workflow.getHandle(runId).describe();
  } catch (e) {
    if (e instanceof WorkflowNotFoundError) return undefined;
    throw e;
  }
  if (d.typedSearchAttributes.get(TroupeRunId) === undefined && d.status.name !== 'RUNNING') {
    // a later start under this id that was refused (the id was taken): the run's own execution is an earlier one
    const quoted = JSON.stringify(runId);
    d = undefined;
    for await (const w of client.workflow.list({ query: `WorkflowId = ${quoted} AND TroupeRunId = ${quoted}` })) {
      d = w;
      break;
    }
    if (!d) return undefined;
  }
  const status = CLOSED[d.status.name];
  if (!status) return undefined;
  return { status, workflowStatus: d.status.name, closedAt: d.closeTime ?? new Date(), executionId: d.runId };
}

/**
 * Records the end of each given run whose store says it is open but whose workflow closed.
 * Returns the ends recorded, by run. A run the workflow's own bookkeeping closed meanwhile is left alone.
 */
export async function reconcileRunEnds(sql: Sql, client: Client, runs: ReadonlyArray<{ runId: string; status: string }>): Promise<Map<string, WorkflowEnd>> {
  const recorded = new Map<string, WorkflowEnd>();
  for (const r of runs) {
    if (!OPEN_RUN_STATUSES.includes(r.status as RunStatus)) continue;
    const end = await workflowEnd(client, r.runId);
    if (!end) continue;
    const done = await sql.begin(async (tx) => {
      const updated = await tx`UPDATE runs SET status = ${end.status}, updated_at = ${end.closedAt}
        WHERE run_id = ${r.runId} AND status IN ${tx([...OPEN_RUN_STATUSES])} RETURNING run_id`;
      if (updated.length === 0) return false;
      const detail = { workflowStatus: end.workflowStatus, closedAt: end.closedAt.toISOString(), executionId: end.executionId };
      await tx`INSERT INTO run_events (run_id, step, kind, detail)
        VALUES (${r.runId}, (SELECT coalesce(max(step) + 1, 0) FROM versions WHERE run_id = ${r.runId}), 'workflow-closed', ${tx.json(detail)})`;
      return true;
    });
    if (done) recorded.set(r.runId, end);
  }
  return recorded;
}
