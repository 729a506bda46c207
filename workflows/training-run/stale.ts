/**
 * Asynchronous runs (bounded staleness, k > 0 for some model): the rollout of
 * step t samples model m's version of step max(0, t − k_m) and starts as soon
 * as that version exists, so it runs while the updates of steps t − k … t − 1
 * are in flight; updates still commit in step order. The schedule depends on
 * t and k only, never on timing.
 *
 * With partial rollouts the rollout of step t continues the episodes the rollout of
 * step t − 1 carried into it, so it starts once that one committed as well: each
 * carried episode is continued by exactly one rollout. Its new tokens are sampled by
 * the version of step max(0, t − k_m), its carried ones keep the versions that
 * sampled them (and their own behaviour log-probs, which the off-policy correction uses).
 */
import { patched } from '@temporalio/workflow';
import { partialShape, stalenessOf, type PartialShape } from '../../schema/run-config';
import { Patch } from '../patches';
import { control, controlLocal } from './activities';
import { rolloutPartialStep, rolloutPlan } from './rollout';
import type { RolloutDone, RunState } from './state';

export class StalePipeline {
  private readonly minLag: number;
  private readonly maxLag: number;
  /** Partial rollouts: groups in flight and whole groups that end a step's rollout. */
  private readonly partial: PartialShape | undefined;
  /** Serving versions at the steps a rollout may still need (step − maxLag … step). */
  private readonly versionsAt: Record<number, Record<string, number>> = {};
  private readonly rollouts = new Map<number, Promise<RolloutDone>>();
  /** The last update's off-policy metrics per model (Current Details). */
  offPolicyMetrics: Record<string, Record<string, number>> = {};

  constructor(private readonly run: RunState) {
    this.minLag = Math.min(...run.models.map((m) => this.lag(m)));
    this.maxLag = Math.max(...run.models.map((m) => this.lag(m)));
    // Runs without partialRollouts never reach patched(): their histories stay as they were.
    const shape = partialShape(run.config);
    this.partial = shape && patched(Patch.stalePartialRollouts) ? shape : undefined;
  }

  /** Whether some model of the run samples stale versions (k > 0). */
  static wanted(run: RunState): boolean {
    return Math.max(...run.models.map((m) => stalenessOf(run.config, m))) > 0;
  }

  /** Model m's staleness k_m. */
  lag(model: string): number {
    return stalenessOf(this.run.config, model);
  }

  /** Versions of the steps in the lag window, before the first asynchronous step of this execution; the rollouts a continued execution carries. */
  async start(rolledOut: Record<number, RolloutDone> | undefined) {
    const { run, maxLag } = this;
    const step = run.step;
    const earlier = Array.from({ length: Math.min(maxLag, step) }, (_, i) => step - maxLag + i).filter((s) => s >= 0);
    if (earlier.length > 0) Object.assign(this.versionsAt, await control.versionsAt({ runId: run.runId, models: run.models, steps: earlier }));
    this.versionsAt[step] = run.versions;
    for (const [s, done] of Object.entries(rolledOut ?? {})) this.rollouts.set(Number(s), Promise.resolve(done));
  }

  /** Starts every rollout whose versions exist: step s samples model m's version of step max(0, s − k_m). */
  startRollouts() {
    const { run } = this;
    for (let s = run.step; s <= Math.min(run.step + this.minLag, run.config.steps - 1); s++) {
      if (this.rollouts.has(s)) continue;
      const serving = Object.fromEntries(run.models.map((m) => [m, this.versionsAt[Math.max(0, s - this.lag(m))]![m]!]));
      const done = this.rolloutStep(s, serving);
      done.catch(() => undefined); // its failure surfaces when its step awaits it
      this.rollouts.set(s, done);
    }
  }

  /** The finished rollout of the current step (started by startRollouts). */
  async take(): Promise<RolloutDone> {
    const step = this.run.step;
    const done = await this.rollouts.get(step)!;
    this.rollouts.delete(step);
    return done;
  }

  /** The current step's update committed (run.step has moved on): its versions serve later rollouts. */
  committed() {
    const { step, versions } = this.run;
    this.versionsAt[step] = versions;
    delete this.versionsAt[step - this.maxLag - 1];
  }

  /** Waits for the rollouts in flight (they finish and are stored; none is left running). */
  async drain(): Promise<Record<number, RolloutDone>> {
    return Object.fromEntries(await Promise.all([...this.rollouts].map(async ([s, p]) => [s, await p] as const)));
  }

  /** For Current Details. */
  details(step: number) {
    return {
      lags: Object.fromEntries(this.run.models.map((m) => [m, this.lag(m)])),
      ahead: [...this.rollouts.keys()].filter((s) => s >= step),
      offPolicy: this.offPolicyMetrics,
    };
  }

  private async rolloutStep(at: number, serving: Record<string, number>): Promise<RolloutDone> {
    const { run } = this;
    if (this.partial) {
      // Absent: step at − 1's rollout committed already (taken, or in an earlier execution).
      const carrying = this.rollouts.get(at - 1);
      if (carrying) await carrying;
      return rolloutPartialStep(run, at, this.partial, serving);
    }
    const t0 = Date.now();
    const planned = await controlLocal.planStep({
      ...run.ref,
      runId: run.runId,
      step: at,
      seed: run.config.seed,
      groupsPerStep: run.config.groupsPerStep,
      groupSize: run.config.groupSize,
    });
    const failed = await rolloutPlan(run, planned, undefined, serving);
    return { seconds: (Date.now() - t0) / 1000, episodes: planned.episodes, failed };
  }
}
