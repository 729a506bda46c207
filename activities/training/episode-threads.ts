/**
 * Batched episodes run in worker threads, not on the pool worker's own thread.
 * An episode function, reward or tool is user code: a synchronous loop in it
 * would block the worker's event loop (heartbeats, polls, every other activity)
 * for good. In a thread it blocks only that thread, which the worker sees and
 * ends: the episode fails naming its agent and turn, the thread's other
 * episodes start again on a fresh thread (they are seeded, so they come out
 * the same), and the run goes on.
 *
 * The thread runs the episode (episode-sandbox.ts), its tools and its scoring;
 * generation stays on the worker's thread (one engine connection, where the
 * engine coalesces every episode's turns). Each episode may run its own code
 * for `team.limits.cpuMs` in all: the thread counts the time from each hand-over
 * to the episode until its next turn, tool call or end and fails it at its next
 * await past the limit; the worker ends a thread whose episode has run that
 * long without awaiting (the thread cannot, it is blocked). Two shared slots say
 * which episode runs and since which hand-over.
 */
import { performance } from 'node:perf_hooks';
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import {
  EpisodeFault,
  type CallJournal,
  type EpisodeIO,
  type EpisodeInput,
  type GenerateCall,
  type GenerateReply,
  type JournaledCall,
} from '../../agents/episode';
import type { AnyTeam } from '../../agents/team';
import { episodeEnded } from '../../agents/tool';
import { ApplicationFailure } from '@temporalio/common';
import type { Trajectory } from '../../schema/trajectory';
import { errorMessage } from '../../infra/errors';
import { troupeMetrics } from '../../infra/metrics';
import type { StoredEpisode } from '../store/trajectories';
import { scoredEpisode, type TeamRef } from './control';
import { runBatchedEpisode } from './episode-sandbox';
import { endChildrenWith } from './thread-children';
import { countGatewayCallsWith, openGatewaySessions } from '../../gateway';
import { executeTool, failRunOn } from '../tools';

type EpisodeMeta = StoredEpisode['meta'];

/** One episode for a thread: the team (by reference), the episode's input and what scoring stores with it. */
export interface ThreadEpisode {
  team: TeamRef;
  input: EpisodeInput;
  meta: EpisodeMeta;
  /** The worker journals the episode's gateway calls (`journal` of EpisodeThreads.run). */
  journaled?: boolean;
}

type ToThread =
  | { t: 'run'; id: number; episode: ThreadEpisode }
  | { t: 'reply'; id: number; call: number; ok: true; value: unknown }
  | { t: 'reply'; id: number; call: number; ok: false; message: string }
  | { t: 'abort'; id: number };

type FromThread =
  | { t: 'generate'; id: number; call: number; request: GenerateCall }
  | { t: 'journal'; id: number; call: number; op: JournalOp }
  | { t: 'done'; id: number; episode: StoredEpisode }
  | { t: 'failed'; id: number; message: string; fromReply: boolean; nonRetryable?: string }
  | { t: 'gateway-call'; id: -1; api: string; status: number };

/** A gateway journal operation, done by the worker's thread (which holds the store connection). */
type JournalOp = { op: 'load'; episodeId: string } | { op: 'record'; episodeId: string; entry: JournaledCall } | { op: 'clear'; episodeId: string };

const TSX = require.resolve('tsx/cjs');
const THREAD_SHIM = `const { workerData } = require('node:worker_threads'); require(workerData.tsx); require(workerData.entry);`;

/**
 * Slots shared with a thread: [0] the episode whose code runs (-1: none), [1] hand-overs so far,
 * [2] cancellations so far, then a ring of the last CANCELLED ids the worker cancelled: the thread
 * reads it before starting an episode, so one cancelled while queued behind a blocked episode
 * never starts (a message could not reach the thread before its turn).
 */
const RUNNING = 0;
const HANDOVERS = 1;
const CANCELS = 2;
const RING = 3;
const CANCELLED = 4096;
/** How long a cancelled episode's code may keep its thread before the worker ends the thread. */
const CANCEL_GRACE_MS = 250;

