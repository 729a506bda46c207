// troupe train <team>: bring the stack up, start a trainingRun workflow, watch it, summarise, plot.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig } from '../../infra/config';
import { TroupeError, errorMessage } from '../../infra/errors';
import type { WorkflowHandle } from '@temporalio/client';
import { episodeProblems, type EpisodeProblems } from '../../activities/store/trajectories';
import { mergeOverrides, type OptimizerOverrides } from '../../schema/optimizer';
import type { RunConfig, RunConfigInput } from '../../schema/run-config';
import { defineCommand, type OptionSpecs, type OptionValues } from '../command';
import { connectRuns, validateRunConfig, watchRun, type Connected } from '../../control/runs';
import { runIdFor, startNewRun } from '../../control/run-id';
import { checkInitSourcesOf } from '../../control/fork';
import { problemLines, readConfigFile, runExitCode, summaryJson, summaryLines, type RunTimes } from '../summary';
import { writePlot } from '../../activities/store/plot';
import { upWithCurrentTeams } from '../teams';
import { activeProject } from '../../processes/project';
import { MAX_LISTED, typeCheckTeam } from '../../processes/type-check';
import { loadTeam, teams } from '../../agents/team-registry';
import { ESTIMATOR_NAMES } from '../../rl/advantages/registry';

/** The --json line of a run that did not end with a summary: its workflow status as Temporal has it, and why. */
export async function failureJson(handle: WorkflowHandle, team: string, error: unknown, times: RunTimes, problems?: EpisodeProblems) {
  const status = await handle.describe().then(
    (d) => d.status.name.toLowerCase(),
    () => 'unknown',
  );
  return {
    runId: handle.workflowId,
    workflowId: handle.workflowId,
    team,
    status,
    error: errorMessage(error),
    ...(problems ? { problems } : {}),
    wallSeconds: times.runSeconds + times.setupSeconds,
    ...times,
  };
}

/** train's options (fork takes them too, as changes to the run it forks). */
export const trainOptions = {
  config: { type: 'string', valueName: 'FILE', description: 'run config JSON (see docs/running.md, "The run config")' },
  steps: { type: 'number', valueName: 'N', example: '40', description: 'training steps' },
  groups: { type: 'number', valueName: 'N', example: '16', description: 'task groups per step' },
  'group-size': { type: 'number', valueName: 'G', example: '8', description: 'episodes per task group' },
  rollout: { type: 'string', valueName: 'MODE', description: 'batched (default) or durable' },
  estimator: { type: 'string', valueName: 'NAME', description: `${ESTIMATOR_NAMES.join(', ')}, or one the project defines (defineEstimator)` },
  scope: { type: 'string', valueName: 'SCOPE', description: 'group-agent (Dr. MAS, default), group, group-agent-episode, batch' },
  lr: { type: 'number', valueName: 'X', example: '0.001', description: 'learning rate of every model' },
  seed: { type: 'number', valueName: 'N', example: '0', description: 'run seed' },
  'eval-every': { type: 'number', valueName: 'N', example: '10', description: 'eval on held-out tasks every N steps' },
  staleness: {
    type: 'number',
    valueName: 'K',
    example: '1',
    description: 'asynchronous RL: step t samples the version of step t-K while updates run (0: synchronous)',
  },
  'sample-pool': {
    type: 'string',
    valueName: 'POOL',
    description: 'the pool every model samples on (rollouts); also trains on unless --train-pool (run config pools)',
  },
  'train-pool': {
    type: 'string',
    valueName: 'POOL',
    description:
      'the pool every model trains on (version 0, updates), e.g. a PyTorch pool behind an ONNX sampler; the sampler loads each new version from the store',
  },
  'sft-from': {
    type: 'string',
    valueName: 'RUN',
    description: "supervised fine-tuning: each step trains on a batch of run RUN's stored turns instead of a rollout (run config sft)",
  },
  'sft-jsonl': {
    type: 'string',
    valueName: 'FILE',
    description: 'supervised fine-tuning on a JSONL file of conversations ({"agent", "messages"} a line) instead of a rollout (run config sft.jsonl)',
  },
  'sft-min-reward': { type: 'number', valueName: 'X', example: '1', description: 'with --sft-from: only turns whose own reward is at least X' },
  'sft-batch': { type: 'number', valueName: 'N', example: '64', description: 'with --sft-from: turns per step (default 64)' },
  model: {
    type: 'string',
    valueName: 'DIR',
    description:
      'a Hugging Face-layout directory every model of the team starts from: version 0 = its weights, its tokenizer.json if any (sets teamOptions.checkpoint, checkpointTokenizer)',
  },
  'team-options': { type: 'string', valueName: 'JSON', description: 'options of the team, e.g. {"models":"separate"}' },
  'run-id': { type: 'string', valueName: 'ID', description: 'run id (default: <team>-<time>-<rand>)' },
  json: { type: 'boolean', description: 'print the summary as one JSON object on the last line of stdout' },
  'no-plot': { type: 'boolean', description: 'do not write the learning-curve plot' },
  detach: { type: 'boolean', description: 'start the run and return at once' },
  'skip-type-check': { type: 'boolean', description: "in a project: start even if the team's files have type errors" },
} satisfies OptionSpecs;

