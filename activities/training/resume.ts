/**
 * Where a run continues after a failure: for each model, the last step it
 * handled is its newest committed version's step, or a later step whose update
 * was skipped as non-finite. The run restarts at the earliest step some model
 * has not handled; a model that already committed that step gets its commit
 * back from the idempotent update, so nothing is repeated.
 *
 * Evals are part of the point: an eval counts only once recordEval has summed
 * it after its whole rollout (its `episodes` metric); one interrupted before
 * that is redone (its stored episodes are kept, the rest are run). The
 * optimizer is the last one a setOptimizer change made effective, with the
 * changes accepted after it folded in: a caller was told those succeeded, so a
 * terminate before the step that would have applied them must not lose them.
 */
import type { Sql } from '../../infra/db';
import { applyOptimizerChange, type OptimizerChange, type OptimizerConfig } from '../../schema/optimizer';

export interface ResumePoint {
  startStep: number;
  /** Serving version of each model at startStep. */
  versions: Record<string, number>;
  fresh: boolean;
  /** Steps whose eval finished (recorded), ascending. */
  evals: number[];
  /** The effective optimizer after the last setOptimizer change, if any. */
  optimizer: OptimizerConfig | null;
}

/** `configured`: the run config's optimizer, the base of changes accepted before any took effect. */
/** `frozen`: models that never update (run config `frozen`): they have handled every step, and serve version 0. */
export async function resumePoint(
  sql: Sql,
  runId: string,
  models: readonly string[],
  configured?: OptimizerConfig,
  frozen: readonly string[] = [],
): Promise<ResumePoint> {
  const committed = await sql`SELECT model, max(step) AS step FROM versions WHERE run_id = ${runId} GROUP BY model`;
  const skipped = await sql`SELECT detail->>'model' AS model, max(step) AS step FROM run_events WHERE run_id = ${runId} AND kind = 'update-skipped' GROUP BY 1`;
  const handled = new Map<string, number>();
  for (const r of [...committed, ...skipped]) handled.set(r.model, Math.max(handled.get(r.model) ?? -1, r.step));
  const fresh = committed.length === 0;
  const trained = models.filter((m) => !frozen.includes(m));
  const startStep = fresh ? 0 : Math.min(...trained.map((m) => (handled.get(m) ?? -1) + 1));
  const versions = await versionsBefore(sql, runId, models, startStep);
  const evals = await sql`SELECT step FROM metrics WHERE run_id = ${runId} AND kind = 'eval' AND scope = 'team' AND name = 'episodes' ORDER BY step`;
  return { startStep, versions, fresh, evals: evals.map((r) => r.step as number), optimizer: await effectiveOptimizer(sql, runId, configured) };
}

/**
 * Steps before `startStep` left `committed`: every model's update of the step was committed, but the
 * execution ended (terminated, say) before the step's bookkeeping marked it completed. The resumed run
 * starts after them and never finishes them, so they are completed here (their updates, versions and
 * rewards are in the store; only the step's timings, measured by the ended execution, are not).
 */
export async function completeCommittedSteps(sql: Sql, runId: string, startStep: number): Promise<number[]> {
  const rows = await sql`
    UPDATE steps SET status = 'completed', finished_at = coalesce(finished_at, now())
    WHERE run_id = ${runId} AND step < ${startStep} AND status = 'committed'
    RETURNING step`;
  return rows.map((r) => r.step as number).sort((a, b) => a - b);
}

/**
 * The last optimizer a step applied, then each change accepted later, in order. A step
 * applies every change accepted before it starts, so an accepted change is still pending
 * iff no step at or after its effective step applied changes.
 */
async function effectiveOptimizer(sql: Sql, runId: string, configured: OptimizerConfig | undefined): Promise<OptimizerConfig | null> {
  const [changed] =
    await sql`SELECT step, detail->'optimizer' AS optimizer FROM run_events WHERE run_id = ${runId} AND kind = 'optimizer-changed' ORDER BY id DESC LIMIT 1`;
  const applied = (changed?.optimizer as OptimizerConfig | undefined) ?? null;
  const pending = await sql`
    SELECT detail->'change' AS change FROM run_events
    WHERE run_id = ${runId} AND kind = 'optimizer-change-accepted' AND (detail->>'effectiveStep')::int > ${(changed?.step as number | undefined) ?? -1}
    ORDER BY id`;
  const base = applied ?? configured;
  if (pending.length === 0 || base === undefined) return applied;
  return pending.map((r) => r.change as OptimizerChange).reduce(applyOptimizerChange, base);
}

/** Each model's serving version at a step: its newest version committed before it (0 when none). */
export async function versionsBefore(sql: Sql, runId: string, models: readonly string[], step: number): Promise<Record<string, number>> {
  const versions: Record<string, number> = {};
  for (const m of models) {
    const [row] = await sql`SELECT max(version) AS v FROM versions WHERE run_id = ${runId} AND model = ${m} AND step < ${step}`;
    versions[m] = row?.v ?? 0;
  }
  return versions;
}