const wasCancelled = (shared: Int32Array, id: number) => {
  const n = Math.min(Atomics.load(shared, CANCELS), CANCELLED);
  for (let i = 0; i < n; i++) if (Atomics.load(shared, RING + i) === id) return true;
  return false;
};

// ---------------------------------------------------------------------------
// The thread's side.

/**
 * What a thread runs (processes/episode-thread.ts wires it): episodes as they come, each with
 * its own CPU account. `load` gives the team of a reference (the worker's own team code).
 */
export function serveEpisodes(port: MessagePort, shared: Int32Array, load: (ref: TeamRef) => AnyTeam): void {
  const teams = new Map<string, AnyTeam>();
  const teamOf = (ref: TeamRef) => {
    const key = JSON.stringify([ref.team, ref.teamOptions ?? {}]);
    let team = teams.get(key);
    if (!team) teams.set(key, (team = load(ref)));
    return team;
  };
  const episodes = new Map<
    number,
    { episodeId: string; used: number; since: number; abort: AbortController; replies: Map<number, (r: ToThread & { t: 'reply' }) => void> }
  >();
  let calls = 0;
  const post = (m: FromThread) => port.postMessage(m);
  // The gateway's requests are counted by the worker's thread, whose metrics the endpoint serves.
  countGatewayCallsWith((api, status) => post({ t: 'gateway-call', id: -1, api, status }));
  // Whose code runs from now, until it awaits (a turn, a tool call) or ends.
  const handOver = (id: number) => {
    const e = episodes.get(id);
    if (e) e.since = performance.now();
    Atomics.store(shared, RUNNING, id);
    Atomics.add(shared, HANDOVERS, 1);
  };
  const takeBack = (id: number, cpuMs: number) => {
    const e = episodes.get(id)!;
    e.used += performance.now() - e.since;
    if (Atomics.load(shared, RUNNING) === id) Atomics.store(shared, RUNNING, -1);
    if (e.used > cpuMs) throw new EpisodeFault(cpuMessage(cpuMs, e.used));
  };
  port.on('message', (m: ToThread) => {
    if (m.t === 'abort') {
      // the worker has settled the episode: its pending requests will never be answered
      const e = episodes.get(m.id);
      e?.abort.abort();
      for (const reply of e?.replies.values() ?? []) reply({ t: 'reply', id: m.id, call: -1, ok: false, message: 'the episode was cancelled' });
      return;
    }
    if (m.t === 'reply') {
      const resolve = episodes.get(m.id)?.replies.get(m.call);
      if (!resolve) return;
      handOver(m.id);
      return resolve(m);
    }
    const { id, episode } = m;
    if (wasCancelled(shared, id)) return; // cancelled while queued: the worker no longer waits for it
    let team: AnyTeam;
    try {
      team = teamOf(episode.team);
    } catch (e) {
      return post({ t: 'failed', id, message: errorMessage(e), fromReply: false });
    }
    const state = { episodeId: episode.input.episodeId, used: 0, since: performance.now(), abort: new AbortController(), replies: new Map() };
    episodes.set(id, state);
    let fromReply = false;
    // A request to the worker's thread (a generation, a journal operation); the episode waits for its reply.
    const ask = <T>(message: (call: number) => FromThread): Promise<T> => {
      takeBack(id, team.limits.cpuMs);
      if (state.abort.signal.aborted) return Promise.reject(new Error('the episode was cancelled'));
      const call = ++calls;
      post(message(call));
      return new Promise<T>((resolve, reject) =>
        state.replies.set(call, (r: ToThread & { t: 'reply' }) => {
          state.replies.delete(call);
          if (r.ok) resolve(r.value as T);
          else {
            fromReply = true;
            reject(new Error(r.message));
          }
        }),
      );
    };
    const io: EpisodeIO = {
      generate: (request) => ask<GenerateReply>((call) => ({ t: 'generate', id, call, request })),
      // A tool runs on this thread and counts as the episode's own time (tools have their own
      // timeoutMs); when it returns, the episode runs again, maybe after others ran meanwhile.
      // A reply that fails the run is thrown: runEpisode rethrows it, the worker fails the rollout with it.
      callTool: async (req) => {
        try {
          return failRunOn(await executeTool(team, req, state.abort.signal));
        } finally {
          handOver(id);
        }
      },
      now: () => Date.now(),
      openSessions: openGatewaySessions,
      ...(episode.journaled
        ? {
            journal: {
              load: (episodeId) => ask<JournaledCall[]>((call) => ({ t: 'journal', id, call, op: { op: 'load', episodeId } })),
              record: (episodeId, entry) => ask<void>((call) => ({ t: 'journal', id, call, op: { op: 'record', episodeId, entry } })),
              clear: (episodeId) => ask<void>((call) => ({ t: 'journal', id, call, op: { op: 'clear', episodeId } })),
            },
          }
        : {}),
    };
    handOver(id);
    runBatchedEpisode(team, episode.input, io)
      .then((trajectory) => {
        const scored = scoredEpisode(team, episode.meta, trajectory);
        takeBack(id, Infinity);
        post({ t: 'done', id, episode: scored });
      })
      .catch((e: unknown) =>
        post({
          t: 'failed',
          id,
          message: errorMessage(e),
          fromReply,
          ...(e instanceof ApplicationFailure && e.nonRetryable ? { nonRetryable: e.type ?? 'Error' } : {}),
        }),
      )
      .finally(() => {
        episodes.delete(id);
        if (Atomics.load(shared, RUNNING) === id) Atomics.store(shared, RUNNING, -1);
        // Its tools' servers of scope 'episode' end with it, unless another attempt of it runs here
        // (one cancelled that has not ended yet, and its retry).
        const episodeId = episode.input.episodeId;
        if (![...episodes.values()].some((e) => e.episodeId === episodeId)) void episodeEnded(episodeId);
      });
  });
}

