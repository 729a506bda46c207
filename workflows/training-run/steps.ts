/**
 * The named steps of a training run (workflow.ts calls them in order). Each
 * reads and changes the run's state; none keeps state of its own.
 */
import { ApplicationFailure, condition, patched, workflowInfo } from '@temporalio/workflow';
import type { Sampling } from '../../agents/agent';
import type { EvalSummary } from '../../activities/training/control';
import type { EpisodeSpec } from '../../activities/training/plan';
import type { UpdateResult } from '../../activities/training/pool';
import { applyOptimizerChange } from '../../schema/optimizer';
import { initFieldOf, initSourceOf, offPolicyOf, partialShape, trainedModels, type PartialShape } from '../../schema/run-config';
import { Patch } from '../patches';
import { control, controlLocal, type Bookkeeping } from './activities';
import { withOptimizer } from './resolve';
import { poolOf, rolloutListed, rolloutPartialStep, rolloutPlan } from './rollout';
import type { StartMode } from './workflow';
import { StoppedNow, type RolloutDone, type RunState } from './state';

const EPISODE_GREEDY: Partial<Sampling> = { temperature: 0 };

/** Eval on held-out tasks at a step: greedy episodes, then their summary (which marks the eval complete). */
export async function evaluate(run: RunState, at: number): Promise<EvalSummary> {
  run.phase = 'evaluating';
  run.publish();
  const planned = await control.planEval({ ...run.ref, runId: run.runId, step: at, seed: run.config.seed, count: run.config.evalTasks });
  if (patched(Patch.stepPlanReference)) await rolloutPlan(run, planned, EPISODE_GREEDY);
  else await rolloutListed(run, planned as unknown as EpisodeSpec[], 'eval', at, EPISODE_GREEDY);
  const summary = await control.recordEval({ runId: run.runId, step: at });
  run.lastEval = summary;
  return summary;
}

/** Whether an eval is due after `at` steps (the last one is the final eval's). */
export const evalDue = (run: RunState, at: number) => run.config.evalEvery > 0 && at % run.config.evalEvery === 0 && at < run.config.steps;

/** Creates the run, or continues it (troupe resume): versions, optimizer and evals from the store. */
export async function startOrResume(run: RunState, mode: StartMode) {
  const info = workflowInfo();
  const { runId, models } = run;
  const point = await control.startRun({
    runId,
    config: run.config,
    workflowId: info.workflowId,
    executionId: info.runId,
    models,
    ...(mode.resume ? { resume: true } : {}),
  });
  run.owned = true;
  run.step = point.startStep;
  run.versions = point.versions;
  if (point.optimizer) run.resolved = withOptimizer(run.resolved, point.optimizer);
  // Idempotent: makes version 0 from the run seed only where it is missing.
  // init-from and fork: the source only where the config names one (other runs send the input they always did)
  const initOf = (m: string) => {
    const source = initSourceOf(run.config, m);
    return source && patched(Patch.initFrom) ? { init: source, initField: initFieldOf(run.config, m) } : {};
  };
  await Promise.all(models.map((m) => poolOf(run, m, 'train').initModel({ ...run.ref, runId, model: m, seed: run.config.seed, ...initOf(m) })));
  if (point.fresh) {
    run.initialEval = await evaluate(run, 0);
  } else if (patched(Patch.evalResumePoint)) {
    // An eval counts only when it finished; one cut short is redone (its stored episodes are kept).
    run.initialEval = point.evals.includes(0) ? await control.recordEval({ runId, step: 0 }) : await evaluate(run, 0);
    if (run.step > 0 && evalDue(run, run.step) && !point.evals.includes(run.step)) await evaluate(run, run.step);
  } else {
    const stored = await control.recordEval({ runId, step: 0 });
    run.initialEval = stored && stored.episodes > 0 ? stored : await evaluate(run, 0);
  }
  run.lastEval = run.lastEval?.step === run.step ? run.lastEval : run.initialEval;
}

/** Holds between steps until resumed or stopped. */
export async function waitWhilePaused(run: RunState) {
  const { runId } = run;
  run.phase = 'paused';
  run.publish();
  await control.setRunStatus({ runId, status: 'paused' });
  // The pause as a run event (the dashboard draws events on the curves' step axis), as its resume is.
  if (patched(Patch.pauseEvent)) await control.recordEvent({ runId, step: run.step, kind: 'paused' });
  await condition(() => !run.paused || run.stopRequested);
  if (run.stopRequested) return;
  await control.setRunStatus({ runId, status: 'running' });
  await control.recordEvent({ runId, step: run.step, kind: 'resumed-from-pause' });
}

/** setOptimizer changes take effect here, between steps; the event keeps the effective optimizer (what troupe resume restarts from). */
export async function applyPendingChanges(run: RunState, store: Bookkeeping = control) {
  const changes = run.pendingChanges.splice(0);
  run.resolved = withOptimizer(run.resolved, changes.reduce(applyOptimizerChange, run.config.optimizer));
  await store.recordEvent({ runId: run.runId, step: run.step, kind: 'optimizer-changed', detail: { changes, optimizer: run.config.optimizer } });
}

