/**
 * Signals, updates and queries of a training run, shared by the workflow and
 * every client (CLI, tests, the Temporal UI's "Send Signal").
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { OptimizerChange } from '../schema/optimizer';

/** Finish the current step, then wait. */
export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
/** Finish the current step, run a final eval, complete. */
export const stopSignal = defineSignal('stop');

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
}

export const statusQuery = defineQuery<RunStatusView>('status');
