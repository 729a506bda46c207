/**
 * trainingRun: one training run as one workflow. Control plane only: it passes
 * ids, counters and small settings; trajectories and weights live in Postgres.
 *
 *   resolve config + team -> start/resume the run -> initial eval
 *   for each step: (pause) -> apply accepted optimizer changes
 *                  -> rollout (durable children or batched activities; stale.ts when k > 0)
 *                  -> one update per model (idempotent, exactly-once commit)
 *                  -> metrics, progress, eval every N steps
 *                  -> continue-as-new with the run's state when Temporal suggests it
 *   final eval -> summary
 *
 * History compatibility: every change to the commands this workflow issues is
 * behind a patched() id (workflows/patches.ts, listed in docs/contributing.md),
 * and the branches for histories recorded before it are kept next to the new ones.
 */
import {
  allHandlersFinished,
  ApplicationFailure,
  condition,
  ContinueAsNew,
  continueAsNew,
  isCancellation,
  patched,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { EvalSummary } from '../../activities/training/control';
import { TroupeStatus, TroupeTeam } from '../../infra/search-attributes';
import { parseOptimizerChange } from '../../schema/optimizer';
import { optimizerChangeIssues, RunConfigError } from '../../schema/run-config';
import { pauseSignal, resumeSignal, rolloutProgressSignal, setOptimizerUpdate, statusQuery, stopSignal } from '../definitions';
import { decidePatches, Patch } from '../patches';
import { control, controlLocal, dashboardLookup, finalBookkeeping, poolQueueLookup } from './activities';
import { resolve, type Resolved } from './resolve';
import { poolsUsed } from './rollout';
import { StalePipeline } from './stale';
import { RunState, StoppedNow, type Carried } from './state';
import { applyPendingChanges, evalDue, evaluate, runStaleStep, runStep, startOrResume, waitWhilePaused } from './steps';

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

export async function trainingRun(rawConfig: unknown, carried?: Carried | null, mode: StartMode = {}): Promise<RunSummary> {
  let resolved: Resolved;
  try {
    resolved = resolve(rawConfig, carried?.optimizer);
  } catch (e) {
    if (!(e instanceof RunConfigError)) throw e;
    // Visible to a TroupeStatus="failed" search, under the team when it is known.
    if (patched(Patch.validationFailureAttributes)) {
      const teamName = (rawConfig as { team?: unknown } | null)?.team;
      upsertSearchAttributes([
        { key: TroupeStatus, value: 'failed' },
        ...(typeof teamName === 'string' && teamName ? [{ key: TroupeTeam, value: teamName }] : []),
      ]);
      setCurrentDetails(`**invalid run config**\n\n${e.issues.map((i) => `- \`${i.path}\`: ${i.message}`).join('\n')}`);
    }
    throw ApplicationFailure.create({ message: e.message, type: 'InvalidRunConfig', nonRetryable: true, details: [e.issues] });
  }
  const info = workflowInfo();
  const run = new RunState(resolved, resolved.config.runId ?? info.workflowId, carried);
  run.decidedAtStart = decidePatches(patched);
  // Decided here, in the first activation, not in the update handler: the decision must not
  // depend on when an update arrives.
  handleMessages(run, patched(Patch.acceptedChangeEvent));

  try {
    if (patched(Patch.poolTaskQueues)) run.poolQueues = await poolQueueLookup.poolTaskQueues({ pools: poolsUsed(run) });
    if (patched(Patch.dashboardLink)) {
      const base = await dashboardLookup.dashboardUrl();
      run.dashboardPage = base && `${base}/#/runs/${encodeURIComponent(run.runId)}`;
    }
    if (!carried) await startOrResume(run, mode);
    // Runs with every k = 0 never reach patched(): their histories stay as they were.
    if (StalePipeline.wanted(run) && patched(Patch.boundedStaleness)) {
      run.pipeline = new StalePipeline(run);
      await run.pipeline.start(carried?.rolledOut);
    }
    run.phase = run.paused ? 'paused' : 'running';
    run.publish();

    while (run.step < run.config.steps && !run.stopRequested) {
      if (run.paused) {
        await waitWhilePaused(run);
        if (run.stopRequested) break;
      }
      run.phase = 'running';
      run.publish();
      if (run.pendingChanges.length > 0) await applyPendingChanges(run);
      const stoppedNow = await stepOrStopNow(run, async () => {
        if (run.pipeline) await runStaleStep(run);
        else await runStep(run);
        if (evalDue(run, run.step)) {
          await evaluate(run, run.step);
          run.phase = 'running';
          run.publish();
        }
      });
      if (stoppedNow) break;
      if (run.continueAsNewSuggested() && run.step < run.config.steps) {
        // This execution closes: a TroupeStatus="running" search must find only the one that goes on.
        if (patched(Patch.continuedStatus)) upsertSearchAttributes([{ key: TroupeStatus, value: 'continued' }]);
        const rolledOut = run.pipeline ? await run.pipeline.drain() : undefined;
        // A setOptimizer update still recording its change finishes in this execution (no command: handlers of older histories never wait).
        await condition(allHandlersFinished);
        await continueAsNew<typeof trainingRun>(rawConfig, run.toCarried(rolledOut));
      }
    }

    run.phase = run.stopRequested ? 'stopping' : 'running';
    // stop --now: rollouts still in flight are abandoned (closing the workflow cancels them), and no final eval
    if (run.pipeline && !run.stopNow) await run.pipeline.drain();
    const finalEval = run.stopNow || run.lastEval?.step === run.step ? run.lastEval : await evaluate(run, run.step);
    if (run.stopNow) await control.recordEvent({ runId: run.runId, step: run.step, kind: 'stopped-now' });
    const status = run.stopRequested && run.step < run.config.steps ? 'stopped' : 'completed';
    run.phase = status;
    run.publish();
    await control.setRunStatus({ runId: run.runId, status });
    await condition(allHandlersFinished);
    return {
      runId: run.runId,
      workflowId: info.workflowId,
      team: run.config.team,
      steps: run.step,
      status,
      versions: run.versions,
      initialEval: run.initialEval,
      finalEval,
      failedEpisodes: run.failedEpisodes,
    };
  } catch (e) {
    // continue-as-new and cancellation pass through; any other failure marks the run
    // failed in the store and on the workflow (search attribute, details), then fails it.
    if (e instanceof ContinueAsNew || isCancellation(e)) throw e;
    await fail(run, e as Error);
    throw e;
  }
}

