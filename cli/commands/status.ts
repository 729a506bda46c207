// troupe status <run>: the live state of a run (status query), or its stored record once closed.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { TroupeError, errorMessage } from '../../infra/errors';
import { TroupeRunId } from '../../infra/search-attributes';
import { episodeProblems } from '../../activities/store/trajectories';
import { getRun } from '../../activities/store/runs';
import { reconcileRunEnds } from '../../activities/store/run-end';
import { listVersions } from '../../activities/store/versions';
import { STALENESS_TOKENS } from '../../activities/training/off-policy';
import { describeModel } from '../../engines/families';
import { CORRECTIONS, DEFAULT_BAND, DEFAULT_CORRECTION } from '../../rl';
import { lineageLines, lineageOf, offPolicyOf, parseRunConfig } from '../../schema/run-config';
import { pipelineStatusQuery, statusQuery } from '../../workflows/definitions';
import { isPipeline, pipelineLines } from '../../control/pipelines';
import type { trainingRun } from '../../workflows/training-run';
import { defineCommand } from '../command';
import { connectRuns, innermostCause, progressLine, watchRun } from '../../control/runs';
import { problemLines, trained } from '../summary';

export interface AgentStep {
  step: number;
  rewards: Record<string, number>;
  truncatedShare?: number;
  failedShare?: number;
}

/** Per agent, its latest train step's reward components and episode endings. */
export function latestAgentSteps(rows: ReadonlyArray<{ step: number; scope: string; name: string; value: number }>): Record<string, AgentStep> {
  const out: Record<string, AgentStep> = {};
  for (const r of [...rows].sort((a, b) => a.step - b.step)) {
    if (r.scope === 'team') continue;
    const isReward = r.name.startsWith('reward.');
    if (!isReward && r.name !== 'truncatedShare' && r.name !== 'failedShare') continue;
    if (!out[r.scope] || out[r.scope]!.step < r.step) out[r.scope] = { step: r.step, rewards: {} };
    const a = out[r.scope]!;
    if (isReward) a.rewards[r.name.slice('reward.'.length)] = r.value;
    else a[r.name as 'truncatedShare' | 'failedShare'] = r.value;
  }
  return out;
}

const pct = (v: number | undefined) => (v === undefined ? '-' : `${Math.round(v * 100)}%`);

export function agentStepLine(agent: string, a: AgentStep): string {
  const rewards =
    Object.entries(a.rewards)
      .map(([k, v]) => `${k}=${v.toFixed(3)}`)
      .join(' ') || '-';
  return `${agent} (step ${a.step}): reward ${rewards}  truncated ${pct(a.truncatedShare)}  failed ${pct(a.failedShare)}`;
}

/**
 * The off-policy metrics an asynchronous run's update stores per agent and per model
 * (activities/training/off-policy.ts), with the clip fraction; behaviourKl is mismatch_kl's
 * name in runs stored before corrections were selectable. Plus the staleness histogram.
 */
export const OFF_POLICY_METRICS = [
  'staleness',
  'isWeight.mean',
  'isWeight.max',
  'isWeight.truncated',
  'isWeight.masked',
  'mismatch_kl',
  'behaviourKl',
  'clipFraction',
] as const;

/** One agent's or model's correction at a step: `who` is the agent, or `model <name>` with its correction. */
export function offPolicyLine(who: string, step: number, m: Record<string, number>): string {
  const f = (name: string, digits = 3) => (m[name] === undefined ? '-' : m[name]!.toFixed(digits));
  const kl = m.mismatch_kl ?? m.behaviourKl;
  const lags = Object.entries(m)
    .filter(([k]) => k.startsWith(STALENESS_TOKENS))
    .map(([k, n]) => [Number(k.slice(STALENESS_TOKENS.length)), n] as const)
    .sort(([a], [b]) => a - b);
  const histogram = lags.length === 0 ? '' : ` (tokens by lag ${lags.map(([lag, n]) => `${lag}:${n}`).join(' ')})`;
  return `${who} (step ${step}): staleness ${f('staleness', 2)}${histogram}  IS weight mean ${f('isWeight.mean')} max ${f('isWeight.max')} truncated ${pct(m['isWeight.truncated'])} masked ${pct(m['isWeight.masked'])}  mismatch KL ${kl === undefined ? '-' : kl.toExponential(2)}  clip ${pct(m.clipFraction)}`;
}

/** A partial-rollout step (team rows `partial.*`, workflows/training-run/steps.ts): what it ran and what it carried on. */
export function partialLine(step: number, m: Record<string, number>): string {
  const n = (name: string) => (m[`partial.${name}`] === undefined ? '-' : String(m[`partial.${name}`]));
  return `partial rollouts (step ${step}): groups ${n('groups')} in ${n('rounds')} rounds  carried ${n('carriedEpisodes')} episodes in ${n('carriedGroups')} groups, oldest ${n('carriedMaxAge')} steps  trained oldest ${n('trainedMaxAge')} steps, held ${n('heldGroups')} groups  tokens sampled ${n('generatedTokens')}, served from the store ${n('replayedTokens')}`;
}

