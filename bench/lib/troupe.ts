/**
 * Running one training job through Troupe on a bench stack (the integration
 * test harness: a real Temporal dev server, a fresh Postgres database, the
 * control worker and a pool worker with a CPU engine, all started here), and
 * reading back what it did: per-step wall time and activity spans from the
 * workflow history, step metrics and gradient norms from Postgres.
 */
import type { Harness } from '../../testing/stack';
import type { RunConfigInput } from '../../schema/run-config';
import type { RunSummary } from '../../workflows/training-run';
import { stepSpans, type History, type StepSpans } from './history';

export interface TroupeStep {
  step: number;
  /** planStep scheduled -> next activity scheduled after finishStep (seconds) */
  seconds: number;
  spans: StepSpans;
  metrics: Record<string, number>;
  gradNorm: Record<string, number>;
}

export interface TroupeResult {
  runId: string;
  wallSeconds: number;
  summary: RunSummary;
  steps: TroupeStep[];
  evals: Array<{ step: number; success: number }>;
  history: History;
}

export async function runTroupe(h: Harness, input: RunConfigInput & { runId: string }): Promise<TroupeResult> {
  const t0 = performance.now();
  const handle = await h.env.client.workflow.start('trainingRun', { taskQueue: h.taskQueue, workflowId: input.runId, args: [input] });
  const summary = (await handle.result()) as RunSummary;
  const wallSeconds = (performance.now() - t0) / 1000;
  const history = await handle.fetchHistory();
  const spans = stepSpans(history);
  const sql = h.db.sql;
  const rows = await sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${input.runId}`;
  const steps: TroupeStep[] = spans.map((s) => {
    const mine = rows.filter((r) => r.step === s.step);
    return {
      step: s.step,
      seconds: (s.end - s.start) / 1000,
      spans: s,
      metrics: Object.fromEntries(mine.filter((r) => r.kind === 'train' && r.scope === 'team').map((r) => [r.name, r.value])),
      gradNorm: Object.fromEntries(mine.filter((r) => r.kind === 'update' && r.name === 'gradNorm').map((r) => [r.scope, r.value])),
    };
  });
  const evals = rows
    .filter((r) => r.kind === 'eval' && r.scope === 'team' && r.name === 'success')
    .map((r) => ({ step: r.step as number, success: r.value as number }))
    .sort((a, b) => a.step - b.step);
  return { runId: input.runId, wallSeconds, summary, steps, evals, history };
}