const cpuMessage = (cpuMs: number, usedMs: number) =>
  `its code ran ${Math.round(usedMs)} ms in all, over its limit (team limits.cpuMs: ${cpuMs} ms); it was stopped`;

// ---------------------------------------------------------------------------
// The worker's side.

interface Running {
  episode: ThreadEpisode;
  cpuMs: number;
  generate: (call: GenerateCall) => Promise<GenerateReply>;
  journal?: CallJournal;
  /** The episode stored as failed, when it is stopped from outside. */
  stopped: (trajectory: Trajectory) => StoredEpisode;
  resolve: (e: StoredEpisode) => void;
  reject: (e: unknown) => void;
  /** The last infrastructure failure a reply carried: rethrown as is (its retry semantics) if the episode dies of it. */
  replyError?: unknown;
  /** Generations so far and the last one's model: named when the episode is stopped. */
  turns: number;
  model?: string;
}

class EpisodeThread {
  readonly worker: Worker;
  private readonly port: MessagePort;
  private readonly shared = new Int32Array(new SharedArrayBuffer(4 * (RING + CANCELLED)));
  /** Episodes cancelled while on this thread (the worker no longer waits for them). */
  private readonly cancelled = new Set<number>();
  readonly running = new Map<number, Running>();
  private handovers = 0;
  private sameSince = performance.now();
  ended = false;
  /** Ended by the worker (an overrun), not by a crash. */
  stopping = false;

  constructor(entry: string, onExit: (t: EpisodeThread, crash: Error | undefined) => void) {
    Atomics.store(this.shared, RUNNING, -1);
    const { port1, port2 } = new MessageChannel();
    this.port = port1;
    // The entry is TypeScript, like the worker's own code: loaded through tsx's require hook.
    this.worker = new Worker(THREAD_SHIM, { eval: true, workerData: { tsx: TSX, entry, port: port2, shared: this.shared }, transferList: [port2] });
    this.worker.unref();
    endChildrenWith(this.worker); // a tool's MCP servers end with its thread
    this.port.unref();
    let crash: Error | undefined;
    this.worker.on('error', (e) => (crash = e));
    this.worker.on('exit', () => {
      this.ended = true;
      onExit(this, this.stopping ? undefined : (crash ?? new Error('the episode thread exited')));
    });
    this.port.on('message', (m: FromThread) => this.onMessage(m));
  }

