/**
 * Stops durable episodes whose code never yields (a user's `while (true) {}`).
 *
 * A durable episode's function runs in the workflow sandbox, which the SDK interrupts after
 * its isolate execution timeout (5 s). That fails the workflow task, and Temporal retries it
 * for as long as the run lasts: the episode never ends and its run waits on it forever. The
 * SDK raises the timeout outside the sandbox, so no workflow code can catch it; what sees it is
 * the SDK core, which logs "Failing workflow task" with the execution's run id and the failure.
 * The control worker forwards the core's log to the logger this watch makes. On the first such
 * timeout of an execution (the core logs later attempts' failures only at debug level, and a
 * task the server timed out not at all), the watch looks the execution up and, if it is an
 * episode, follows its pending workflow task on the server: once that task has failed `strikes`
 * times in a row, it terminates the episode with a reason naming its last turn; the run stores it as a failed
 * episode and goes on (workflows/training-run/rollout.ts, episodeChild). A run's own workflow
 * is never terminated here.
 */
import type { Client } from '@temporalio/client';
import type { LogLevel, LogMetadata, Logger } from '@temporalio/common';
import { DefaultLogger } from '@temporalio/worker';

/** The workflow types of durable episodes (workflows/episode.ts): one episode, or several of a plan. */
const EPISODE_WORKFLOWS = new Set(['episodeWorkflow', 'episodeGroupWorkflow']);
/** The core's log line for a failed workflow task (its fields arrive as meta runId, failure). */
const FAILING_TASK = 'Failing workflow task';
/** Node's vm reports the interrupted script with this message ("Script execution timed out after 5000ms"). */
const TIMED_OUT = /Script execution timed out/;
/** The activity a durable episode's agent turn is (activities/training/pool.ts). */
const TURN_ACTIVITY = 'generateTurn';

export interface EpisodeWatchOptions {
  /** The worker's isolate execution timeout, for the reason (the SDK's default: 5 s). */
  limitMs: number;
  /** Failed attempts of one workflow task before it is stopped: more than one, so a single slow task on a loaded host is not mistaken for a loop. */
  strikes?: number;
  /** How often the server is asked about a followed execution, and for how long at most. */
  pollMs?: number;
  followMs?: number;
  log?: (line: string) => void;
}

export class EpisodeWatch {
  private client?: Client;
  private readonly strikes: number;
  private readonly following = new Set<string>();
  private readonly log: (line: string) => void;

  constructor(private readonly opts: EpisodeWatchOptions) {
    this.strikes = opts.strikes ?? 2;
    this.log = opts.log ?? ((line) => console.log(line));
  }

  /** The client the watch terminates with (the worker's connection), once it exists. */
  attach(client: Client): void {
    this.client = client;
  }

  /**
   * A logger for Runtime.install, with the core's log forwarded to it
   * (telemetryOptions.logging.forward): logs as `inner` does and watches what it logs.
   */
  logger(inner: Logger = new DefaultLogger('INFO')): Logger {
    return {
      log: (level, message, meta) => (this.observe(level, message, meta), inner.log(level, message, meta)),
      trace: (message, meta) => inner.trace(message, meta),
      debug: (message, meta) => inner.debug(message, meta),
      info: (message, meta) => inner.info(message, meta),
      warn: (message, meta) => (this.observe('WARN', message, meta), inner.warn(message, meta)),
      error: (message, meta) => inner.error(message, meta),
    };
  }

  private observe(level: LogLevel, message: string, meta: LogMetadata | undefined): void {
    if (level !== 'WARN' || message !== FAILING_TASK || !meta) return;
    if (typeof meta.failure !== 'string' || !TIMED_OUT.test(meta.failure) || typeof meta.runId !== 'string') return;
    const runId = meta.runId;
    if (this.following.has(runId)) return;
    this.following.add(runId);
    this.follow(runId)
      .catch((e: unknown) => {
        this.log(`troupe control worker: could not stop the execution ${runId} that keeps timing out: ${(e as Error)?.message ?? String(e)}`);
      })
      .finally(() => this.following.delete(runId));
  }

  /** Follows an execution whose task timed out until it ends, recovers, or keeps failing and is stopped. */
  private async follow(runId: string): Promise<void> {
    if (!this.client) throw new Error('the watch has no client yet');
    const { pollMs = 2000, followMs = 10 * 60_000 } = this.opts;
    const until = Date.now() + followMs;
    let workflowId: string | undefined;
    let grouped = false;
    for (; Date.now() < until; await new Promise((r) => setTimeout(r, pollMs))) {
      if (!workflowId) {
        // the core names the execution by run id only: visibility knows its workflow
        for await (const w of this.client.workflow.list({ query: `RunId = '${runId}'` })) {
          if (!EPISODE_WORKFLOWS.has(w.type)) return;
          workflowId = w.workflowId;
          grouped = w.type !== 'episodeWorkflow';
        }
        if (!workflowId) continue;
      }
      const handle = this.client.workflow.getHandle(workflowId, runId);
      const run = await handle.describe();
      if (run.status.name !== 'RUNNING') return;
      const task = run.raw.pendingWorkflowTask;
      if (!task) return; // the task went through: a slow task, not a loop
      if ((task.attempt ?? 0) <= this.strikes) continue;
      const history = await handle.fetchHistory();
      const reason = stoppedReason(turnsDone(history.events ?? []), this.opts.limitMs, grouped);
      await handle.terminate(reason);
      this.log(`troupe control worker: stopped episode ${workflowId}: ${reason}`);
      return;
    }
  }
}

type HistoryEvent = NonNullable<Awaited<ReturnType<ReturnType<Client['workflow']['getHandle']>['fetchHistory']>>['events']>[number];

/** Agent turns the episode finished: its completed turn activities. */
export function turnsDone(events: readonly HistoryEvent[]): number {
  const turnScheduled = new Set<string>();
  let done = 0;
  for (const e of events) {
    const scheduled = e.activityTaskScheduledEventAttributes;
    if (scheduled?.activityType?.name === TURN_ACTIVITY) turnScheduled.add(String(e.eventId));
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed && turnScheduled.has(String(completed.scheduledEventId))) done++;
  }
  return done;
}

/** The termination reason, which the run stores as the error of each episode it stopped (all of a group's unfinished ones). */
export function stoppedReason(turns: number, limitMs: number, grouped = false): string {
  const of = grouped ? ' of the episodes in its workflow' : '';
  const after =
    turns === 0 ? (grouped ? 'before their first agent turns' : 'before its first agent turn') : `after ${turns} agent turn${turns === 1 ? '' : 's'}${of}`;
  return `episode: its code ran ${limitMs / 1000} s without yielding ${after} (a synchronous loop? durable episode code may not block for more than ${limitMs / 1000} s); it was stopped`;
}