export default defineCommand({
  name: 'train',
  summary: 'Train a team: bring the stack up, start a trainingRun workflow and show its progress',
  usage: 'troupe train <team> [options] | troupe train --config FILE [options]',
  description: () =>
    [
      'Starts the trainingRun workflow on the control task queue with a run config built from',
      '--config (a JSON file) and the flags below (flags win), shows a live progress line, and',
      'ends with a summary (and with --json one JSON object as the last line of stdout).',
      'Exit status: 0 when the run completed and trained (some model past version 0); 1 when it',
      'failed, was stopped or terminated, or completed without training (the summary says why).',
      'The team: <team>, else the --config file\'s "team" (both may name it, only the same one).',
      'The run keeps going if you press Ctrl-C: watch it again with `troupe status <run> --watch`.',
      `Teams: ${Object.keys(teams).join(', ') || '(none)'}${activeProject() ? ` (the project's, from ${activeProject()!.configFile})` : ''}.`,
    ].join('\n'),
  positionals: true,
  options: trainOptions,
  async run({ values, positionals, log }) {
    const fromFile = values.config ? readConfigFile(values.config) : {};
    const team = teamToTrain(positionals, fromFile, values.config);
    const input = runConfigInput(values, fromFile, team);
    const runId = values['run-id'] ?? (fromFile.runId as string | undefined) ?? runIdFor(team);
    const config = validateRunConfig({ ...input, runId });
    if (!values['skip-type-check']) refuseTypeErrors(team, log);
    return startAndWatch(values, log, async (c) => {
      // init, fork or sft: their sources are checked against the store before anything starts
      await checkInitSourcesOf(c.sql, config);
      return { ...config, runId };
    });
  },
});

type TrainValues = OptionValues<typeof trainOptions>;

/** The run config the flags make of `fromFile` (a --config file, or the run a fork starts from): flags win. */
export function runConfigInput(values: TrainValues, fromFile: Record<string, unknown>, team: string): RunConfigInput {
  let teamOptions: Record<string, unknown> | undefined;
  if (values['team-options']) {
    try {
      teamOptions = JSON.parse(values['team-options']);
    } catch {
      throw new TroupeError('--team-options: not JSON', `e.g. --team-options '{"models":"separate"}'`);
    }
  }
  // absolute: the workers that read it may run in another directory
  if (values.model !== undefined) {
    const dir = path.resolve(values.model);
    // the directory's own tokenizer when it has one; else the team's (its vocabulary must fit the checkpoint's)
    const checkpointTokenizer = fs.existsSync(path.join(dir, 'tokenizer.json'));
    teamOptions = { ...(fromFile.teamOptions as Record<string, unknown> | undefined), ...teamOptions, checkpoint: dir, checkpointTokenizer };
  }
  const estimator =
    values.estimator || values.scope
      ? { ...(values.estimator ? { name: values.estimator } : {}), ...(values.scope ? { scope: values.scope } : {}) }
      : undefined;
  const fileOptimizer = (fromFile.optimizer ?? {}) as { all?: OptimizerOverrides };
  const all = mergeOverrides(fileOptimizer.all, {
    ...(values.lr !== undefined ? { lr: values.lr } : {}),
    ...(estimator ? { estimator } : {}),
  } as OptimizerOverrides);
  const input: RunConfigInput = {
    ...(fromFile as RunConfigInput),
    team,
    ...(teamOptions ? { teamOptions } : {}),
    ...(values.steps !== undefined ? { steps: values.steps } : {}),
    ...(values.groups !== undefined ? { groupsPerStep: values.groups } : {}),
    ...(values['group-size'] !== undefined ? { groupSize: values['group-size'] } : {}),
    ...(values.rollout ? { rollout: values.rollout as 'batched' } : {}),
    ...(values.seed !== undefined ? { seed: values.seed } : {}),
    ...(values['eval-every'] !== undefined ? { evalEvery: values['eval-every'] } : {}),
    ...(values.staleness !== undefined ? { staleness: values.staleness } : {}),
    ...(Object.keys(all).length > 0 ? { optimizer: { ...fileOptimizer, all } } : {}),
  };
  const sft = sftInput(values, fromFile.sft as RunConfigInput['sft']);
  if (sft) input.sft = sft;
  if (values['sample-pool'] !== undefined || values['train-pool'] !== undefined) {
    const where = {
      ...(values['sample-pool'] !== undefined ? { sample: values['sample-pool'] } : {}),
      ...(values['train-pool'] !== undefined ? { train: values['train-pool'] } : {}),
    };
    const filePools = (fromFile.pools ?? {}) as NonNullable<RunConfigInput['pools']>;
    // the file's entries stay (one for a model the team lacks is then named by the run config's check)
    input.pools = {
      ...filePools,
      ...Object.fromEntries(Object.keys(loadTeam(team, input.teamOptions ?? {}).models).map((m) => [m, { ...filePools[m], ...where }])),
    };
  }
  return input;
}

/** The run config's sft from --sft-from or --sft-jsonl, --sft-min-reward and --sft-batch over a --config file's (flags win). */
export function sftInput(
  values: Partial<Pick<TrainValues, 'sft-from' | 'sft-jsonl' | 'sft-min-reward' | 'sft-batch'>>,
  fromFile: RunConfigInput['sft'],
): RunConfigInput['sft'] {
  if (values['sft-from'] !== undefined && values['sft-jsonl'] !== undefined) throw new TroupeError('--sft-jsonl: give --sft-from or --sft-jsonl, not both');
  const batch = values['sft-batch'] !== undefined ? { batch: values['sft-batch'] } : {};
  if (values['sft-jsonl'] !== undefined) {
    if (values['sft-min-reward'] !== undefined) throw new TroupeError('--sft-min-reward: only with --sft-from <run> (a JSONL file has no rewards)');
    // absolute: the workers that read it may run in another directory
    return { ...batch, jsonl: path.resolve(values['sft-jsonl']), ...(fromFile?.batch !== undefined && !batch.batch ? { batch: fromFile.batch } : {}) };
  }
  const run = values['sft-from'] ?? fromFile?.from?.run;
  if (!run) {
    const stray = (['sft-min-reward', 'sft-batch'] as const).find((k) => values[k] !== undefined);
    if (stray && !fromFile) throw new TroupeError(`--${stray}: only with --sft-from <run> or --sft-jsonl <file> (or sft in a --config file)`);
    if (stray === 'sft-min-reward') throw new TroupeError('--sft-min-reward: only with --sft-from <run> (a JSONL file has no rewards)');
    return fromFile && { ...fromFile, ...batch };
  }
  const { jsonl: _j, ...rest } = fromFile ?? {};
  return {
    ...rest,
    from: { ...fromFile?.from, run, ...(values['sft-min-reward'] !== undefined ? { minReward: values['sft-min-reward'] } : {}) },
    ...batch,
  };
}

/**
 * Brings the stack up, starts the run `makeConfig` gives (it may read the store) and watches it to its summary,
 * as train does (fork too).
 */
export async function startAndWatch(
  values: TrainValues,
  log: (line: string) => void,
  makeConfig: (c: Connected) => Promise<RunConfig & { runId: string }>,
): Promise<number> {
  const started = Date.now();
  const stack = await upWithCurrentTeams(loadConfig(), log);
  const c = await connectRuns(log);
  try {
    const config = await makeConfig(c);
    const { runId, team } = config;
    const handle = await startNewRun(c, config);
    const runStarted = Date.now();
    const times = () => ({ runSeconds: (Date.now() - runStarted) / 1000, setupSeconds: (runStarted - started) / 1000 });
    log(`troupe: started run ${runId} (${config.steps} steps x ${config.groupsPerStep} groups x ${config.groupSize} episodes, ${config.rollout} rollouts)`);
    if (stack.result.uiUrl)
      log(`troupe: watch it in the Web UI: ${stack.result.uiUrl}/namespaces/${c.config.namespace}/workflows/${encodeURIComponent(runId)}`);
    if (values.detach) {
      console.log(values.json ? JSON.stringify({ runId, workflowId: runId }) : runId);
      return 0;
    }
    let summary;
    try {
      summary = await watchRun(handle);
    } catch (e) {
      // A run that ends badly still shows its episodes' errors and gets its --json line (then the error and exit status 1).
      const problems = await episodeProblems(c.sql, runId).catch(() => undefined);
      if (problems) for (const l of problemLines(problems)) log(l);
      if (values.json) console.log(JSON.stringify(await failureJson(handle, team, e, times(), problems)));
      throw e;
    }
    const problems = await episodeProblems(c.sql, runId);
    for (const l of summaryLines(summary, times(), problems)) console.log(l);
    const dashboard = stack.result.dashboardUrl ? `${stack.result.dashboardUrl}/#/runs/${encodeURIComponent(runId)}` : undefined;
    if (dashboard) console.log(`  dashboard: ${dashboard}`);
    let plot: { png: string; svg: string } | undefined;
    if (!values['no-plot']) {
      // The plot is a convenience: whatever goes wrong with it, the summary and --json line still come.
      try {
        plot = await writePlot(c.sql, runId, path.join(c.config.stateDir, 'runs', runId));
        console.log(`  plot: ${plot.png} (and .svg)`);
      } catch (e) {
        log(`troupe: no plot written: ${errorMessage(e)} (try \`npx troupe plot ${runId}\`)`);
      }
    }
    console.log('The stack is still up (Web UI, workers); stop it with: npx troupe down');
    if (values.json) console.log(JSON.stringify(summaryJson(summary, times(), problems, { ...(plot ? { plot } : {}), ...(dashboard ? { dashboard } : {}) })));
    return runExitCode(summary);
  } finally {
    await c.close();
  }
}

/**
 * The team a `train` names: the command line's, else the --config file's `team`. Both may name
 * it, only the same one.
 */
export function teamToTrain(positionals: string[], fromFile: Record<string, unknown>, configFile?: string): string {
  if (positionals.length > 1)
    throw new TroupeError(`train: name one team, not ${positionals.length} (${positionals.join(', ')})`, 'e.g. npx troupe train math');
  const inFile = fromFile.team;
  if (inFile !== undefined && (typeof inFile !== 'string' || inFile === ''))
    throw new TroupeError(`--config: ${configFile}: team must be a team's name, got ${JSON.stringify(inFile)}`, 'e.g. {"team": "math", "steps": 20}');
  const given = positionals[0];
  if (given !== undefined && inFile !== undefined && given !== inFile)
    throw new TroupeError(
      `train: two teams named: "${given}" on the command line and "${inFile}" in ${configFile}`,
      'name the team once (or the same one in both places)',
    );
  const team = given ?? inFile;
  if (!team) throw new TroupeError('train: name one team', 'e.g. npx troupe train math, or a --config file with "team": "math"');
  return team;
}

/** In a project, a team whose files have type errors does not start (tsx would run it unchecked). */
export function refuseTypeErrors(team: string, log: (line: string) => void): void {
  const project = activeProject();
  if (!project) return;
  const { errors, skipped } = typeCheckTeam(project, team);
  if (skipped) log(`troupe: team "${team}" was not type-checked: ${skipped}`);
  if (errors.length === 0) return;
  // One line, as every CLI error is (formatError prints the first line of the message).
  const more = errors.length > MAX_LISTED ? `; and ${errors.length - MAX_LISTED} more` : '';
  throw new TroupeError(
    `team "${team}" has ${errors.length} type error${errors.length === 1 ? '' : 's'}; nothing was started: ${errors.slice(0, MAX_LISTED).join('; ')}${more}`,
    'fix them (`npx tsc -p .` in the project shows them too), or start anyway with --skip-type-check',
  );
}
