/**
 * Episode retention in the background (issue #49): the control worker prunes every run's
 * training episodes by a policy (activities/store/episode-retention.ts) every interval, on a
 * database connection of its own and a timer in the worker process, never in workflow code
 * and never on a run's critical path. Passes do not overlap; a failed pass is logged and the
 * next interval tries again. Two workers' passes may meet: each batch locks its episode rows
 * and counts only what it deleted, so nothing is deleted or counted twice.
 */
import type { Sql } from '../../infra/db';
import { errorMessage } from '../../infra/errors';
import {
  describeEpisodePolicy,
  describeWorkingState,
  planEpisodePrune,
  pruneEpisodes,
  validateEpisodePolicy,
  type EpisodePruneResult,
  type EpisodeRetentionPolicy,
} from './episode-retention';

export interface RetentionLoopOptions {
  intervalMs: number;
  /** Episodes per transaction (default pruneEpisodes'). */
  batchSize?: number;
  log: (line: string) => void;
  /** Called after each pass with what it pruned (runs with nothing pruned left out), or its error. */
  onPass?: (pruned: EpisodePruneResult[], error?: unknown) => void;
}

export class EpisodeRetentionLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly sql: Sql,
    private readonly policy: EpisodeRetentionPolicy,
    private readonly opts: RetentionLoopOptions,
  ) {
    validateEpisodePolicy(policy);
  }

  /** One pass over every run: what it pruned, per run that lost episodes. */
  async pass(): Promise<EpisodePruneResult[]> {
    const out: EpisodePruneResult[] = [];
    for (const plan of await planEpisodePrune(this.sql, this.policy)) {
      if (this.stopped) break;
      const done = await pruneEpisodes(this.sql, plan, this.policy, this.opts.batchSize);
      if (done.episodes > 0 || done.carriedEpisodes > 0 || done.partialRollouts > 0) {
        out.push(done);
        this.opts.log(
          `troupe retention: pruned ${done.episodes} training episode(s) of ${done.runId} (${done.turns} turn(s), ${done.gatewayCalls} journaled call(s); ${describeEpisodePolicy(this.policy)})${describeWorkingState(done)}`,
        );
      }
    }
    return out;
  }

  /** Starts passes: the first at once, then one every interval after the previous ended. */
  start(): void {
    this.opts.log(`troupe retention: ${describeEpisodePolicy(this.policy)}; pruning every ${this.opts.intervalMs / 60_000} minute(s)`);
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.pass().then(
        (pruned) => this.opts.onPass?.(pruned),
        (e: unknown) => {
          this.opts.log(`troupe retention: a pass failed (${errorMessage(e)}); trying again in ${this.opts.intervalMs / 60_000} minute(s)`);
          this.opts.onPass?.([], e);
        },
      );
      void this.running.finally(() => this.schedule(this.opts.intervalMs));
    }, ms);
    this.timer.unref();
  }

  /** No new pass starts; waits for the one in progress (it stops between runs). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
