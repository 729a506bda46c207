/**
 * Everything a training run execution knows, in one object: what continue-as-new
 * carries (toCarried), what the status query answers (view) and what the Web UI
 * shows (publish: search attributes and Current Details).
 */
import { setCurrentDetails, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { EvalSummary, TeamRef } from '../../activities/training/control';
import { TroupeEvalSuccess, TroupeRunId, TroupeStatus, TroupeStep, TroupeTeam } from '../../infra/search-attributes';
import type { OptimizerChange, OptimizerConfig } from '../../schema/optimizer';
import type { RunStatusView } from '../definitions';
import { renderDetails } from './details';
import { RolloutProgress } from './progress';
import type { Resolved } from './resolve';
import type { StalePipeline } from './stale';

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
export interface RolloutDone {
  seconds: number;
  episodes: number;
  failed: number;
  /** Partial rollouts: the step's partial.* metrics (kept out of the update's input). */
  partial?: Record<string, number>;
}

/** Thrown in a step left behind by a stop --now where it would start its update (steps.ts updateStep). */
export class StoppedNow extends Error {
  constructor() {
    super('stopped now');
    this.name = 'StoppedNow';
  }
}

export class RunState {
  readonly runId: string;
  readonly models: string[];
  /** How activities load the team. */
  readonly ref: TeamRef;
  /** Config (with its current optimizer), team and resolved settings. */
  resolved: Resolved;
  phase: RunStatusView['status'] = 'starting';
  /** Steps completed so far. */
  step: number;
  versions: Record<string, number>;
  paused: boolean;
  stopRequested: boolean;
  /** `troupe stop --now`: the step in flight is left behind (workflow.ts stepOrStopNow), no final eval. */
  stopNow = false;
  /** A step's update and its bookkeeping are running: a stop --now waits for them (what they commit is the step's). */
  updating = false;
  /** The rollouts in flight, live (Current Details, the status query). */
  readonly progress = new RolloutProgress();
  initialEval: EvalSummary | null;
  lastEval: EvalSummary | null;
  failedEpisodes: number;
  stepsWithoutSignal: number;
  /** setOptimizer changes accepted, applied at the next step. */
  readonly pendingChanges: OptimizerChange[];
  /** Mean reward components per agent in the last completed step. */
  rewards: Record<string, Record<string, number>> = {};
  /** pool name -> task queue, from the control worker's configuration (recorded in history); absent in runs that predate it. */
  poolQueues: Record<string, string> | undefined;
  /** The run's dashboard page, from the control worker's configuration (recorded in history). */
  dashboardPage: string | null = null;
  /** Whether this execution may write to the run in the store (it started or continued it). */
  owned: boolean;
  /** Asynchronous runs (staleness > 0 for some model): rollouts in flight; decided once per execution. */
  pipeline: StalePipeline | null = null;
  /** Runs with the decide-at-start patch: patches decided in the first activation, continue-as-new suggestion noted at each update (noteSuggestion). */
  decidedAtStart = false;
  /** Whether Temporal suggested continue-as-new in an activation that resolved this step's update. */
  private suggested = false;
  private readonly started = Date.now();
  private stepsThisExecution = 0;

  constructor(resolved: Resolved, runId: string, carried: Carried | null | undefined) {
    this.resolved = { ...resolved, config: { ...resolved.config, runId } };
    this.runId = runId;
    this.models = Object.keys(resolved.team.models);
    this.ref = { team: resolved.config.team, teamOptions: resolved.config.teamOptions };
    this.step = carried?.startStep ?? 0;
    this.versions = carried?.versions ?? {};
    this.paused = carried?.paused ?? false;
    this.stopRequested = carried?.stopRequested ?? false;
    this.initialEval = carried?.initialEval ?? null;
    this.lastEval = carried?.lastEval ?? null;
    this.failedEpisodes = carried?.failedEpisodes ?? 0;
    this.stepsWithoutSignal = carried?.stepsWithoutSignal ?? 0;
    this.pendingChanges = [...(carried?.pendingChanges ?? [])];
    this.owned = !!carried;
  }

  get config() {
    return this.resolved.config;
  }

  get settings() {
    return this.resolved.settings;
  }

  /** A step's update committed: its versions and rewards. */
  stepDone(versions: Record<string, number>, rewards: Record<string, Record<string, number>>) {
    this.versions = versions;
    this.rewards = rewards;
    this.step++;
    this.stepsThisExecution++;
  }

  /**
   * Called where a step's update resolves: an activity result, delivered with the task that
   * recorded it, live and in replay alike. Code after a local activity may run in another
   * activation in replay than it did live, and an activation that delivers only a local
   * activity's result does not carry its task's suggestion.
   */
  noteSuggestion() {
    this.suggested ||= workflowInfo().continueAsNewSuggested;
  }

  /** Whether to continue as new after this step. */
  continueAsNewSuggested(): boolean {
    return this.decidedAtStart ? this.suggested : workflowInfo().continueAsNewSuggested;
  }

  toCarried(rolledOut?: Record<number, RolloutDone>): Carried {
    const { step, versions, paused, stopRequested, initialEval, lastEval, failedEpisodes, pendingChanges, stepsWithoutSignal } = this;
    return {
      startStep: step,
      versions,
      optimizer: this.config.optimizer,
      paused,
      stopRequested,
      initialEval,
      lastEval,
      failedEpisodes,
      pendingChanges,
      stepsWithoutSignal,
      ...(rolledOut ? { rolledOut } : {}),
    };
  }

  view(): RunStatusView {
    const { runId, step, versions, rewards, lastEval, initialEval, failedEpisodes } = this;
    return {
      runId,
      team: this.config.team,
      status: this.phase,
      step,
      steps: this.config.steps,
      versions,
      rewards,
      lastEval: lastEval && { step: lastEval.step, success: lastEval.success },
      initialEval: initialEval && { step: initialEval.step, success: initialEval.success },
      secondsPerStep: this.stepsThisExecution > 0 ? (Date.now() - this.started) / 1000 / this.stepsThisExecution : null,
      failedEpisodes,
      progress: this.progress.view(),
    };
  }

  /** Search attributes and Current Details, for the Web UI and `troupe runs`. */
  publish() {
    upsertSearchAttributes([
      { key: TroupeRunId, value: this.runId },
      { key: TroupeTeam, value: this.config.team },
      { key: TroupeStep, value: this.step },
      { key: TroupeStatus, value: this.phase },
      ...(this.lastEval ? [{ key: TroupeEvalSuccess, value: this.lastEval.success }] : []),
    ]);
    this.publishDetails();
  }

  /** Current Details alone (no command): what a rollout's progress report changes. */
  publishDetails() {
    const { runId, step, phase, rewards, lastEval, initialEval, failedEpisodes, dashboardPage } = this;
    setCurrentDetails(
      renderDetails({
        team: this.config.team,
        runId,
        step,
        steps: this.config.steps,
        phase,
        rewards,
        lastEval,
        initialEval,
        failedEpisodes,
        staleness: this.pipeline?.details(step),
        pendingChanges: this.pendingChanges.length,
        dashboardPage,
        progress: this.progress.view(),
      }),
    );
  }
}