/** Model m's correction as the stored run config sets it ('' when the config no longer parses). */
export function correctionLabel(config: unknown, model: string): string {
  try {
    const s = offPolicyOf(parseRunConfig(config), model);
    const name = s.correction ?? DEFAULT_CORRECTION;
    return CORRECTIONS[name].uses.includes('band') ? `${name} band [${(s.band ?? DEFAULT_BAND).join(', ')}]` : `${name} cap ${s.importanceCap}`;
  } catch {
    return '';
  }
}

/** The newest execution under the run's id that worked on the run (set TroupeRunId). */
async function executionThatRan(client: Client, runId: string): Promise<{ status: string; runId: string } | undefined> {
  const quoted = JSON.stringify(runId);
  for await (const w of client.workflow.list({ query: `WorkflowId = ${quoted} AND TroupeRunId = ${quoted}` })) return { status: w.status.name, runId: w.runId };
  return undefined;
}

export default defineCommand({
  name: 'status',
  summary: 'Show the state of a training run',
  usage: 'troupe status <run | pipeline> [--json] [--watch]',
  positionals: true,
  options: {
    json: { type: 'boolean', description: 'print one JSON object' },
    watch: { type: 'boolean', description: 'follow the run until it closes' },
  },
  async run({ values, positionals, log }) {
    const runId = positionals[0];
    if (!runId) throw new TroupeError('status: name a run', 'list runs with `npx troupe list`');
    const c = await connectRuns(log);
    try {
      // a run stored as open whose workflow closed without recording its end (terminated, timed out): record it first
      const stored = await getRun(c.sql, runId);
      if (!stored && (await isPipeline(c, runId))) {
        const view = await c.client.workflow.getHandle(runId).query(pipelineStatusQuery);
        if (values.json) console.log(JSON.stringify(view));
        else for (const l of pipelineLines(view)) console.log(l);
        return 0;
      }
      if (stored) await reconcileRunEnds(c.sql, c.client, [{ runId, status: stored.status }]);
      const run = stored && (await getRun(c.sql, runId));
      const handle = c.client.workflow.getHandle<typeof trainingRun>(runId);
      let execution: { status: string; runId: string } | undefined;
      /** The newest start under this id, when it was refused (the id was taken) and so never worked on the run. */
      let refusedStart: { status: string; at: string; reason: string } | undefined;
      try {
        const d = await handle.describe();
        execution = { status: d.status.name, runId: d.runId };
        if (run && d.typedSearchAttributes.get(TroupeRunId) === undefined && d.status.name !== 'RUNNING') {
          const reason = await c.client.workflow
            .getHandle(runId, d.runId)
            .result()
            .then(
              () => '',
              (e: unknown) => errorMessage(innermostCause(e)),
            );
          refusedStart = { status: d.status.name, at: d.startTime.toISOString(), reason };
          execution = await executionThatRan(c.client, runId);
        }
      } catch (e) {
        if (!(e instanceof WorkflowNotFoundError)) throw e;
      }
      if (!run && !execution) throw new TroupeError(`no run ${runId} in Temporal or the store`, 'list runs with `npx troupe list`');
      if (values.watch && execution?.status === 'RUNNING') {
        await watchRun(handle);
        return 0;
      }
      const live = execution?.status === 'RUNNING' ? await handle.query(statusQuery).catch(() => undefined) : undefined;
      const versions = await listVersions(c.sql, runId);
      const latest: Record<string, number> = {};
      for (const v of versions) latest[v.model] = Math.max(latest[v.model] ?? 0, v.version);
      const specs = await c.sql`SELECT DISTINCT ON (model) model, spec FROM versions WHERE run_id = ${runId} ORDER BY model, version`;
      const models = Object.fromEntries(specs.map((r) => [r.model as string, describeModel(r.spec)]));
      const evals =
        await c.sql`SELECT step, value FROM metrics WHERE run_id = ${runId} AND kind = 'eval' AND scope = 'team' AND name = 'success' ORDER BY step`;
      const events = await c.sql`SELECT step, kind, detail, at FROM run_events WHERE run_id = ${runId} ORDER BY id`;
      const agentRows =
        await c.sql`SELECT step, scope, name, value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND (name LIKE 'reward.%' OR name IN ('truncatedShare', 'failedShare'))`;
      const agents = latestAgentSteps(agentRows.map((r) => ({ step: r.step, scope: r.scope, name: r.name, value: r.value })));
      // per-agent policy entropy of the last committed step: a role collapsing onto one answer shows as ~0
      const entropyRows = await c.sql`SELECT step, scope, value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND name = 'entropy'
        AND step = (SELECT max(step) FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND name = 'entropy') ORDER BY scope`;
      // Asynchronous runs: the last step's off-policy correction per agent (train rows) and per model (update rows).
      const offRows = await c.sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${runId} AND kind IN ('train', 'update')
        AND (name IN ${c.sql([...OFF_POLICY_METRICS])} OR name LIKE ${STALENESS_TOKENS + '%'})
        AND step = (SELECT max(step) FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND name = 'staleness')`;
      const offPolicy =
        offRows.length === 0
          ? null
          : { step: offRows[0]!.step as number, models: {} as Record<string, Record<string, number>>, agents: {} as Record<string, Record<string, number>> };
      for (const r of offRows) (offPolicy![r.kind === 'update' ? 'models' : 'agents'][r.scope as string] ??= {})[r.name as string] = r.value as number;
      // a model's update rows exist in sync runs too: only models with a correction (a staleness row) count
      if (offPolicy) for (const [m, x] of Object.entries(offPolicy.models)) if (x.staleness === undefined) delete offPolicy.models[m];
      // Runs with partial rollouts: the last step's carried episodes and tokens.
      const partialRows =
        await c.sql`SELECT step, name, value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND scope = 'team' AND name LIKE 'partial.%'
        AND step = (SELECT max(step) FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND scope = 'team' AND name = 'partial.groups')`;
      const partial =
        partialRows.length === 0
          ? null
          : { step: partialRows[0]!.step as number, metrics: Object.fromEntries(partialRows.map((r) => [r.name as string, r.value as number])) };
      const problems = await episodeProblems(c.sql, runId);
      const out = {
        runId,
        team: run?.team,
        stored: run?.status,
        lineage: lineageOf(run?.config),
        workflow: execution?.status ?? 'not found',
        ...(refusedStart ? { refusedStart } : {}),
        live: live ?? null,
        versions: latest,
        models,
        evals: evals.map((e) => ({ step: e.step, success: e.value })),
        agents,
        events: events.map((e) => ({ step: e.step, kind: e.kind, detail: e.detail })),
        problems,
        offPolicy,
        partial,
        entropy:
          entropyRows.length === 0
            ? null
            : { step: entropyRows[0]!.step as number, agents: Object.fromEntries(entropyRows.map((r) => [r.scope as string, r.value as number])) },
      };
      if (values.json) {
        console.log(JSON.stringify(out));
        return 0;
      }
      console.log(`run ${runId}  team ${out.team ?? '?'}  workflow ${out.workflow}  store ${out.stored ?? '-'}`);
      if (refusedStart)
        console.log(`  a later start under this id was refused (${refusedStart.status} at ${refusedStart.at}): ${refusedStart.reason}; the run is unchanged`);
      for (const l of lineageLines(out.lineage)) console.log(`  ${l}`);
      if (live) console.log('  ' + progressLine(live));
      console.log(
        `  versions: ${
          Object.entries(latest)
            .map(([m, v]) => `${m} v${v}`)
            .join(', ') || '-'
        }`,
      );
      for (const [m, d] of Object.entries(models)) console.log(`  model ${m}: ${d}`);
      console.log(`  eval success: ${out.evals.map((e) => `step ${e.step}: ${e.success.toFixed(3)}`).join(', ') || '-'}`);
      for (const [agent, a] of Object.entries(agents)) console.log(`  ${agentStepLine(agent, a)}`);
      for (const l of problemLines(problems)) console.log(l);
      if (Object.keys(latest).length > 0 && !trained(latest) && (out.stored === 'completed' || out.stored === 'stopped'))
        console.log('  never trained: every model is still at version 0');
      if (out.entropy)
        console.log(
          `  policy entropy at step ${out.entropy.step}: ${Object.entries(out.entropy.agents)
            .map(([a, h]) => `${a} ${h.toFixed(2)}`)
            .join(', ')}`,
        );
      if (offPolicy) {
        for (const [model, m] of Object.entries(offPolicy.models)) {
          const label = correctionLabel(run?.config, model);
          console.log(`  off-policy ${offPolicyLine(`model ${model}${label ? ` [${label}]` : ''}`, offPolicy.step, m)}`);
        }
        for (const [agent, m] of Object.entries(offPolicy.agents)) console.log(`  off-policy ${offPolicyLine(agent, offPolicy.step, m)}`);
      }
      if (partial) console.log(`  off-policy ${partialLine(partial.step, partial.metrics)}`);
      for (const e of out.events) console.log(`  event at step ${e.step}: ${e.kind} ${JSON.stringify(e.detail)}`);
      return 0;
    } finally {
      await c.close();
    }
  },
});