  start(id: number, r: Running) {
    this.running.set(id, r);
    this.worker.ref(); // episodes in flight keep the process alive; an idle thread does not
    this.port.postMessage({ t: 'run', id, episode: r.episode } satisfies ToThread);
  }

  /** Cancels an episode of this thread: settled now, never started if still queued, its tools aborted. */
  cancel(id: number): Running | undefined {
    const r = this.running.get(id);
    if (!r || this.ended) return undefined;
    this.settled(id);
    this.cancelled.add(id);
    for (const old of this.cancelled) if (this.cancelled.size > CANCELLED) this.cancelled.delete(old);
    const n = Atomics.add(this.shared, CANCELS, 1);
    Atomics.store(this.shared, RING + (n % CANCELLED), id);
    this.port.postMessage({ t: 'abort', id } satisfies ToThread);
    return r;
  }

  private onMessage(m: FromThread) {
    if (m.t === 'gateway-call') return void troupeMetrics().gatewayCalls.add(1, { api: m.api, status: String(m.status) });
    const r = this.running.get(m.id);
    if (!r) {
      if (m.t === 'done' || m.t === 'failed') this.cancelled.delete(m.id); // a cancelled episode ended on its own
      return;
    }
    if (m.t === 'generate' || m.t === 'journal') {
      const reply = (msg: ToThread) => !this.ended && this.running.has(m.id) && this.port.postMessage(msg);
      let work: Promise<unknown>;
      if (m.t === 'generate') {
        r.turns++;
        r.model = m.request.model;
        work = r.generate(m.request);
      } else {
        const { op } = m;
        const journal = r.journal;
        if (!journal) work = Promise.reject(new Error('this episode has no journal'));
        else if (op.op === 'load') work = journal.load(op.episodeId);
        else if (op.op === 'record') work = journal.record(op.episodeId, op.entry);
        else work = journal.clear(op.episodeId);
      }
      work.then(
        (value) => reply({ t: 'reply', id: m.id, call: m.call, ok: true, value }),
        (e: unknown) => {
          r.replyError = e;
          reply({ t: 'reply', id: m.id, call: m.call, ok: false, message: errorMessage(e) });
        },
      );
      return;
    }
    this.settled(m.id);
    if (m.t === 'done') r.resolve(m.episode);
    // a failure no retry fixes (a tool that fails the run) stays one past the thread
    else if (m.nonRetryable !== undefined) r.reject(ApplicationFailure.nonRetryable(m.message, m.nonRetryable));
    else r.reject(m.fromReply && r.replyError !== undefined ? r.replyError : new Error(m.message));
  }

  settled(id: number) {
    this.running.delete(id);
    if (this.running.size === 0) this.worker.unref();
  }

  /** The episode whose code has run without awaiting for longer than its limit, if any. */
  overrun(now: number): { id: number; r: Running; ms: number } | undefined {
    const handovers = Atomics.load(this.shared, HANDOVERS);
    if (handovers !== this.handovers) {
      this.handovers = handovers;
      this.sameSince = now;
    }
    const id = Atomics.load(this.shared, RUNNING);
    const r = id >= 0 ? this.running.get(id) : undefined;
    const ms = now - this.sameSince;
    return r && ms > r.cpuMs ? { id, r, ms } : undefined;
  }

  /** Whether a cancelled episode's code has held this thread past the grace (a synchronous loop: no message reaches it); after overrun(). */
  heldByCancelled(now: number): boolean {
    const id = Atomics.load(this.shared, RUNNING);
    return id >= 0 && this.cancelled.has(id) && now - this.sameSince > CANCEL_GRACE_MS;
  }
}

/** The trajectory of an episode stopped from outside: failed, saying why. */
export function stoppedTrajectory(episodeId: string, message: string): Trajectory {
  return { episodeId, status: 'failed', error: `episode: ${message}`, turns: [] };
}

/**
 * Threads for batched episodes, made as needed (up to `size`) and kept for later rollouts.
 * `entry`: the thread's wiring file (processes/episode-thread.ts).
 */
export class EpisodeThreads {
  private readonly threads: EpisodeThread[] = [];
  private next = 0;
  private ids = 0;
  private readonly watch: NodeJS.Timeout;

