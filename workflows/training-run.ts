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
 * With staleness k > 0 (asynchronous RL) the rollout of step t samples the
 * versions of step max(0, t − k) and starts as soon as they exist, so it runs
 * while the updates of steps t − k … t − 1 are in flight; updates still commit
 * in step order. The schedule depends on t and k only, never on timing.
 *
 * continueAsNew carries only ids, counters and settings when Temporal suggests it.
 *
 * History compatibility: every change to the commands this workflow issues is
 * behind a patched() id (listed in docs/contributing.md, "Workflow patches"), and
 * the branches for histories recorded before it are kept next to the new ones.
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
import { episodeIdOf, type EpisodeSpec, type StepPlan } from '../activities/training/plan';
import type { TrainingPoolActivities, UpdateResult } from '../activities/training/pool';
import type { PoolQueueActivities } from '../activities/training/pool-queues';
import type { DashboardLinkActivities } from '../activities/training/dashboard-link';
import { TroupeEvalSuccess, TroupeRunId, TroupeStatus, TroupeStep, TroupeTeam } from '../infra/search-attributes';
import { applyOptimizerChange, parseOptimizerChange, SettingsError, type OptimizerChange, type OptimizerConfig } from '../schema/optimizer';
import { checkAgainstTeam, parseRunConfig, poolsOf, RunConfigError, stalenessOf, type ResolvedTraining, type RunConfig } from '../schema/run-config';
import { pauseSignal, resumeSignal, setOptimizerUpdate, statusQuery, stopSignal, type RunStatusView } from './definitions';
import { episodeWorkflow } from './episode';
import { controlActivities, controlLocalActivities, poolActivities } from './timeouts';

/** What continueAsNew carries into the next execution. */
export interface Carried {
  startStep: number;
  versions: Record<string, number>;
  optimizer: OptimizerConfig;
  paused: boolean;
  stopRequested: boolean;
  initialEval: EvalSummary | null;
  lastEval: EvalSummary | null;
  failedEpisodes: number;
  /** setOptimizer changes accepted but not yet applied (they apply at the next step). */
  pendingChanges?: OptimizerChange[];
  /** Consecutive steps so far in which no model could train. */
  stepsWithoutSignal?: number;
  /** Asynchronous runs: rollouts of later steps finished before continue-as-new (not started again). */
  rolledOut?: Record<number, RolloutDone>;
}

/** A step's finished rollout, as its update commits it. */
interface RolloutDone {
  seconds: number;
  episodes: number;
  failed: number;
}

