/**
 * trainingRun: one training run as one workflow. Control plane only: it passes
 * ids, counters and small settings; trajectories and weights live in Postgres.
 *
 *   validate config -> start/resume the run -> initial eval
 *   for each step: rollout (durable children or batched activities)
 *                  -> one update per model (idempotent, exactly-once commit)
 *                  -> metrics, progress, eval every N steps
 *   final eval -> summary
 *
 * continueAsNew carries only ids, counters and settings when Temporal suggests it.
 */
import {
  ApplicationFailure,
  condition,
  ContinueAsNew,
  continueAsNew,
  executeChild,
  isCancellation,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Sampling } from '../agents/agent';
import type { Split } from '../agents/tasks';
import { loadTeam } from '../agents/teams';
import type { AnyTeam } from '../agents/team';
import type { EvalSummary, TrainingControlActivities } from '../activities/training/control';
import type { EpisodeSpec } from '../activities/training/plan';
import type { TrainingPoolActivities, UpdateResult } from '../activities/training/pool';
import type { PoolQueueActivities } from '../activities/training/pool-queues';
import { TroupeEvalSuccess, TroupeRunId, TroupeStatus, TroupeStep, TroupeTeam } from '../infra/search-attributes';
import { checkAgainstTeam, parseRunConfig, RunConfigError, type ResolvedTraining, type RunConfig } from '../schema/run-config';
import { pauseSignal, resumeSignal, setOptimizerUpdate, statusQuery, stopSignal, type OptimizerChange, type RunStatusView } from './definitions';
import { episodeWorkflow } from './episode';
import { controlActivities, controlLocalActivities, poolActivities } from './timeouts';

/** What continueAsNew carries into the next execution. */
export interface Carried {
  startStep: number;
  versions: Record<string, number>;
  optimizer: RunConfig['optimizer'];
  paused: boolean;
  stopRequested: boolean;
  initialEval: EvalSummary | null;
  lastEval: EvalSummary | null;
  failedEpisodes: number;
}

export interface RunSummary {
  runId: string;
  workflowId: string;
  team: string;
  steps: number;
  status: 'completed' | 'stopped';
  versions: Record<string, number>;
  initialEval: EvalSummary | null;
  finalEval: EvalSummary | null;
  failedEpisodes: number;
}

const EPISODE_GREEDY: Partial<Sampling> = { temperature: 0 };

const control = proxyActivities<TrainingControlActivities>(controlActivities);
const controlLocal = proxyLocalActivities<TrainingControlActivities>(controlLocalActivities);
const poolQueueLookup = proxyLocalActivities<PoolQueueActivities>(controlLocalActivities);
/** Recording a failure must not hang a failing run on a store that stays down: a few tries only. */
const finalBookkeeping = proxyActivities<TrainingControlActivities>({ ...controlActivities, retry: { ...controlActivities.retry, maximumAttempts: 3 } });

