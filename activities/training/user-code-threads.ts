/**
 * Durable episodes' tool calls and scoring run in threads, not on the control worker's own
 * thread. A tool or reward is user code: a synchronous loop in it would block the control
 * worker's event loop (every workflow task, every activity, its heartbeats) for good, and the
 * retried activity would block the restarted worker again. In a thread it blocks only that
 * thread, which the worker ends once the call has run past its limit: the call is answered as
 * stopped, naming the tool or the rewards, and the episode fails; the worker goes on.
 *
 * One call per thread at a time, so a thread that does not answer is blocked by the call it
 * runs, and nothing else is lost when it is ended. Threads are made as needed (up to `size`
 * at once; calls beyond wait) and kept for later calls. (Batched episodes run their tools and
 * scoring on their episode's thread: episode-threads.ts.)
 *
 * A tool that holds state per episode (mcpServer scope 'episode': runtimeHints' perEpisode) has
 * the episode's calls sent to the thread that ran its first one, waiting for it when it is busy,
 * so the episode's server is the one its earlier calls reached; when the episode is scored
 * (endEpisode), every thread is told, and releases what its tools hold for it.
 */
import { Worker } from 'node:worker_threads';
import type { ToolCallReply, ToolCallRequest } from '../../agents/episode';
import type { AnyTeam } from '../../agents/team';
import { episodeEnded, runtimeHints } from '../../agents/tool';
import { errorMessage } from '../../infra/errors';
import type { Trajectory } from '../../schema/trajectory';
import type { EpisodeMeta, StoredEpisode } from '../store/trajectories';
import { scoredEpisode, type TeamRef } from './control';
import { endChildrenWith } from './thread-children';
import { executeTool } from '../tools';

type Call = { t: 'tool'; team: TeamRef; req: ToolCallRequest } | { t: 'score'; team: TeamRef; meta: EpisodeMeta; trajectory: Trajectory };
/** Not a call (nothing is answered): the episode ended, its tools release what they hold for it. */
type EndEpisode = { t: 'end'; episodeId: string };

type FromThread = { t: 'started' } | { t: 'done'; value: ToolCallReply | StoredEpisode } | { t: 'failed'; message: string };

/** Episodes whose thread is remembered (perEpisode tools), at most: an episode scored on another worker is never forgotten otherwise. */
const HOMES = 4096;

/** How long past its own timeout a tool may go unanswered before its thread counts as blocked: executeTool answers a timeout itself. */
const TOOL_GRACE_MS = 2_000;

const TSX = require.resolve('tsx/cjs');
const THREAD_SHIM = `const { workerData } = require('node:worker_threads'); require(workerData.tsx); require(workerData.entry);`;

// ---------------------------------------------------------------------------
// The thread's side.

/** What a thread runs (processes/user-code-thread.ts wires it): calls as they come, one at a time. */
export function serveUserCode(
  port: { on(e: 'message', f: (m: Call | EndEpisode) => void): void; postMessage(m: FromThread): void },
  load: (ref: TeamRef) => AnyTeam,
) {
  const teams = new Map<string, AnyTeam>();
  const teamOf = (ref: TeamRef) => {
    const key = JSON.stringify([ref.team, ref.teamOptions ?? {}]);
    let team = teams.get(key);
    if (!team) teams.set(key, (team = load(ref)));
    return team;
  };
  port.on('message', (call: Call | EndEpisode) => {
    if (call.t === 'end') return void episodeEnded(call.episodeId);
    void (async () => {
      try {
        const team = teamOf(call.team);
        // the limit counts from here: loading the team is the worker's time, not the call's
        port.postMessage({ t: 'started' });
        const value = call.t === 'tool' ? await executeTool(team, call.req) : scoredEpisode(team, call.meta, call.trajectory);
        port.postMessage({ t: 'done', value });
      } catch (e) {
        port.postMessage({ t: 'failed', message: errorMessage(e) });
      }
    })();
  });
}

// ---------------------------------------------------------------------------
// The worker's side.

const stoppedMessage = (what: string, ms: number) => `its code ran ${(ms / 1000).toFixed(1)} s without returning (a synchronous loop? ${what}); it was stopped`;

export class UserCodeThreads {
  private readonly idle: Worker[] = [];
  /** Every thread not ended. */
  private readonly all = new Set<Worker>();
  /** The thread of each episode that called a perEpisode tool (oldest first), where its state is. */
  private readonly homes = new Map<string, Worker>();
  private live = 0;
  private readonly waiting: Array<() => void> = [];
  private closed = false;

  /** `entry`: the thread's wiring file (processes/user-code-thread.ts). */
  constructor(
    private readonly entry: string,
    private readonly size = 4,
  ) {}

  /**
   * One tool call. A tool that runs past its timeout without its thread answering is stopped:
   * the reply is a tool error with `fault` set, which fails the episode (runEpisode).
   */
  async callTool(team: AnyTeam, ref: TeamRef, req: ToolCallRequest, signal?: AbortSignal): Promise<ToolCallReply> {
    const tool = Object.values(team.agents)
      .flatMap((a) => a.tools)
      .find((t) => t.name === req.tool);
    if (!tool) return executeTool(team, req, signal); // an unknown tool runs no user code
    const limitMs = tool.timeoutMs + TOOL_GRACE_MS;
    const home = runtimeHints(tool).perEpisode ? req.episodeId : undefined;
    return this.run<ToolCallReply>(
      { t: 'tool', team: ref, req },
      limitMs,
      signal,
      (ms) => {
        const fault = `tool ${tool.name}: ${stoppedMessage(`tool timeoutMs: ${tool.timeoutMs} ms`, ms)}`;
        return { ok: false, error: fault, fault, durationMs: ms };
      },
      home,
    );
  }