  constructor(
    private readonly entry: string,
    private readonly size = 4,
    private readonly log: (e: Record<string, unknown>) => void = () => undefined,
  ) {
    this.watch = setInterval(() => this.check(), 200);
    this.watch.unref();
  }

  /**
   * Runs one episode on a thread and scores it there. Resolves with the stored episode (failed,
   * naming why, if its code overran); rejects only with an infrastructure failure (a failed generation).
   */
  run(
    episode: ThreadEpisode,
    opts: {
      cpuMs: number;
      generate: (call: GenerateCall) => Promise<GenerateReply>;
      /** The run's gateway journal: the episode's calls are journaled and replayed through it. */
      journal?: CallJournal;
      stopped: (t: Trajectory) => StoredEpisode;
      signal?: AbortSignal;
    },
  ): Promise<StoredEpisode> {
    return new Promise<StoredEpisode>((resolve, reject) => {
      if (opts.signal?.aborted) return reject(opts.signal.reason ?? new Error('the episode was cancelled'));
      const id = this.place({
        episode: { ...episode, journaled: opts.journal !== undefined },
        cpuMs: opts.cpuMs,
        generate: opts.generate,
        ...(opts.journal ? { journal: opts.journal } : {}),
        stopped: opts.stopped,
        resolve,
        reject,
        turns: 0,
      });
      const signal = opts.signal;
      signal?.addEventListener('abort', () => this.cancel(id, signal), { once: true });
    });
  }

  /**
   * The caller no longer waits (its activity was cancelled, or its run terminated): the episode
   * is rejected with the signal's reason at once, whatever its code is doing; the check below ends
   * its thread if that code does not give the thread back (the thread's other episodes start again
   * on another).
   */
  private cancel(id: number, signal: AbortSignal) {
    const r = this.threads.find((t) => t.running.has(id))?.cancel(id);
    r?.reject(signal.reason ?? new Error('the episode was cancelled'));
  }

  /** Starts an episode on the next thread (made if there are fewer than `size`); `id`: its id, kept when it starts again. */
  private place(r: Running, id = ++this.ids): number {
    let thread = this.threads.filter((t) => !t.ended)[this.next++ % this.size];
    if (!thread) this.threads.push((thread = new EpisodeThread(this.entry, (ended, crash) => this.onExit(ended, crash))));
    thread.start(id, r);
    return id;
  }

  /**
   * A thread ended. Stopped for an overrun: its other episodes start again on another (seeded:
   * the same episodes). Crashed: they fail as the activity's (retryable) problem.
   */
  private onExit(thread: EpisodeThread, crash: Error | undefined) {
    this.threads.splice(this.threads.indexOf(thread), 1);
    for (const [id, r] of thread.running) {
      if (crash) r.reject(new Error(`episode thread failed: ${crash.message}`));
      else this.place({ ...r, turns: 0, replyError: undefined }, id);
    }
    thread.running.clear();
  }

  private check() {
    const now = performance.now();
    for (const thread of this.threads) {
      const over = thread.ended ? undefined : thread.overrun(now);
      if (!over) {
        if (!thread.ended && !thread.stopping && thread.heldByCancelled(now)) {
          this.log({ event: 'episode-thread-ended', reason: 'a cancelled episode kept running' });
          thread.stopping = true;
          void thread.worker.terminate();
        }
        continue;
      }
      const { r } = over;
      thread.settled(over.id);
      const after = r.turns === 0 ? 'before its first turn' : `after its turn ${r.turns} (model ${r.model})`;
      const message = `its code ran ${(over.ms / 1000).toFixed(1)} s without awaiting a turn or tool call, ${after} (a synchronous loop? team limits.cpuMs: ${r.cpuMs} ms); it was stopped`;
      this.log({ event: 'episode-stopped', episodeId: r.episode.input.episodeId, message });
      r.resolve(r.stopped(stoppedTrajectory(r.episode.input.episodeId, message)));
      thread.stopping = true;
      void thread.worker.terminate();
    }
  }

  async close(): Promise<void> {
    clearInterval(this.watch);
    await Promise.all(
      this.threads.map((t) => {
        t.stopping = true;
        return t.worker.terminate();
      }),
    );
  }
}