/**
 * Signals (pause, resume, stop), the setOptimizer update and the status query.
 * recordAccepted: an accepted change is written to the store (a run event) before the
 * update returns, so a terminate before the step that applies it does not lose it.
 */
function handleMessages(run: RunState, recordAccepted: boolean) {
  setHandler(pauseSignal, () => void (run.paused = true));
  setHandler(resumeSignal, () => void (run.paused = false));
  setHandler(stopSignal, (opts) => {
    run.stopRequested = true;
    if (opts?.now === true) run.stopNow = true;
  });
  // Current Details only (no command): a report adds its signal to the history and nothing else.
  setHandler(rolloutProgressSignal, (p) => {
    if (run.progress.report(p, Date.now())) run.publishDetails();
  });
  setHandler(
    setOptimizerUpdate,
    async (raw) => {
      const change = parseOptimizerChange(raw);
      const effectiveStep = run.step + (run.phase === 'running' ? 1 : 0);
      run.pendingChanges.push(change);
      if (recordAccepted)
        await controlLocal.recordEvent({ runId: run.runId, step: run.step, kind: 'optimizer-change-accepted', detail: { change, effectiveStep } });
      return { effectiveStep };
    },
    {
      // Rejected here, the change is never recorded; every problem once, at the path the user sent.
      validator: (raw) => {
        const issues = optimizerChangeIssues(raw, run.config, run.resolved.team, run.pendingChanges);
        if (issues.length > 0) {
          throw ApplicationFailure.create({
            message: `invalid optimizer change: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
            type: 'InvalidOptimizerChange',
            nonRetryable: true,
            details: [issues],
          });
        }
      },
    },
  );
  setHandler(statusQuery, () => run.view());
}

/**
 * Runs one step (and its eval) raced against a stop --now; true when the stop won. The step's
 * activities and episode children are not cancelled here: the run closes as stopped at once, and
 * closing cancels them (a pool activity learns at its next heartbeat that its run is gone, a child
 * is terminated by its parent-close policy). An update already running finishes first, so what it
 * commits is the run's last step, and the step left behind never starts its update
 * (steps.ts updateStep). No cancellation scope: entering one in the shared workflow context, with a
 * durable episode's script timing out in it, corrupted Node's async-hook stack; a race and a
 * condition issue no command, so recorded histories replay as before.
 */
async function stepOrStopNow(run: RunState, step: () => Promise<void>): Promise<boolean> {
  let settled = false;
  const work = step().finally(() => void (settled = true));
  // Past a stop --now the step left behind may still fail (a cancelled activity): nobody waits for it.
  work.catch(() => undefined);
  const stopped = condition(() => settled || (run.stopNow && !run.updating)).then(() => !settled);
  const done = work.then(
    () => false,
    (e: unknown) => {
      if (e instanceof StoppedNow) return true;
      throw e;
    },
  );
  return Promise.race([done, stopped]);
}

/** A failed run: marked failed in the store and on the workflow, unless it never owned the run. */
async function fail(run: RunState, e: Error) {
  run.phase = 'failed';
  if (!run.owned && patched(Patch.startOwnsRun)) {
    // Refused before owning the run (e.g. its id is taken): the existing run is not touched.
    upsertSearchAttributes([
      { key: TroupeStatus, value: 'failed' },
      { key: TroupeTeam, value: run.config.team },
    ]);
    setCurrentDetails(
      `**${run.config.team}** run \`${run.runId}\` not started: ${e.message}${(e as { cause?: Error }).cause ? `: ${(e as { cause: Error }).cause.message}` : ''}`,
    );
    return;
  }
  run.publish();
  // Accepted changes not yet applied are kept, so troupe resume continues with them.
  if (run.pendingChanges.length > 0 && patched(Patch.pendingChangesOnFailure)) await applyPendingChanges(run, finalBookkeeping).catch(() => undefined);
  await finalBookkeeping
    .recordEvent({ runId: run.runId, step: run.step, kind: 'run-failed', detail: { message: e.message, cause: (e as { cause?: Error }).cause?.message } })
    .catch(() => undefined);
  await finalBookkeeping.setRunStatus({ runId: run.runId, status: 'failed' }).catch(() => undefined);
}