export async function trainingRun(rawConfig: unknown, carried?: Carried): Promise<RunSummary> {
  // ---- validate: a bad config fails at once, naming every bad field, having started nothing.
  let config: RunConfig;
  let team: AnyTeam;
  let settings: ResolvedTraining;
  try {
    config = parseRunConfig(rawConfig);
    try {
      team = loadTeam(config.team, config.teamOptions);
    } catch (e) {
      throw new RunConfigError([{ path: 'team', message: (e as Error).message.replace(/^team: /, '') }]);
    }
    if (carried) config = { ...config, optimizer: carried.optimizer };
    settings = checkAgainstTeam(config, team);
    const pools = new Set(Object.values(team.models).map((m) => m.pool));
    if (config.rollout === 'batched' && pools.size > 1) throw new RunConfigError([{ path: 'rollout', message: `batched rollouts need every model on one pool; team ${team.name} uses ${[...pools].join(', ')}` }]);
  } catch (e) {
    if (e instanceof RunConfigError) throw ApplicationFailure.create({ message: e.message, type: 'InvalidRunConfig', nonRetryable: true, details: [e.issues] });
    throw e;
  }

  const info = workflowInfo();
  const runId = config.runId ?? info.workflowId;
  config = { ...config, runId };
  const models = Object.keys(team.models);
  const ref = { team: config.team, teamOptions: config.teamOptions };
  // pool name -> task queue, from the control worker's configuration (recorded in history);
  // runs started before 'pool-task-queues' used each pool's name as its queue.
  let poolQueues: Record<string, string> | undefined;
  const poolOf = (model: string) => {
    const pool = team.models[model]!.pool;
    return proxyActivities<TrainingPoolActivities>(poolActivities(poolQueues?.[pool] ?? pool));
  };

  // ---- state, visible through the status query
  let paused = carried?.paused ?? false;
  let stopRequested = carried?.stopRequested ?? false;
  let phase: RunStatusView['status'] = 'starting';
  let step = carried?.startStep ?? 0;
  let versions: Record<string, number> = carried?.versions ?? {};
  let initialEval = carried?.initialEval ?? null;
  let lastEval = carried?.lastEval ?? null;
  let failedEpisodes = carried?.failedEpisodes ?? 0;
  let rewards: Record<string, Record<string, number>> = {};
  const pendingChanges: OptimizerChange[] = [];
  const started = Date.now();
  let stepsThisExecution = 0;

  setHandler(pauseSignal, () => void (paused = true));
  setHandler(resumeSignal, () => void (paused = false));
  setHandler(stopSignal, () => void (stopRequested = true));
  setHandler(
    setOptimizerUpdate,
    (change) => {
      pendingChanges.push(change);
      return { effectiveStep: step + (phase === 'running' ? 1 : 0) };
    },
    {
      validator: (change) => {
        const merged = mergeOptimizer(config.optimizer, pendingChanges.reduce(mergeOptimizer, {} as RunConfig['optimizer']));
        checkAgainstTeam({ ...config, optimizer: mergeOptimizer(merged, change) }, team); // throws naming the field
      },
    },
  );
  setHandler(statusQuery, () => ({
    runId,
    team: config.team,
    status: phase,
    step,
    steps: config.steps,
    versions,
    rewards,
    lastEval: lastEval && { step: lastEval.step, success: lastEval.success },
    initialEval: initialEval && { step: initialEval.step, success: initialEval.success },
    secondsPerStep: stepsThisExecution > 0 ? (Date.now() - started) / 1000 / stepsThisExecution : null,
    failedEpisodes,
  }));

  const publish = () => {
    upsertSearchAttributes([
      { key: TroupeRunId, value: runId },
      { key: TroupeTeam, value: config.team },
      { key: TroupeStep, value: step },
      { key: TroupeStatus, value: phase },
      ...(lastEval ? [{ key: TroupeEvalSuccess, value: lastEval.success }] : []),
    ]);
    const lines = [`**${config.team}** run \`${runId}\`: step ${step}/${config.steps} (${phase})`];
    for (const [agent, cs] of Object.entries(rewards)) lines.push(`- ${agent}: ${Object.entries(cs).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(', ')}`);
    if (lastEval) lines.push(`- eval success ${lastEval.success.toFixed(3)} at step ${lastEval.step}${initialEval ? ` (from ${initialEval.success.toFixed(3)})` : ''}`);
    if (failedEpisodes > 0) lines.push(`- failed episodes: ${failedEpisodes}`);
    setCurrentDetails(lines.join('\n'));
  };

  // ---- rollout of a list of episodes, in the configured mode
  async function rollout(specs: EpisodeSpec[], split: Split, at: number, sampling?: Partial<Sampling>) {
    if (config.rollout === 'durable') {
      const results = await Promise.all(
        specs.map((spec) =>
          executeChild(episodeWorkflow, {
            workflowId: spec.episodeId,
            args: [{ ...ref, runId, step: at, split, spec, versions, sampling, poolQueues }],
          }),
        ),
      );
      return results.filter((r) => r.status === 'failed').length;
    }
    const chunk = 256;
    const parts: EpisodeSpec[][] = [];
    for (let i = 0; i < specs.length; i += chunk) parts.push(specs.slice(i, i + chunk));
    const results = await Promise.all(parts.map((part) => poolOf(models[0]!).rolloutBatch({ ...ref, runId, step: at, split, specs: part, versions, sampling })));
    return results.reduce((n, r) => n + r.failed, 0);
  }

  async function evaluate(at: number): Promise<EvalSummary> {
    phase = 'evaluating';
    publish();
    const specs = await control.planEval({ ...ref, runId, step: at, seed: config.seed, count: config.evalTasks });
    await rollout(specs, 'eval', at, EPISODE_GREEDY);
    const summary = await control.recordEval({ runId, step: at });
    lastEval = summary;
    return summary;
  }

  try {
    if (patched('pool-task-queues')) {
      poolQueues = await poolQueueLookup.poolTaskQueues({ pools: [...new Set(Object.values(team.models).map((m) => m.pool))] });
    }
    // ---- start or resume
    if (!carried) {
      const point = await control.startRun({ runId, config, workflowId: info.workflowId, executionId: info.runId, models });
      step = point.startStep;
      versions = point.versions;
      // Idempotent: makes version 0 from the run seed only where it is missing.
      await Promise.all(models.map((m) => poolOf(m).initModel({ ...ref, runId, model: m, seed: config.seed })));
      // A resumed run reuses the stored initial eval unless it never finished.
      const stored = point.fresh ? null : await control.recordEval({ runId, step: 0 });
      initialEval = stored && stored.episodes > 0 ? stored : await evaluate(0);
      lastEval = initialEval;
    }
    phase = paused ? 'paused' : 'running';
    publish();

    // ---- the steps
    while (step < config.steps && !stopRequested) {
      if (paused) {
        phase = 'paused';
        publish();
        await control.setRunStatus({ runId, status: 'paused' });
        await condition(() => !paused || stopRequested);
        if (stopRequested) break;
        await control.setRunStatus({ runId, status: 'running' });
        await control.recordEvent({ runId, step, kind: 'resumed-from-pause' });
      }
      phase = 'running';
      publish();
      if (pendingChanges.length > 0) {
        const changes = pendingChanges.splice(0);
        config = { ...config, optimizer: changes.reduce(mergeOptimizer, config.optimizer) };
        settings = checkAgainstTeam(config, team);
        await control.recordEvent({ runId, step, kind: 'optimizer-changed', detail: { changes, optimizer: config.optimizer } });
      }

      const t0 = Date.now();
      // Runs started before this change recorded planStep/finishStep as ordinary activities.
      const bookkeeping = patched('local-step-bookkeeping') ? controlLocal : control;
      const specs = await bookkeeping.planStep({ ...ref, runId, step, seed: config.seed, groupsPerStep: config.groupsPerStep, groupSize: config.groupSize });
      const failed = await rollout(specs, 'train', step);
      failedEpisodes += failed;
      const t1 = Date.now();
      const rolloutDone = { seconds: (t1 - t0) / 1000, episodes: specs.length, failed };
      const updates: UpdateResult[] = await Promise.all(
        models.map((model) => poolOf(model).updateModel({ ...ref, runId, step, model, baseVersion: versions[model]!, settings, nonFinite: config.nonFinite, rollout: rolloutDone })),
      );
      const t2 = Date.now();
      versions = { ...versions };
      updates.forEach((u, i) => (versions[models[i]!] = u.version));
      rewards = updates[0]?.rewards ?? {};
      step++;
      stepsThisExecution++;
      await bookkeeping.finishStep({
        runId,
        step: step - 1,
        metrics: { updateSeconds: (t2 - t1) / 1000, episodesPerSecond: specs.length / Math.max((t1 - t0) / 1000, 1e-3) },
      });
      publish();
      if (config.evalEvery > 0 && step % config.evalEvery === 0 && step < config.steps) {
        await evaluate(step);
        phase = 'running';
        publish();
      }
      if (workflowInfo().continueAsNewSuggested && step < config.steps) {
        await continueAsNew<typeof trainingRun>(rawConfig, { startStep: step, versions, optimizer: config.optimizer, paused, stopRequested, initialEval, lastEval, failedEpisodes });
      }
    }

    phase = stopRequested ? 'stopping' : 'running';
    const finalEval = lastEval?.step === step ? lastEval : await evaluate(step);
    const status = stopRequested && step < config.steps ? 'stopped' : 'completed';
    phase = status;
    publish();
    await control.setRunStatus({ runId, status });
    return { runId, workflowId: info.workflowId, team: config.team, steps: step, status, versions, initialEval, finalEval, failedEpisodes };
  } catch (e) {
    // continue-as-new and cancellation pass through; any other failure marks the run
    // failed in the store and on the workflow (search attribute, details), then fails it.
    if (e instanceof ContinueAsNew || isCancellation(e)) throw e;
    phase = 'failed';
    publish();
    await finalBookkeeping.recordEvent({ runId, step, kind: 'run-failed', detail: { message: (e as Error).message, cause: ((e as { cause?: Error }).cause)?.message } }).catch(() => undefined);
    await finalBookkeeping.setRunStatus({ runId, status: 'failed' }).catch(() => undefined);
    throw e;
  }
}

function mergeOptimizer(base: RunConfig['optimizer'], change: OptimizerChange): RunConfig['optimizer'] {
  const merge = (a: any = {}, b: any = {}) => {
    const out = { ...a };
    for (const [k, v] of Object.entries(b)) out[k] = (k === 'kl' || k === 'estimator' || k === 'rewardWeights') && v && typeof v === 'object' ? { ...a[k], ...v } : v;
    return out;
  };
  const models = { ...base.models };
  for (const [m, o] of Object.entries(change.models ?? {})) models[m] = merge(models[m], o);
  const agents = { ...base.agents };
  for (const [a, o] of Object.entries(change.agents ?? {})) agents[a] = merge(agents[a], o);
  return { all: change.all ? merge(base.all, change.all) : base.all, models, agents };
}
