/**
 * The rollouts a run has in flight, as their parts report them (rolloutProgressSignal: a batched
 * rollout activity, a durable rollout node) or as the run sees its own episode children finish:
 * episodes done / planned, failures and their most common error, turns per second and an ETA.
 * Pure: times are the workflow's clock (ms), passed in. test/unit/training/rollout-progress.test.ts.
 */
import type { Split } from '../../agents/tasks';
import { addEpisode, type RolloutPartProgress, type RolloutProgressView } from '../../schema/rollout-progress';

type Counts = Pick<RolloutPartProgress, 'done' | 'failed' | 'turns' | 'errors'>;

interface Rollout {
  step: number;
  split: Split;
  planned: number;
  startedMs: number;
  /** When the latest report came: rates are as of then. */
  reportedMs: number;
  /** Each part's latest report, by its first episode index. */
  parts: Map<number, Counts>;
}

const key = (step: number, split: Split) => `${split}:${step}`;

export class RolloutProgress {
  private readonly rollouts = new Map<string, Rollout>();

  /** A rollout of `planned` episodes starts. */
  begin(step: number, split: Split, planned: number, nowMs: number) {
    this.rollouts.set(key(step, split), { step, split, planned, startedMs: nowMs, reportedMs: nowMs, parts: new Map() });
  }

  /** A rollout ended (done, failed or left behind): it shows no more. */
  end(step: number, split: Split) {
    this.rollouts.delete(key(step, split));
  }

  /** A part's counts so far (they replace its earlier report); one of a rollout not in flight is ignored. False then. */
  report(p: RolloutPartProgress, nowMs: number): boolean {
    const r = this.rollouts.get(key(p.step, p.split));
    if (!r) return false;
    r.parts.set(p.from, { done: p.done, failed: p.failed, turns: p.turns, errors: p.errors });
    r.reportedMs = nowMs;
    return true;
  }

  /** One episode of part `from` finished (durable episodes the run sees itself). */
  episodeDone(step: number, split: Split, from: number, e: { status: string; turns?: number; error?: string }, nowMs: number) {
    const r = this.rollouts.get(key(step, split));
    if (!r) return;
    const c = r.parts.get(from) ?? { done: 0, failed: 0, turns: 0, errors: {} };
    r.parts.set(from, c);
    addEpisode(c, e);
    r.reportedMs = nowMs;
  }

  /** Part `from` finished with `done` episodes, `failed` of them failed (its turns and errors as last reported). */
  partFinished(step: number, split: Split, from: number, done: number, failed: number, nowMs: number) {
    const r = this.rollouts.get(key(step, split));
    if (!r) return;
    const c = r.parts.get(from) ?? { done: 0, failed: 0, turns: 0, errors: {} };
    r.parts.set(from, { ...c, done, failed });
    r.reportedMs = nowMs;
  }

  /** The rollout the run waits on: an eval's, else the earliest step's. */
  view(): RolloutProgressView | null {
    const all = [...this.rollouts.values()].sort((a, b) => (a.split === b.split ? a.step - b.step : a.split === 'eval' ? -1 : 1));
    const r = all[0];
    if (!r) return null;
    let done = 0;
    let failed = 0;
    let turns = 0;
    const errors = new Map<string, number>();
    for (const c of r.parts.values()) {
      done += c.done;
      failed += c.failed;
      turns += c.turns;
      for (const [error, n] of Object.entries(c.errors)) errors.set(error, (errors.get(error) ?? 0) + n);
    }
    const [top] = [...errors.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const seconds = (r.reportedMs - r.startedMs) / 1000;
    const rate = done > 0 && seconds > 0 ? done / seconds : null;
    return {
      step: r.step,
      split: r.split,
      done,
      planned: r.planned,
      failed,
      reason: top ? { error: top[0], count: top[1] } : null,
      turnsPerSecond: turns > 0 && seconds > 0 ? turns / seconds : null,
      etaSeconds: rate === null ? null : Math.max(0, r.planned - done) / rate,
    };
  }
}
