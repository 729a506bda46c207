/** Runs, their executions (lineage) and events. */
import type { Sql } from '../../infra/db';
import type { RunConfigInput } from '../../schema/run-config';

/** terminated, timed-out and cancelled: the workflow closed without recording its end (reconciled by run-end.ts). */
export type RunStatus = 'running' | 'paused' | 'completed' | 'stopped' | 'failed' | 'terminated' | 'timed-out' | 'cancelled';

/** Adds the workflow patches the code running `runId` knows to the run's record (a resume may add newer ones). */
export async function recordWorkflowPatches(sql: Sql, runId: string, patches: readonly string[]): Promise<void> {
  await sql`
    UPDATE runs SET workflow_patches = ARRAY(SELECT DISTINCT p FROM unnest(workflow_patches || ${sql.array([...patches])}::text[]) p ORDER BY p)
    WHERE run_id = ${runId} AND NOT (workflow_patches @> ${sql.array([...patches])}::text[])`;
}

/** Runs recorded by workflow code that knew patches `known` lacks: this code cannot replay them. Newest first, at most `limit`. */
export async function runsNeedingNewerCode(
  sql: Sql,
  known: readonly string[],
  limit = 5,
): Promise<Array<{ runId: string; status: string; unknown: string[] }>> {
  const rows = await sql`
    SELECT run_id, status, ARRAY(SELECT p FROM unnest(workflow_patches) p WHERE NOT (p = ANY(${sql.array([...known])}::text[])) ORDER BY p) AS unknown
    FROM runs WHERE NOT (workflow_patches <@ ${sql.array([...known])}::text[])
    ORDER BY created_at DESC LIMIT ${limit}`;
  return rows.map((r) => ({ runId: r.run_id as string, status: r.status as string, unknown: r.unknown as string[] }));
}

/**
 * Creates a run, together with the execution that creates it when given (one
 * transaction, so a retried start finds itself as the owner). Returns false
 * when the run id is already taken.
 */
export async function createRun(
  sql: Sql,
  run: { runId: string; team: string; config: unknown; resumedFrom?: string; workflowId?: string; executionId?: string },
): Promise<boolean> {
  return sql.begin(async (tx) => {
    const inserted = await tx`
      INSERT INTO runs (run_id, team, config, resumed_from)
      VALUES (${run.runId}, ${run.team}, ${tx.json(run.config as never)}, ${run.resumedFrom ?? null})
      ON CONFLICT (run_id) DO NOTHING RETURNING run_id`;
    if (inserted.length === 0) return false;
    if (run.workflowId && run.executionId)
      await tx`INSERT INTO run_executions (run_id, workflow_id, execution_id, start_step) VALUES (${run.runId}, ${run.workflowId}, ${run.executionId}, 0)`;
    return true;
  });
}

export async function getRun(sql: Sql, runId: string) {
  const [row] = await sql`SELECT * FROM runs WHERE run_id = ${runId}`;
  // config: the run config as stored, checked again (validateRunConfig, parseRunConfig) where it is used
  return row as { run_id: string; team: string; config: RunConfigInput; status: RunStatus; resumed_from: string | null; created_at: Date } | undefined;
}

export async function setRunStatus(sql: Sql, runId: string, status: RunStatus): Promise<void> {
  await sql`UPDATE runs SET status = ${status}, updated_at = now() WHERE run_id = ${runId}`;
}

export async function recordExecution(sql: Sql, e: { runId: string; workflowId: string; executionId: string; startStep: number }): Promise<void> {
  await sql`
    INSERT INTO run_executions (run_id, workflow_id, execution_id, start_step)
    VALUES (${e.runId}, ${e.workflowId}, ${e.executionId}, ${e.startStep})
    ON CONFLICT DO NOTHING`;
}

/** Whether this execution already recorded itself on the run (it owns the run). */
export async function hasExecution(sql: Sql, runId: string, executionId: string): Promise<boolean> {
  const [row] = await sql`SELECT 1 FROM run_executions WHERE run_id = ${runId} AND execution_id = ${executionId}`;
  return row !== undefined;
}

export async function recordEvent(sql: Sql, e: { runId: string; step: number; kind: string; detail?: unknown }): Promise<void> {
  await sql`INSERT INTO run_events (run_id, step, kind, detail) VALUES (${e.runId}, ${e.step}, ${e.kind}, ${sql.json((e.detail ?? {}) as never)})`;
}