  /** The episode ended: every thread releases what its tools hold for it (its calls are over, so no thread runs one). */
  endEpisode(episodeId: string): void {
    this.homes.delete(episodeId);
    for (const thread of this.all) thread.postMessage({ t: 'end', episodeId } satisfies EndEpisode);
  }

  /** Scores an episode (rewards, success check). Rewards that run past `team.limits.cpuMs` are stopped: the episode is stored as failed, saying so. */
  async score(team: AnyTeam, ref: TeamRef, meta: EpisodeMeta, trajectory: Trajectory): Promise<StoredEpisode> {
    return this.run<StoredEpisode>({ t: 'score', team: ref, meta, trajectory }, team.limits.cpuMs, undefined, (ms) => ({
      meta,
      trajectory: {
        ...trajectory,
        status: 'failed',
        error: `rewards: ${stoppedMessage(`scoring counts against team limits.cpuMs: ${team.limits.cpuMs} ms`, ms)}`,
      },
      rewards: [],
      success: null,
    }));
  }

  private async run<T>(call: Call, limitMs: number, signal: AbortSignal | undefined, stopped: (ms: number) => T, episodeId?: string): Promise<T> {
    const thread = await this.acquire(episodeId);
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      let startedAt = 0;
      const finish = (keep: boolean) => {
        clearTimeout(timer);
        thread.off('message', onMessage);
        thread.off('exit', onExit);
        signal?.removeEventListener('abort', onAbort);
        if (keep) this.release(thread);
        else {
          this.all.delete(thread);
          void thread.terminate();
          this.release(undefined);
        }
      };
      const onMessage = (m: FromThread) => {
        if (m.t === 'started') {
          startedAt = performance.now();
          timer = setTimeout(() => {
            finish(false);
            resolve(stopped(performance.now() - startedAt));
          }, limitMs);
          return;
        }
        finish(true);
        if (m.t === 'done') resolve(m.value as T);
        else reject(new Error(m.message));
      };
      const onExit = (code: number) => {
        finish(false);
        reject(new Error(`the user code thread exited (code ${code})`)); // retryable: the activity runs again on a fresh one
      };
      const onAbort = () => {
        finish(false);
        reject(signal!.reason);
      };
      thread.on('message', onMessage);
      thread.once('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      thread.postMessage(call);
    });
  }

  /**
   * A thread for a call: `episodeId`'s, when given and its thread is not ended (waiting while it is
   * busy), else any idle one, else a new one; the thread becomes the episode's when given.
   */
  private async acquire(episodeId?: string): Promise<Worker> {
    for (;;) {
      if (this.closed) throw new Error('the user code threads are closed');
      const home = episodeId === undefined ? undefined : this.homes.get(episodeId);
      let thread: Worker | undefined;
      if (home && this.all.has(home)) {
        const i = this.idle.indexOf(home);
        if (i < 0) {
          await new Promise<void>((r) => this.waiting.push(r)); // busy: the episode's state is there
          continue;
        }
        this.idle.splice(i, 1);
        thread = home;
      } else thread = this.idle.pop() ?? (this.live < this.size ? this.spawn() : undefined);
      if (!thread) {
        await new Promise<void>((r) => this.waiting.push(r));
        continue;
      }
      thread.ref();
      if (episodeId !== undefined) {
        this.homes.delete(episodeId);
        this.homes.set(episodeId, thread);
        for (const id of this.homes.keys()) {
          if (this.homes.size <= HOMES) break;
          this.homes.delete(id);
        }
      }
      return thread;
    }
  }

  private spawn(): Worker {
    this.live++;
    const worker = new Worker(THREAD_SHIM, { eval: true, workerData: { tsx: TSX, entry: this.entry } });
    this.all.add(worker);
    endChildrenWith(worker); // a tool's MCP servers end with its thread
    worker.on('error', () => undefined); // seen as its exit
    worker.once('exit', () => {
      this.all.delete(worker);
      // an idle thread that dies is not handed out again (a busy one's exit is its call's)
      const i = this.idle.indexOf(worker);
      if (i >= 0) {
        this.idle.splice(i, 1);
        this.live--;
      }
      this.wake();
    });
    return worker;
  }

  /** A thread back for later calls (undefined: it was ended); waiting calls look again. */
  private release(thread: Worker | undefined) {
    if (thread && !this.closed) {
      thread.unref(); // an idle thread does not keep the process alive
      this.idle.push(thread);
    } else this.live--;
    this.wake();
  }

  /** Every waiting call looks again: one may wait for a given thread (its episode's), so not only the first. */
  private wake() {
    for (const w of this.waiting.splice(0)) w();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.wake();
    await Promise.all(this.idle.splice(0).map((t) => t.terminate()));
  }
}
