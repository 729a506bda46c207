/** Step and eval metrics: one row per (run, step, kind, scope, name). */
import type { Sql } from '../../infra/db';

export interface MetricRow {
  step: number;
  kind: string;
  scope: string;
  name: string;
  value: number;
}

export async function writeMetrics(sql: Sql, runId: string, rows: readonly MetricRow[]): Promise<void> {
  const finite = rows.filter((r) => Number.isFinite(r.value));
  if (finite.length === 0) return;
  const values = finite.map((r) => ({ run_id: runId, step: r.step, kind: r.kind, scope: r.scope, name: r.name, value: r.value }));
  await sql`INSERT INTO metrics ${sql(values)} ON CONFLICT (run_id, step, kind, scope, name) DO UPDATE SET value = excluded.value`;
}

export async function readMetrics(sql: Sql, runId: string): Promise<MetricRow[]> {
  const rows = await sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${runId} ORDER BY step, kind, scope, name`;
  return rows.map((r) => ({ step: r.step, kind: r.kind, scope: r.scope, name: r.name, value: r.value }));
}

/** A step's training rewards per agent and component, as its committed updates wrote them (agentRows). */
export async function readStepRewards(sql: Sql, runId: string, step: number): Promise<Record<string, Record<string, number>>> {
  const rows = await sql`
    SELECT scope, name, value FROM metrics WHERE run_id = ${runId} AND step = ${step} AND kind = 'train' AND name LIKE 'reward.%'`;
  const rewards: Record<string, Record<string, number>> = {};
  for (const r of rows) (rewards[r.scope as string] ??= {})[(r.name as string).slice('reward.'.length)] = r.value as number;
  return rewards;
}

/** Merges fields into a step's row (creating it), e.g. phase timings. */
export async function mergeStepMetrics(sql: Sql, runId: string, step: number, status: string, metrics: Record<string, unknown>): Promise<void> {
  await sql`
    INSERT INTO steps (run_id, step, status, metrics, finished_at) VALUES (${runId}, ${step}, ${status}, ${sql.json(metrics as never)}, now())
    ON CONFLICT (run_id, step) DO UPDATE SET status = excluded.status, metrics = steps.metrics || excluded.metrics, finished_at = now()`;
}