/** How an execution was started: `troupe resume` continues a run that did not finish. */
export interface StartMode {
  resume?: boolean;
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
/** Episodes per batched rollout activity. */
const ROLLOUT_CHUNK = 256;

const control = proxyActivities<TrainingControlActivities>(controlActivities);
const controlLocal = proxyLocalActivities<TrainingControlActivities>(controlLocalActivities);
const poolQueueLookup = proxyLocalActivities<PoolQueueActivities>(controlLocalActivities);
const dashboardLookup = proxyLocalActivities<DashboardLinkActivities>(controlLocalActivities);
/** Recording a failure must not hang a failing run on a store that stays down: a few tries only. */
const finalBookkeeping = proxyActivities<TrainingControlActivities>({ ...controlActivities, retry: { ...controlActivities.retry, maximumAttempts: 3 } });

/** A bad config fails the workflow at once, naming every bad field, having started nothing. */
function validate(rawConfig: unknown, carried: Carried | null | undefined): { config: RunConfig; team: AnyTeam; settings: ResolvedTraining } {
  let config = parseRunConfig(rawConfig);
  let team: AnyTeam;
  try {
    team = loadTeam(config.team, config.teamOptions);
  } catch (e) {
    throw new RunConfigError([{ path: 'team', message: (e as Error).message.replace(/^team: /, '') }]);
  }
  if (carried) config = { ...config, optimizer: carried.optimizer };
  const settings = checkAgainstTeam(config, team);
  const pools = new Set(Object.keys(team.models).map((m) => poolsOf(config, team, m).sample));
  // its episodes would run in workflow code, which cannot read the checkpoint's tokenizer.json
  if (config.rollout === 'durable' && team.tokenizer.kind === 'placeholder') throw new RunConfigError([{ path: 'rollout', message: `team ${team.name} uses the tokenizer.json of its checkpoint (teamOptions.checkpointTokenizer), which only activities read: use "batched"` }]);
  if (config.rollout === 'batched' && pools.size > 1) throw new RunConfigError([{ path: 'rollout', message: `batched rollouts need every model on one pool; team ${team.name} uses ${[...pools].join(', ')}` }]);
  return { config, team, settings };
}

export async function trainingRun(rawConfig: unknown, carried?: Carried | null, mode: StartMode = {}): Promise<RunSummary> {
  let config: RunConfig;
  let team: AnyTeam;
  let settings: ResolvedTraining;
  try {
    ({ config, team, settings } = validate(rawConfig, carried));
  } catch (e) {
    if (!(e instanceof RunConfigError)) throw e;
    // Visible to a TroupeStatus="failed" search, under the team when it is known.
    if (patched('validation-failure-attributes')) {
      const teamName = (rawConfig as { team?: unknown } | null)?.team;
      upsertSearchAttributes([{ key: TroupeStatus, value: 'failed' }, ...(typeof teamName === 'string' && teamName ? [{ key: TroupeTeam, value: teamName }] : [])]);
      setCurrentDetails(`**invalid run config**\n\n${e.issues.map((i) => `- \`${i.path}\`: ${i.message}`).join('\n')}`);
    }
    throw ApplicationFailure.create({ message: e.message, type: 'InvalidRunConfig', nonRetryable: true, details: [e.issues] });
  }

  const info = workflowInfo();
  const runId = config.runId ?? info.workflowId;
  config = { ...config, runId };
  const models = Object.keys(team.models);
  const ref = { team: config.team, teamOptions: config.teamOptions };
  // pool name -> task queue, from the control worker's configuration (recorded in history);
  // runs started before 'pool-task-queues' used each pool's name as its queue.
  let poolQueues: Record<string, string> | undefined;
  /** A model's sampling pool (rollouts) or training pool (version 0, updates): the same one unless the team or run splits them. */
  const poolOf = (model: string, role: 'sample' | 'train' = 'sample') => {
    const pool = poolsOf(config, team, model)[role];
    return proxyActivities<TrainingPoolActivities>(poolActivities(poolQueues?.[pool] ?? pool));
  };
  /** Task queue of each model's sampling pool, for durable episodes (only where a run or team moved one). */
  const sampleQueues = () => {
    if (!config.pools && models.every((m) => !team.models[m]!.trainPool)) return {};
    return { modelQueues: Object.fromEntries(models.map((m) => { const p = poolsOf(config, team, m).sample; return [m, poolQueues?.[p] ?? p]; })) };
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
  let stepsWithoutSignal = carried?.stepsWithoutSignal ?? 0;
  let rewards: Record<string, Record<string, number>> = {};
  /** The run's dashboard page, from the control worker's configuration (recorded in history). */
  let dashboardPage: string | null = null;
  const pendingChanges: OptimizerChange[] = [...(carried?.pendingChanges ?? [])];
  const started = Date.now();
  let stepsThisExecution = 0;
  /** Whether this execution may write to the run in the store (it started or continued it). */
  let owned = !!carried;
  /** Whether this run is asynchronous (staleness > 0 for some model); decided once per execution. */
  let pipelined = false;

  setHandler(pauseSignal, () => void (paused = true));
  setHandler(resumeSignal, () => void (paused = false));
  setHandler(stopSignal, () => void (stopRequested = true));
  setHandler(
    setOptimizerUpdate,
    (change) => {
      pendingChanges.push(parseOptimizerChange(change));
      return { effectiveStep: step + (phase === 'running' ? 1 : 0) };
    },
    {
      // Rejected here, the change is never recorded; every problem once, at the path the user sent.
      validator: (raw) => {
        try {
          const change = parseOptimizerChange(raw);
          checkAgainstTeam({ ...config, optimizer: [...pendingChanges, change].reduce(applyOptimizerChange, config.optimizer) }, team);
        } catch (e) {
          if (!(e instanceof SettingsError || e instanceof RunConfigError)) throw e;
          const issues = dedupe(e.issues.map((i) => ({ path: i.path.replace(/^optimizer\./, ''), message: i.message })));
          throw ApplicationFailure.create({ message: `invalid optimizer change: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, type: 'InvalidOptimizerChange', nonRetryable: true, details: [issues] });
        }
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
    setCurrentDetails(details());
  };
  // Markdown as the Web UI renders it: a paragraph, a blank line, then a list.
  const details = () => {
    const items = Object.entries(rewards).map(([agent, cs]) => `- ${agent}: ${Object.entries(cs).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(', ')}`);
    if (lastEval) items.push(`- eval success ${lastEval.success.toFixed(3)} at step ${lastEval.step}${initialEval ? ` (from ${initialEval.success.toFixed(3)})` : ''}`);
    if (failedEpisodes > 0) items.push(`- failed episodes: ${failedEpisodes}`);
    if (pipelined) {
      const inFlight = [...rollouts.keys()].filter((s) => s >= step);
      items.push(`- staleness ${models.map((m) => `${m} k=${lag(m)}`).join(', ')}; rollouts started ahead: ${inFlight.length > 0 ? `steps ${inFlight.join(', ')}` : 'none'}`);
      for (const [m, x] of Object.entries(offPolicyMetrics)) {
        if (x.staleness === undefined) continue;
        items.push(`- ${m} off-policy: staleness ${x.staleness.toFixed(2)}, IS weight mean ${x['isWeight.mean']!.toFixed(3)} max ${x['isWeight.max']!.toFixed(3)} truncated ${x['isWeight.truncated']!.toFixed(3)}, KL(behaviour‖current) ${x.behaviourKl!.toExponential(2)}, clip fraction ${x.clipFraction!.toFixed(3)}`);
      }
    }
    if (pendingChanges.length > 0) items.push(`- optimizer changes pending: ${pendingChanges.length} (apply at step ${step + (phase === 'running' ? 1 : 0)})`);
    if (dashboardPage) items.push(`- curves and episodes: [dashboard](${dashboardPage})`);
    const head = `**${config.team}** run \`${runId}\`: step ${step}/${config.steps} (${phase})`;
    return items.length > 0 ? `${head}\n\n${items.join('\n')}` : head;
  };

  // ---- rollout of a plan (by reference), in the configured mode; returns the failed episodes
  async function rolloutPlan(plan: StepPlan, sampling?: Partial<Sampling>, serving: Record<string, number> = versions): Promise<number> {
    const { episodes, ...byRef } = plan;
    const split = plan.rule.split;
    const at = plan.step;
    if (config.rollout === 'durable') {
      const results = await Promise.all(
        Array.from({ length: episodes }, (_, index) =>
          executeChild(episodeWorkflow, { workflowId: episodeIdOf(byRef, index), args: [{ ...ref, runId, step: at, split, plan: byRef, index, versions: serving, sampling, poolQueues, ...sampleQueues() }] }),
        ),
      );
      return results.filter((r) => r.status === 'failed').length;
    }
    const parts: Array<[number, number]> = [];
    for (let from = 0; from < episodes; from += ROLLOUT_CHUNK) parts.push([from, Math.min(from + ROLLOUT_CHUNK, episodes)]);
    const results = await Promise.all(parts.map(([from, to]) => poolOf(models[0]!).rolloutBatch({ ...ref, runId, step: at, split, plan: byRef, from, to, versions: serving, sampling })));
    return results.reduce((n, r) => n + r.failed, 0);
  }

  // Histories from before plans were references: planStep/planEval returned the episode list.
  async function rolloutListed(specs: EpisodeSpec[], split: Split, at: number, sampling?: Partial<Sampling>): Promise<number> {
    if (config.rollout === 'durable') {
      const results = await Promise.all(specs.map((spec) => executeChild(episodeWorkflow, { workflowId: spec.episodeId, args: [{ ...ref, runId, step: at, split, spec, versions, sampling, poolQueues, ...sampleQueues() }] })));
      return results.filter((r) => r.status === 'failed').length;
    }
    const parts: EpisodeSpec[][] = [];
    for (let i = 0; i < specs.length; i += ROLLOUT_CHUNK) parts.push(specs.slice(i, i + ROLLOUT_CHUNK));
    const results = await Promise.all(parts.map((part) => poolOf(models[0]!).rolloutBatch({ ...ref, runId, step: at, split, specs: part, versions, sampling })));
    return results.reduce((n, r) => n + r.failed, 0);
  }

  /** Eval on held-out tasks at a step: greedy episodes, then their summary (which marks the eval complete). */
  async function evaluate(at: number): Promise<EvalSummary> {
    phase = 'evaluating';
    publish();
    const planned = await control.planEval({ ...ref, runId, step: at, seed: config.seed, count: config.evalTasks });
    if (patched('step-plan-reference')) await rolloutPlan(planned, EPISODE_GREEDY);
    else await rolloutListed(planned as unknown as EpisodeSpec[], 'eval', at, EPISODE_GREEDY);
    const summary = await control.recordEval({ runId, step: at });
    lastEval = summary;
    return summary;
  }

  const evalDue = (at: number) => config.evalEvery > 0 && at % config.evalEvery === 0 && at < config.steps;

  /** Creates the run, or continues it (troupe resume): versions, optimizer and evals from the store. */
  async function startOrResume() {
    const point = await control.startRun({ runId, config, workflowId: info.workflowId, executionId: info.runId, models, ...(mode.resume ? { resume: true } : {}) });
    owned = true;
    step = point.startStep;
    versions = point.versions;
    if (point.optimizer) {
      config = { ...config, optimizer: point.optimizer };
      settings = checkAgainstTeam(config, team);
    }
    // Idempotent: makes version 0 from the run seed only where it is missing.
    await Promise.all(models.map((m) => poolOf(m, 'train').initModel({ ...ref, runId, model: m, seed: config.seed })));
    if (point.fresh) {
      initialEval = await evaluate(0);
    } else if (patched('eval-resume-point')) {
      // An eval counts only when it finished; one cut short is redone (its stored episodes are kept).
      initialEval = point.evals.includes(0) ? await control.recordEval({ runId, step: 0 }) : await evaluate(0);
      if (step > 0 && evalDue(step) && !point.evals.includes(step)) await evaluate(step);
    } else {
      const stored = await control.recordEval({ runId, step: 0 });
      initialEval = stored && stored.episodes > 0 ? stored : await evaluate(0);
    }
    lastEval = lastEval?.step === step ? lastEval : initialEval;
  }

  async function waitWhilePaused() {
    phase = 'paused';
    publish();
    await control.setRunStatus({ runId, status: 'paused' });
    // The pause as a run event (the dashboard draws events on the curves' step axis), as its resume is.
    if (patched('pause-event')) await control.recordEvent({ runId, step, kind: 'paused' });
    await condition(() => !paused || stopRequested);
    if (stopRequested) return;
    await control.setRunStatus({ runId, status: 'running' });
    await control.recordEvent({ runId, step, kind: 'resumed-from-pause' });
  }

  /** setOptimizer changes take effect here, between steps; the event keeps the effective optimizer (what troupe resume restarts from). */
  async function applyPendingChanges(store = control) {
    const changes = pendingChanges.splice(0);
    config = { ...config, optimizer: changes.reduce(applyOptimizerChange, config.optimizer) };
    settings = checkAgainstTeam(config, team);
    await store.recordEvent({ runId, step, kind: 'optimizer-changed', detail: { changes, optimizer: config.optimizer } });
  }

  /** One step: plan, rollout, one update per model, bookkeeping. */
  async function runStep() {
    const t0 = Date.now();
    // Runs started before this change recorded planStep/finishStep as ordinary activities.
    const bookkeeping = patched('local-step-bookkeeping') ? controlLocal : control;
    const planned = await bookkeeping.planStep({ ...ref, runId, step, seed: config.seed, groupsPerStep: config.groupsPerStep, groupSize: config.groupSize });
    let failed: number;
    let episodes: number;
    if (patched('step-plan-reference')) {
      failed = await rolloutPlan(planned);
      episodes = planned.episodes;
    } else {
      const specs = planned as unknown as EpisodeSpec[];
      failed = await rolloutListed(specs, 'train', step);
      episodes = specs.length;
    }
    failedEpisodes += failed;
    await updateStep({ seconds: (Date.now() - t0) / 1000, episodes, failed }, bookkeeping);
  }

  /**
   * The update of the current step, one per model, from its finished rollout; then bookkeeping.
   * offPolicy: the rollout may be stale (asynchronous runs), the update corrects for it.
   */
  async function updateStep(rolloutDone: RolloutDone, bookkeeping: typeof control, offPolicy = false) {
    const t1 = Date.now();
    const correction = (model: string) => (offPolicy && lag(model) > 0 ? { offPolicy: { importanceCap: config.importanceCap } } : {});
    const updates: UpdateResult[] = await Promise.all(
      models.map((model) => poolOf(model, 'train').updateModel({ ...ref, runId, step, model, baseVersion: versions[model]!, settings, nonFinite: config.nonFinite, rollout: rolloutDone, ...correction(model) })),
    );
    const t2 = Date.now();
    if (offPolicy) offPolicyMetrics = Object.fromEntries(updates.map((u, i) => [models[i]!, u.metrics]));
    versions = { ...versions };
    updates.forEach((u, i) => (versions[models[i]!] = u.version));
    rewards = updates[0]?.rewards ?? {};
    step++;
    stepsThisExecution++;
    await bookkeeping.finishStep({
      runId,
      step: step - 1,
      metrics: { updateSeconds: (t2 - t1) / 1000, episodesPerSecond: rolloutDone.episodes / Math.max(rolloutDone.seconds, 1e-3) },
    });
    publish();
    checkSignal(updates, rolloutDone);
  }

  // ---- asynchronous runs (staleness k > 0): rollouts of later steps in flight during updates
  const lag = (model: string) => stalenessOf(config, model);
  const minLag = Math.min(...models.map(lag));
  const maxLag = Math.max(...models.map(lag));
  /** Serving versions at the steps a rollout may still need (step − maxLag … step). */
  const versionsAt: Record<number, Record<string, number>> = {};
  const rollouts = new Map<number, Promise<RolloutDone>>();
  let offPolicyMetrics: Record<string, Record<string, number>> = {};

  /** Versions of the steps in the lag window, before the first asynchronous step of this execution. */
  async function startPipeline() {
    const earlier = Array.from({ length: Math.min(maxLag, step) }, (_, i) => step - maxLag + i).filter((s) => s >= 0);
    if (earlier.length > 0) Object.assign(versionsAt, await control.versionsAt({ runId, models, steps: earlier }));
    versionsAt[step] = versions;
    for (const [s, done] of Object.entries(carried?.rolledOut ?? {})) rollouts.set(Number(s), Promise.resolve(done));
  }

  /** Starts every rollout whose versions exist: step s samples model m's version of step max(0, s − k_m). */
  function startRollouts() {
    for (let s = step; s <= Math.min(step + minLag, config.steps - 1); s++) {
      if (rollouts.has(s)) continue;
      const serving = Object.fromEntries(models.map((m) => [m, versionsAt[Math.max(0, s - lag(m))]![m]!]));
      const done = rolloutStep(s, serving);
      done.catch(() => undefined); // its failure surfaces when its step awaits it
      rollouts.set(s, done);
    }
  }

  async function rolloutStep(at: number, serving: Record<string, number>): Promise<RolloutDone> {
    const t0 = Date.now();
    const planned = await controlLocal.planStep({ ...ref, runId, step: at, seed: config.seed, groupsPerStep: config.groupsPerStep, groupSize: config.groupSize });
    const failed = await rolloutPlan(planned, undefined, serving);
    return { seconds: (Date.now() - t0) / 1000, episodes: planned.episodes, failed };
  }

  /** One asynchronous step: start what may start, wait for this step's rollout, update from it. */
  async function runStaleStep() {
    startRollouts();
    const done = await rollouts.get(step)!;
    rollouts.delete(step);
    failedEpisodes += done.failed;
    await updateStep(done, controlLocal, true);
    versionsAt[step] = versions;
    delete versionsAt[step - maxLag - 1];
  }

  /** Waits for the rollouts in flight (they finish and are stored; none is left running). */
  async function drainRollouts(): Promise<Record<number, RolloutDone>> {
    return Object.fromEntries(await Promise.all([...rollouts].map(async ([s, p]) => [s, await p] as const)));
  }

  /** A run in which no model can train for maxStepsWithoutSignal steps in a row fails, naming why, instead of completing at version 0. */
  function checkSignal(updates: UpdateResult[], rollout: { episodes: number; failed: number }) {
    stepsWithoutSignal = updates.every((u) => u.skipped !== undefined) ? stepsWithoutSignal + 1 : 0;
    const limit = config.maxStepsWithoutSignal;
    if (limit > 0 && stepsWithoutSignal >= limit && patched('fail-without-signal')) {
      const why = updates.map((u, i) => `${models[i]}: ${u.skipped}`).join('; ');
      throw ApplicationFailure.create({
        message: `no trainable signal for ${stepsWithoutSignal} consecutive steps (steps ${step - stepsWithoutSignal}-${step - 1}; maxStepsWithoutSignal ${limit}): every update was skipped (${why}); in the last step ${rollout.failed} of ${rollout.episodes} episodes failed (their errors are in the store: troupe status ${runId})`,
        type: 'NoTrainableSignal',
        nonRetryable: true,
      });
    }
  }

  try {
    if (patched('pool-task-queues')) {
      poolQueues = await poolQueueLookup.poolTaskQueues({ pools: [...new Set(models.flatMap((m) => Object.values(poolsOf(config, team, m))))] });
    }
    if (patched('dashboard-link')) {
      const base = await dashboardLookup.dashboardUrl();
      dashboardPage = base && `${base}/#/runs/${encodeURIComponent(runId)}`;
    }
    if (!carried) await startOrResume();
    // Runs with every k = 0 never reach patched(): their histories stay as they were.
    pipelined = maxLag > 0 && patched('bounded-staleness');
    if (pipelined) await startPipeline();
    phase = paused ? 'paused' : 'running';
    publish();

    while (step < config.steps && !stopRequested) {
      if (paused) {
        await waitWhilePaused();
        if (stopRequested) break;
      }
      phase = 'running';
      publish();
      if (pendingChanges.length > 0) await applyPendingChanges();
      if (pipelined) await runStaleStep();
      else await runStep();
      if (evalDue(step)) {
        await evaluate(step);
        phase = 'running';
        publish();
      }
      if (workflowInfo().continueAsNewSuggested && step < config.steps) {
        // This execution closes: a TroupeStatus="running" search must find only the one that goes on.
        if (patched('continued-status')) upsertSearchAttributes([{ key: TroupeStatus, value: 'continued' }]);
        const next: Carried = { startStep: step, versions, optimizer: config.optimizer, paused, stopRequested, initialEval, lastEval, failedEpisodes, pendingChanges, stepsWithoutSignal, ...(pipelined ? { rolledOut: await drainRollouts() } : {}) };
        await continueAsNew<typeof trainingRun>(rawConfig, next);
      }
    }

    phase = stopRequested ? 'stopping' : 'running';
    if (pipelined) await drainRollouts();
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
    if (!owned && patched('start-owns-run')) {
      // Refused before owning the run (e.g. its id is taken): the existing run is not touched.
      upsertSearchAttributes([{ key: TroupeStatus, value: 'failed' }, { key: TroupeTeam, value: config.team }]);
      setCurrentDetails(`**${config.team}** run \`${runId}\` not started: ${(e as Error).message}${(e as { cause?: Error }).cause ? `: ${(e as { cause: Error }).cause.message}` : ''}`);
      throw e;
    }
    publish();
    // Accepted changes not yet applied are kept, so troupe resume continues with them.
    if (pendingChanges.length > 0 && patched('pending-changes-on-failure')) await applyPendingChanges(finalBookkeeping).catch(() => undefined);
    await finalBookkeeping.recordEvent({ runId, step, kind: 'run-failed', detail: { message: (e as Error).message, cause: ((e as { cause?: Error }).cause)?.message } }).catch(() => undefined);
    await finalBookkeeping.setRunStatus({ runId, status: 'failed' }).catch(() => undefined);
    throw e;
  }
}

function dedupe<T extends { path: string; message: string }>(issues: T[]): T[] {
  const seen = new Set<string>();
  return issues.filter((i) => !seen.has(`${i.path}\u0000${i.message}`) && !!seen.add(`${i.path}\u0000${i.message}`));
}
