/**
 * Ids of the patched() branches in workflow code. A run started before a change
 * replays the old branch; one started after records the marker and takes the new
 * one. Each id is listed, with what it guards, in docs/contributing.md
 * ("Workflow patches"); test/unit/replay/patches.test.ts keeps the two in step.
 */
export const Patch = {
  /** planStep/finishStep as local activities (before: ordinary activities). */
  localStepBookkeeping: 'local-step-bookkeeping',
  /** Step and eval plans by reference (before: the full episode list). */
  stepPlanReference: 'step-plan-reference',
  /** A resume redoes an eval the resume point does not list as finished. */
  evalResumePoint: 'eval-resume-point',
  /** A run without trainable signal for maxStepsWithoutSignal steps fails. */
  failWithoutSignal: 'fail-without-signal',
  /** TroupeStatus "continued" on an execution that continues as new. */
  continuedStatus: 'continued-status',
  /** A refused start (run id taken) leaves the store alone. */
  startOwnsRun: 'start-owns-run',
  /** An invalid config sets TroupeStatus and TroupeTeam and Current Details. */
  validationFailureAttributes: 'validation-failure-attributes',
  /** Accepted optimizer changes are recorded when the run fails. */
  pendingChangesOnFailure: 'pending-changes-on-failure',
  /** The dashboard link in Current Details (a local activity asks for it). */
  dashboardLink: 'dashboard-link',
  /** A `paused` run event. */
  pauseEvent: 'pause-event',
  /** Asynchronous runs (staleness > 0); runs with every k = 0 never reach it. */
  boundedStaleness: 'bounded-staleness',
  /** Pool name -> task queue from the control worker's configuration (before: the pool's name). */
  poolTaskQueues: 'pool-task-queues',
  /** A setOptimizer change is recorded in the store (an `optimizer-change-accepted` event) before the update returns. */
  acceptedChangeEvent: 'accepted-change-event',
  /**
   * Every other patch decided in the first activation, before any local activity, and the
   * continue-as-new suggestion read only where a task's own events resolve a step (see
   * decidePatches): what a local activity resolves during replay arrives in an activation
   * that carries neither the patch notifications nor the suggestion of the task it ran in.
   */
  decideAtStart: 'decide-at-start',
  /** Partial rollouts (run setting partialRollouts); runs without the setting never reach it. */
  partialRollouts: 'partial-rollouts',
  /** A durable episode child that was terminated (a runaway episode, or by hand) is stored as a failed episode; the run goes on. */
  stoppedEpisodes: 'stopped-episodes',
  /** Durable rollouts of more than rolloutNodeSize episodes fan out through rollout nodes (before: every episode a child of the run). */
  rolloutTree: 'rollout-tree',
  /** The run's durable episodes score and store themselves by a local activity (input recordLocally; before: an ordinary activity on the control queue). */
  localRecordEpisode: 'local-record-episode',
  /** Partial rollouts in asynchronous runs: a step's partial rollout starts once the one before it, which carries episodes into it, committed. */
  stalePartialRollouts: 'stale-partial-rollouts',
  /** A run of a team with run defaults (TeamDefinition.run) takes them where its config leaves the field out. */
  teamRunDefaults: 'team-run-defaults',
  /** A durable rollout whose first FAIL_FAST finished episodes all failed the same way fails the run (EpisodesFailing), as a batched one does. */
  durableFailFast: 'durable-fail-fast',
  /** A model with an init source (run config init, fork) gets it in its initModel input; runs without either never reach it. */
  initFrom: 'init-from',
  /** Frozen models (run config frozen) get no update; runs without frozen models never reach it. */
  frozenModels: 'frozen-models',
  /** SFT runs (run config sft): a step updates each model on stored turns, without planning or rolling out; runs without sft never reach it. */
  sftSteps: 'sft-steps',
  /** Durable episodes several to a workflow (run setting episodesPerWorkflow > 1); runs without the setting never reach it. */
  episodeGroups: 'episode-groups',
} as const;

/**
 * Runs started with decide-at-start decide every patch here, in their first activation,
 * so each later patched() call returns this decision (the SDK keeps it) whatever
 * activation it runs in. Older runs replay the per-call decisions they recorded.
 */
export function decidePatches(patched: (id: string) => boolean): boolean {
  if (!patched(Patch.decideAtStart)) return false;
  for (const id of Object.values(Patch)) if (id !== Patch.validationFailureAttributes && id !== Patch.decideAtStart) patched(id);
  return true;
}

export type PatchId = (typeof Patch)[keyof typeof Patch];