/** One step: plan, rollout, one update per model, bookkeeping. */
export async function runStep(run: RunState) {
  if (run.config.sft && patched(Patch.sftSteps)) return runSftStep(run);
  const shape = partialShape(run.config);
  if (shape && patched(Patch.partialRollouts)) return runPartialStep(run, shape);
  const t0 = Date.now();
  // Runs started before this change recorded planStep/finishStep as ordinary activities.
  const bookkeeping = patched(Patch.localStepBookkeeping) ? controlLocal : control;
  const { config } = run;
  const planned = await bookkeeping.planStep({
    ...run.ref,
    runId: run.runId,
    step: run.step,
    seed: config.seed,
    groupsPerStep: config.groupsPerStep,
    groupSize: config.groupSize,
  });
  let failed: number;
  let episodes: number;
  if (patched(Patch.stepPlanReference)) {
    failed = await rolloutPlan(run, planned);
    episodes = planned.episodes;
  } else {
    const specs = planned as unknown as EpisodeSpec[];
    failed = await rolloutListed(run, specs, 'train', run.step);
    episodes = specs.length;
  }
  run.failedEpisodes += failed;
  await updateStep(run, { seconds: (Date.now() - t0) / 1000, episodes, failed }, bookkeeping);
}

/** One SFT step (run config sft): no plan and no rollout; each trained model's update draws its batch of stored turns itself (activities/training/sft.ts). */
async function runSftStep(run: RunState) {
  await updateStep(run, { seconds: 0, episodes: 0, failed: 0 }, controlLocal);
}

/** One step with partial rollouts: one rollout activity runs carried and new groups and carries what did not finish. */
async function runPartialStep(run: RunState, shape: PartialShape) {
  const done = await rolloutPartialStep(run, run.step, shape, run.versions);
  run.failedEpisodes += done.failed;
  await updateStep(run, done, controlLocal);
}

/** One asynchronous step: start what may start, wait for this step's rollout, update from it. */
export async function runStaleStep(run: RunState) {
  const pipeline = run.pipeline!;
  pipeline.startRollouts();
  const done = await pipeline.take();
  run.failedEpisodes += done.failed;
  await updateStep(run, done, controlLocal, true);
  pipeline.committed();
}

/**
 * The update of the current step, one per model, from its finished rollout; then bookkeeping.
 * offPolicy: the rollout may be stale (asynchronous runs), the update corrects for it.
 */
async function updateStep(run: RunState, rolloutDone: RolloutDone, bookkeeping: Bookkeeping, offPolicy = false) {
  // A step left behind by a stop --now starts no update (the run closed as stopped without it).
  if (run.stopNow) throw new StoppedNow();
  run.updating = true;
  try {
    await updateAndRecord(run, rolloutDone, bookkeeping, offPolicy);
  } finally {
    run.updating = false;
  }
}

async function updateAndRecord(run: RunState, rolloutDone: RolloutDone, bookkeeping: Bookkeeping, offPolicy: boolean) {
  const { runId, config } = run;
  // frozen models sample but get no update: their version stays
  const models = (config.frozen?.length ?? 0) > 0 && patched(Patch.frozenModels) ? trainedModels(config, run.models) : run.models;
  // partial rollouts' counts go to the step's metrics, not to the update
  const { partial, ...rollout } = rolloutDone;
  const t1 = Date.now();
  // offPolicyOf sets only non-default settings: a run without `offPolicy` sends { importanceCap } as before (no patch needed).
  const correction = (model: string) => (offPolicy && run.pipeline!.lag(model) > 0 ? { offPolicy: offPolicyOf(config, model) } : {});
  // an SFT run's updates draw their own batch (runs without sft send the input they always did)
  const sft = config.sft ? { sft: { setting: config.sft, seed: config.seed, ...(config.frozen ? { frozen: config.frozen } : {}) } } : {};
  const updates: UpdateResult[] = await Promise.all(
    models.map((model) =>
      poolOf(run, model, 'train').updateModel({
        ...run.ref,
        runId,
        step: run.step,
        model,
        baseVersion: run.versions[model]!,
        settings: run.settings,
        nonFinite: config.nonFinite,
        rollout,
        ...correction(model),
        ...sft,
      }),
    ),
  );
  const t2 = Date.now();
  run.noteSuggestion();
  if (offPolicy) run.pipeline!.offPolicyMetrics = Object.fromEntries(updates.map((u, i) => [models[i]!, u.metrics]));
  const versions = { ...run.versions };
  updates.forEach((u, i) => (versions[models[i]!] = u.version));
  run.stepDone(versions, updates[0]?.rewards ?? {});
  await bookkeeping.finishStep({
    runId,
    step: run.step - 1,
    metrics: { updateSeconds: (t2 - t1) / 1000, episodesPerSecond: rollout.episodes / Math.max(rollout.seconds, 1e-3), ...partial },
  });
  run.publish();
  checkSignal(run, models, updates, rolloutDone);
}

/** A run in which no model can train for maxStepsWithoutSignal steps in a row fails, naming why, instead of completing at version 0. */
function checkSignal(run: RunState, models: readonly string[], updates: UpdateResult[], rollout: RolloutDone) {
  run.stepsWithoutSignal = updates.every((u) => u.skipped !== undefined) ? run.stepsWithoutSignal + 1 : 0;
  const { step, stepsWithoutSignal } = run;
  const limit = run.config.maxStepsWithoutSignal;
  if (limit > 0 && stepsWithoutSignal >= limit && patched(Patch.failWithoutSignal)) {
    const why = updates.map((u, i) => `${models[i]}: ${u.skipped}`).join('; ');
    throw ApplicationFailure.create({
      message: `no trainable signal for ${stepsWithoutSignal} consecutive steps (steps ${step - stepsWithoutSignal}-${step - 1}; maxStepsWithoutSignal ${limit}): every update was skipped (${why}); in the last step ${rollout.failed} of ${rollout.episodes} episodes failed (their errors are in the store: troupe status ${run.runId})`,
      type: 'NoTrainableSignal',
      nonRetryable: true,
    });
  }
}
