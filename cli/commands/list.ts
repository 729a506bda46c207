// troupe list: training runs, one row per run (its latest execution), from Temporal's visibility and Troupe's search attributes.
import type { Client } from '@temporalio/client';
import { defineCommand } from '../command';
import { OPEN_RUN_STATUSES, phaseAfterClose, reconcileRunEnds } from '../../activities/store/run-end';
import { connectRuns } from '../../control/runs';

export default defineCommand({
  name: 'list',
  summary: 'List training runs',
  usage: 'troupe list [--json] [--limit N]',
  options: {
    json: { type: 'boolean', description: 'one JSON object per line' },
    limit: { type: 'string', valueName: 'N', description: 'at most N runs (default 20)', default: '20' },
  },
  async run({ values, log }) {
    const c = await connectRuns(log);
    try {
      const limit = Math.max(1, Number(values.limit) || 20);
      const rows = latestExecutions(await executions(c.client, limit)).map((r) => ({ ...r, phase: phaseAfterClose(r.status, r.phase) }));
      // the store agrees (the dashboard reads it): record the end of runs whose workflow closed without recording it
      if (rows.length > 0)
        await reconcileRunEnds(
          c.sql,
          c.client,
          await c.sql`SELECT run_id AS "runId", status FROM runs WHERE run_id IN ${c.sql(rows.map((r) => r.workflowId))} AND status IN ${c.sql([...OPEN_RUN_STATUSES])}`,
        );
      // lineage from the store: a fork names the run and step it came from
      const forks = new Map<string, { run: string; step: number }>();
      if (rows.length > 0)
        for (const f of await c.sql`SELECT run_id, config->'fork' AS fork FROM runs WHERE run_id IN ${c.sql(rows.map((r) => r.workflowId))} AND config ? 'fork'`)
          forks.set(f.run_id as string, f.fork as { run: string; step: number });
      if (values.json) for (const r of rows) console.log(JSON.stringify({ ...r, forkedFrom: forks.get(r.workflowId) ?? null }));
      else {
        console.log(`${'run'.padEnd(36)} ${'team'.padEnd(9)} ${'workflow'.padEnd(11)} ${'phase'.padEnd(10)} step  eval   started`);
        for (const r of rows)
          console.log(
            `${String(r.workflowId).padEnd(36)} ${String(r.team ?? '-').padEnd(9)} ${String(r.status).padEnd(11)} ${String(r.phase ?? '-').padEnd(10)} ${String(r.step ?? '-').padStart(4)}  ${typeof r.evalSuccess === 'number' ? r.evalSuccess.toFixed(2) : ' -  '}   ${r.started}${forkNote(forks.get(r.workflowId))}`,
          );
        if (rows.length === 0) console.log('(no runs yet: npx troupe train math)');
      }
      return 0;
    } finally {
      await c.close();
    }
  },
});

/** The end of a forked run's line in `troupe list`. */
const forkNote = (f: { run: string; step: number } | undefined) => (f ? `  forked from ${f.run} at step ${f.step}` : '');

export interface ExecutionRow {
  run: string;
  workflowId: string;
  status: string;
  team?: unknown;
  step?: unknown;
  phase?: unknown;
  evalSuccess?: unknown;
  started: string;
  /** Whether the execution worked on the run (set TroupeRunId); a refused start or a bad config did not. */
  ranTheRun: boolean;
}

/** Executions of trainingRun, running then most recently closed first (visibility's order), enough to find `limit` runs. */
async function executions(client: Client, limit: number): Promise<ExecutionRow[]> {
  const out: ExecutionRow[] = [];
  const runs = new Set<string>();
  for await (const w of client.workflow.list({ query: `WorkflowType = 'trainingRun'` })) {
    const get = (name: string) => w.typedSearchAttributes.getAll().find((p) => p.key.name === name)?.value;
    const runId = get('TroupeRunId');
    const run = typeof runId === 'string' ? runId : w.workflowId;
    if (!runs.has(run) && runs.size >= limit) break;
    runs.add(run);
    out.push({
      run,
      workflowId: w.workflowId,
      status: w.status.name,
      team: get('TroupeTeam'),
      step: get('TroupeStep'),
      phase: get('TroupeStatus'),
      evalSuccess: get('TroupeEvalSuccess'),
      started: w.startTime.toISOString(),
      ranTheRun: typeof runId === 'string',
    });
  }
  return out;
}

/**
 * One row per run: its newest execution that worked on it (continued-as-new and
 * resumed executions collapse into the run); a start that never ran it shows
 * only when nothing else carries its id.
 */
export function latestExecutions(newestFirst: readonly ExecutionRow[]): Array<Omit<ExecutionRow, 'run' | 'ranTheRun'>> {
  const best = new Map<string, ExecutionRow>();
  for (const e of newestFirst) {
    const seen = best.get(e.run);
    if (!seen || (!seen.ranTheRun && e.ranTheRun)) best.set(e.run, e);
  }
  return [...best.values()].map(({ run: _run, ranTheRun: _ran, ...row }) => row);
}
