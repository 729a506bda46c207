// troupe train <team>: bring the stack up, start a trainingRun workflow, watch it, summarise, plot.
import * as path from 'node:path';
import { loadConfig } from '../../infra/config';
import { TroupeError } from '../../infra/errors';
import { mergeOverrides, type OptimizerOverrides } from '../../schema/optimizer';
import type { RunConfigInput } from '../../schema/run-config';
import { defineCommand } from '../command';
import { connectRuns, readConfigFile, startTrainingRun, summaryJson, summaryLines, validateRunConfig, watchRun } from '../runs';
import { writePlot } from '../plot';
import { up } from './up';

function intFlag(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new TroupeError(`--${name}: expected a number, got ${JSON.stringify(v)}`, `e.g. --${name} 10`);
  return n;
}

export function runIdFor(team: string, now = new Date()): string {
  const t = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `${team}-${t}-${Math.random().toString(36).slice(2, 6)}`;
}

export default defineCommand({
  name: 'train',
  summary: 'Train a team: bring the stack up, start a trainingRun workflow and show its progress',
  usage: 'troupe train <team> [options]',
  description: [
    'Starts the trainingRun workflow on the control task queue with a run config built from',
    '--config (a JSON file) and the flags below (flags win), shows a live progress line, and',
    'ends with a summary (and with --json one JSON object as the last line of stdout).',
    'The run keeps going if you press Ctrl-C: watch it again with `troupe status <run> --watch`.',
    'Teams: see agents/teams/index.ts (bundled: math, research).',
  ].join('\n'),
  positionals: true,
  options: {
    config: { type: 'string', valueName: 'FILE', description: 'run config JSON (see README: run config)' },
    steps: { type: 'string', valueName: 'N', description: 'training steps' },
    groups: { type: 'string', valueName: 'N', description: 'task groups per step' },
    'group-size': { type: 'string', valueName: 'G', description: 'episodes per task group' },
    rollout: { type: 'string', valueName: 'MODE', description: 'batched (default) or durable' },
    estimator: { type: 'string', valueName: 'NAME', description: 'grpo, mc-grpo, gdpo, rloo, reinforce++-baseline' },
    scope: { type: 'string', valueName: 'SCOPE', description: 'group-agent (Dr. MAS, default), group, batch' },
    lr: { type: 'string', valueName: 'X', description: 'learning rate of every model' },
    seed: { type: 'string', valueName: 'N', description: 'run seed' },
    'eval-every': { type: 'string', valueName: 'N', description: 'eval on held-out tasks every N steps' },
    'team-options': { type: 'string', valueName: 'JSON', description: 'options of the team, e.g. {"models":"separate"}' },
    'run-id': { type: 'string', valueName: 'ID', description: 'run id (default: <team>-<time>-<rand>)' },
    json: { type: 'boolean', description: 'print the summary as one JSON object on the last line of stdout' },
    'no-plot': { type: 'boolean', description: 'do not write the learning-curve plot' },
    detach: { type: 'boolean', description: 'start the run and return at once' },
  },
  async run({ values, positionals, log }) {
    const team = positionals[0];
    if (!team || positionals.length > 1) throw new TroupeError('train: name one team', 'e.g. npx troupe train math');
    const fromFile = values.config ? readConfigFile(values.config) : {};
    let teamOptions: Record<string, unknown> | undefined;
    if (values['team-options']) {
      try {
        teamOptions = JSON.parse(values['team-options']);
      } catch {
        throw new TroupeError('--team-options: not JSON', `e.g. --team-options '{"models":"separate"}'`);
      }
    }
    const estimator = values.estimator || values.scope ? { ...(values.estimator ? { name: values.estimator } : {}), ...(values.scope ? { scope: values.scope } : {}) } : undefined;
    const fileOptimizer = (fromFile.optimizer ?? {}) as Record<string, any>;
    const all = mergeOverrides(fileOptimizer.all, { ...(values.lr ? { lr: intFlag('lr', values.lr) } : {}), ...(estimator ? { estimator } : {}) } as OptimizerOverrides);
    const input: RunConfigInput = {
      ...(fromFile as RunConfigInput),
      team,
      ...(teamOptions ? { teamOptions } : {}),
      ...(values.steps ? { steps: intFlag('steps', values.steps) } : {}),
      ...(values.groups ? { groupsPerStep: intFlag('groups', values.groups) } : {}),
      ...(values['group-size'] ? { groupSize: intFlag('group-size', values['group-size']) } : {}),
      ...(values.rollout ? { rollout: values.rollout as 'batched' } : {}),
      ...(values.seed ? { seed: intFlag('seed', values.seed) } : {}),
      ...(values['eval-every'] ? { evalEvery: intFlag('eval-every', values['eval-every']) } : {}),
      ...(Object.keys(all).length > 0 ? { optimizer: { ...fileOptimizer, all } } : {}),
    };
    const runId = values['run-id'] ?? (fromFile.runId as string | undefined) ?? runIdFor(team);
    const config = validateRunConfig({ ...input, runId });

    const started = Date.now();
    const stack = await up(loadConfig(), { log });
    if (!stack.ok) throw new TroupeError('the stack did not come up completely', stack.lines.join('; '));
    const c = await connectRuns(log);
    try {
      const handle = await startTrainingRun(c.client, c.config.taskQueue, config);
      log(`troupe: started run ${runId} (${config.steps} steps x ${config.groupsPerStep} groups x ${config.groupSize} episodes, ${config.rollout} rollouts)`);
      if (stack.result.uiUrl) log(`troupe: watch it in the Web UI: ${stack.result.uiUrl}/namespaces/${c.config.namespace}/workflows/${encodeURIComponent(runId)}`);
      if (values.detach) {
        console.log(values.json ? JSON.stringify({ runId, workflowId: runId }) : runId);
        return 0;
      }
      const summary = await watchRun(handle);
      const wallSeconds = (Date.now() - started) / 1000;
      for (const l of summaryLines(summary, wallSeconds)) console.log(l);
      let plot: { png: string; svg: string } | undefined;
      if (!values['no-plot']) {
        plot = await writePlot(c.sql, runId, path.join(c.config.stateDir, 'runs', runId));
        console.log(`  plot: ${plot.png} (and .svg)`);
      }
      console.log('The stack is still up (Web UI, workers); stop it with: npx troupe down');
      if (values.json) console.log(JSON.stringify(summaryJson(summary, wallSeconds, plot ? { plot } : {})));
      return summary.status === 'completed' || summary.status === 'stopped' ? 0 : 1;
    } finally {
      await c.close();
    }
  },
});
