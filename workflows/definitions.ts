/**
 * Signals, updates and queries of a training run, shared by the workflow and
 * every client (CLI, tests, the Temporal UI's "Send Signal").
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { OptimizerChange } from '../schema/optimizer';
import type { RolloutProgressView } from '../schema/rollout-progress';

export { rolloutProgressSignal, type RolloutPartProgress, type RolloutProgressView } from '../schema/rollout-progress';

/** Finish the current step, then wait. */
export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
/** How a run stops: after its current step and a final eval (default), or `now`. */
export interface StopOptions {
  /** Cancel the step in flight (its rollout's episodes end at once), skip the final eval; committed versions stay. */
  now?: boolean;
}

/** Finish the current step, run a final eval, close as stopped; with `{ now: true }`, cancel the step in flight instead. */
export const stopSignal = defineSignal<[StopOptions?]>('stop');

export type { OptimizerChange };

/**
 * Change optimizer settings, e.g. `{"models": {"policy": {"lr": 0.01}}}`. Checked
 * strictly (schema/optimizer.ts optimizerChangeSchema) before it is accepted: a
 * bad change is rejected, naming each field, and never recorded. Takes effect at
 * the returned step.
 */
export const setOptimizerUpdate = defineUpdate<{ effectiveStep: number }, [OptimizerChange]>('setOptimizer');

export interface RunStatusView {
  runId: string;
  team: string;
  status: 'starting' | 'running' | 'paused' | 'stopping' | 'evaluating' | 'completed' | 'stopped' | 'failed';
  /** Steps completed so far. */
  step: number;
  steps: number;
  versions: Record<string, number>;
  /** Mean reward components per agent in the last completed step. */
  rewards: Record<string, Record<string, number>>;
  lastEval: { step: number; success: number } | null;
  initialEval: { step: number; success: number } | null;
  /** Seconds per step, averaged over this execution. */
  secondsPerStep: number | null;
  failedEpisodes: number;
  /** The rollout in flight (a step's or an eval's), live; null between rollouts and in runs that report none. */
  progress?: RolloutProgressView | null;
}

export const statusQuery = defineQuery<RunStatusView>('status');

/** One stage of a pipeline as its status query shows it. */
export interface PipelineStageView {
  name: string;
  after: string[];
  runId: string;
  /** kept: it ended in an earlier execution of the pipeline and is not run again. */
  state: 'waiting' | 'running' | 'completed' | 'stopped' | 'kept' | 'failed';
  /** Steps its run committed, once it ended. */
  steps?: number;
  /** Its run's final eval success, when this execution ran it to the end. */
  eval?: number;
  /** An export stage (its runId: the run it exports from): what it wrote, once it ended. */
  export?: { model: string; version: number; out: string };
  error?: string;
}

export interface PipelineStatusView {
  pipelineId: string;
  name: string;
  status: 'running' | 'completed' | 'failed';
  stages: PipelineStageView[];
}

/** What an export stage wrote, as status and the Temporal UI show it. */
export const exportText = (e: NonNullable<PipelineStageView['export']>) => `${e.model} v${e.version} → ${e.out}`;

export const pipelineStatusQuery = defineQuery<PipelineStatusView>('pipelineStatus');
