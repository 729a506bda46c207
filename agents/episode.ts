/**
 * Runs a team's episode function on one task and records its graph trajectory.
 *
 * The same code runs in both rollout modes; only `EpisodeIO` differs:
 * - durable: generate and callTool are Temporal activities, the episode
 *   function runs in an episode workflow;
 * - batched: they are direct calls inside one rollout activity.
 * Everything here is pure and deterministic given the IO replies, so it is safe
 * inside the workflow sandbox and produces identical trajectories in both modes.
 * A turn of the episode function is turn.ts; a turn the gateway takes, session-turn.ts; a tool
 * call it makes, session-tool-call.ts.
 */
import type { StopReason, ToolCallRecord, Trajectory, TurnRecord } from '../schema/trajectory';
import type { Sampling } from './agent';
import { sessionToolCall } from './session-tool-call';
import { sessionTurn } from './session-turn';
import type { AnyTeam } from './team';
import { LimitExceeded, type RunningEpisode, takeTurn } from './turn';

export { LimitExceeded } from './turn';

export interface GenerateCall {
  model: string;
  version: number;
  context: number[];
  maxTokens: number;
  stopTokens: number[];
  sampling: Sampling;
  seed: number;
}

export interface GenerateReply {
  tokens: number[];
  logprobs: number[];
  stopReason: 'stop_token' | 'max_tokens';
  /** The version that sampled these tokens when it is not the call's (a carried episode's earlier generation). */
  version?: number;
}

export interface ToolCallRequest {
  tool: string;
  input: unknown;
  episodeId: string;
  turn: number;
  call: number;
  seed: number;
}

/**
 * A tool call's answer. `fault`: the tool's code was stopped from outside (a synchronous loop
 * that blocked its thread past the tool's timeout); it fails the episode, unlike a tool error.
 * `failsRun`: the team says this failure fails the run (mcpServer's onError 'fail-run'); the
 * runtime that gets the reply fails the run with it, non-retryable (activities/tools.ts
 * failRunOn), so no episode reads it.
 */
export type ToolCallReply =
  { ok: true; output: unknown; rendered: string; durationMs: number } | { ok: false; error: string; durationMs: number; fault?: string; failsRun?: string };

export interface EpisodeIO {
  generate(call: GenerateCall): Promise<GenerateReply>;
  callTool(req: ToolCallRequest): Promise<ToolCallReply>;
  /** Milliseconds; in a workflow this is workflow time, so it replays. */
  now(): number;
  /**
   * Opens the episode's OpenAI-compatible sessions (gateway/), one per agent. Batched rollout
   * only: a durable episode's code runs in the workflow sandbox, which has no network.
   */
  openSessions?(episode: EpisodeTurns): Promise<OpenSessions>;
  /**
   * The store's journal of the episode's gateway calls (batched rollouts of a run): what an
   * earlier attempt of the same episode was answered, so a retry answers it again without sampling.
   */
  journal?: CallJournal;
}

/**
 * One completed gateway call: the request it answered (by hash) and what was sampled for it
 * (a turn), or what the tool answered (a call of one of the agent's tools, kind 'tool').
 */
export type JournaledCall = JournaledTurn | JournaledToolCall;

interface JournaledBase {
  /** The episode's gateway calls (turns and tool calls alike) are numbered 0, 1, ... in the order they are answered. */
  index: number;
  agent: string;
  /** sha256 of the agent and the request (gateway/journal.ts). */
  requestHash: string;
}

/** A turn's call (Chat Completions, Responses): what was sampled. */
export interface JournaledTurn extends JournaledBase {
  kind?: 'turn';
  tokens: number[];
  logprobs: number[];
  stopReason: StopReason;
  durationMs: number;
}

/** A call of one of the agent's tools (the gateway's MCP server): the tool's answer, a result or a tool error. */
export interface JournaledToolCall extends JournaledBase {
  kind: 'tool';
  reply: ToolCallReply;
}

/** Where an episode's gateway calls are journaled (activities/store/gateway-journal.ts). */
export interface CallJournal {
  /** The calls earlier attempts of the episode completed. */
  load(episodeId: string): Promise<JournaledCall[]>;
  record(episodeId: string, call: JournaledCall): Promise<void>;
  /** Forgets the episode's calls: it restarts clean. */
  clear(episodeId: string): Promise<void>;
}

/**
 * Thrown by runEpisode when the agent's code, replaying from the journal, sent a request other
 * than the journaled one: the attempt is no trajectory (it would mix two attempts); the runner
 * clears the journal and runs the episode again from the start.
 */
export class JournalDiverged extends Error {
  constructor(
    readonly agent: string,
    readonly call: number,
  ) {
    super(`agent ${agent}'s gateway call ${call} differs from the journaled one: the episode restarts clean`);
    this.name = 'JournalDiverged';
  }
}

/** What an agent's code points an OpenAI-compatible client at (`new OpenAI(agents.solver.openai)`). */
export interface OpenAISession {
  readonly baseURL: string;
  readonly apiKey: string;
  /** The agent's team tools as an MCP server (streamable HTTP), under the same key (`Authorization: Bearer <apiKey>`). */
  readonly mcpURL: string;
}

export interface OpenSessions {
  sessions: Record<string, OpenAISession>;
  close(): void;
}

/** A turn taken from a context built outside the episode function (the gateway's rendering of a request). */
export interface SessionTurnRequest {
  context: number[];
  parents: number[];
  /** At most the agent's maxTokens. */
  maxTokens: number;
  /** Overrides the agent's sampling (the episode's own override, eval's greedy decoding, still wins). */
  sampling: Partial<Sampling>;
  /** Besides EOS: tokens after which `stopped` is asked whether the sampled text ends the turn (stop strings). */
  stopTokens: number[];
  stopped(sampled: string): boolean;
}

/** A tool call the gateway makes for an agent's code: the tool, its input, and the call's index among the episode's gateway calls. */
export interface SessionToolRequest {
  tool: string;
  input: unknown;
  call: number;
}

/** The running episode as the gateway sees it: take and record turns, count what it could not keep exact. */
export interface EpisodeTurns {
  readonly team: AnyTeam;
  readonly episodeId: string;
  /** A turn; `answered`: an earlier attempt's journaled reply, recorded as the turn's sample instead of generating. */
  turn(role: string, req: SessionTurnRequest, answered?: JournaledTurn): Promise<TurnRecord>;
  count(role: string, counter: string, n?: number): void;
  /**
   * A call of one of the agent's tools (its input valid), run as act() runs one (`EpisodeIO.callTool`);
   * `answered`: an earlier attempt's journaled reply, given instead of calling the tool again.
   */
  callTool(role: string, req: SessionToolRequest, answered?: ToolCallReply): Promise<ToolCallReply>;
  /** The episode's journal (calls of earlier attempts, and recording new ones), where the runtime keeps one. */
  readonly journal?: { load(): Promise<JournaledCall[]>; record(call: JournaledCall): Promise<void> };
  /** The agent's code diverged from the journal: this attempt ends; the returned error is for the caller to throw. */
  diverged(agent: string, call: number): JournalDiverged;
}

export interface EpisodeInput {
  episodeId: string;
  seed: number;
  task: unknown;
  /** Serving version per model. */
  versions: Record<string, number>;
  /** Overrides every agent's sampling (eval uses greedy decoding). */
  sampling?: Partial<Sampling>;
}

/** What the episode function gets back from `agents.x.act(...)`. */
export interface TurnHandle {
  readonly index: number;
  readonly agent: string;
  /** The whole response: sampled text with tool output in between. */
  readonly text: string;
  /** Sampled text after the last tool output. */
  readonly reply: string;
  readonly toolCalls: readonly ToolCallRecord[];
  readonly stopReason: StopReason;
}

export interface AgentHandle {
  act(message: string, opts?: { after?: readonly TurnHandle[] }): Promise<TurnHandle>;
  /** The agent's OpenAI-compatible session (batched rollout): every call through it is a turn of this agent. */
  readonly openai: OpenAISession;
}

/**
 * A failure of what runs the episode (an activity, the engine, the store, the
 * workflow being cancelled), as opposed to the team's own code: every error
 * from `EpisodeIO` is one. The episode function sees it; runEpisode then
 * rethrows the original error (its `cause`) so Temporal retries the work, even
 * if the episode function caught it. Errors of the team's code become data.
 */
export class InfrastructureFailure extends Error {
  constructor(cause: unknown) {
    super(`infrastructure: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'InfrastructureFailure';
  }
}

/**
 * What the runtime raises from `EpisodeIO` against the team's own code (an episode over its
 * CPU limit): the episode fails with this message, even if the episode function caught it.
 */
export class EpisodeFault extends Error {
  override readonly name = 'EpisodeFault';
}

export async function runEpisode(team: AnyTeam, input: EpisodeInput, runtime: EpisodeIO): Promise<Trajectory> {
  let infrastructure: InfrastructureFailure | undefined;
  let fault: EpisodeFault | undefined;
  async function guarded<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (e) {
      if (e instanceof EpisodeFault) throw (fault ??= e);
      const failure = new InfrastructureFailure(e);
      infrastructure ??= failure;
      throw failure;
    }
  }
  const io: EpisodeIO = {
    generate: (call) => guarded(() => runtime.generate(call)),
    callTool: async (req) => {
      const reply = await guarded(() => runtime.callTool(req));
      // Only replies of threaded tool calls carry it: histories recorded before it replay as they ran.
      if (!reply.ok && reply.fault) throw (fault ??= new EpisodeFault(reply.fault));
      return reply;
    },
    now: () => runtime.now(),
  };
  const tok = team.tokenizer;
  const syntax = team.toolSyntax;
  const ep: RunningEpisode = {
    team,
    input,
    io,
    turns: [],
    lastTurnOf: new Map<string, number>(),
    triggerIds: syntax ? [...new Set(syntax.triggers.flatMap((t) => tok.idsContaining(t.slice(-1))))] : [],
  };
  const turns = ep.turns;
  // what the gateway's turns counted, and the journaled call the agent's code diverged from
  const counters: Record<string, Record<string, number>> = {};
  let diverged: JournalDiverged | undefined;
  const episodeTurns: EpisodeTurns = {
    team,
    episodeId: input.episodeId,
    turn: (role, req, answered) => sessionTurn(ep, role, req, answered),
    callTool: (role, req, answered) => sessionToolCall(ep, role, req, answered),
    count(role, counter, n = 1) {
      const c = (counters[role] ??= {});
      c[counter] = (c[counter] ?? 0) + n;
    },
    ...(runtime.journal
      ? {
          journal: {
            load: () => guarded(() => runtime.journal!.load(input.episodeId)),
            record: (call: JournaledCall) => guarded(() => runtime.journal!.record(input.episodeId, call)),
          },
        }
      : {}),
    diverged: (agent, call) => (diverged ??= new JournalDiverged(agent, call)),
  };
  const opened = runtime.openSessions ? await guarded(() => runtime.openSessions!(episodeTurns)) : undefined;

  const agents: Record<string, AgentHandle> = {};
  for (const role of Object.keys(team.agents))
    agents[role] = {
      act: (m, o) => takeTurn(ep, role, m, o),
      get openai(): OpenAISession {
        if (!opened) throw new Error(`agents.${role}.openai: the OpenAI-compatible gateway serves batched episodes only (this one runs durable)`);
        return opened.sessions[role]!;
      },
    };

  let trajectory: Trajectory;
  try {
    const outcome = await team.episode({ task: input.task, agents });
    trajectory = { episodeId: input.episodeId, status: 'completed', outcome: outcome ?? null, turns };
  } catch (err) {
    if (err instanceof LimitExceeded) trajectory = { episodeId: input.episodeId, status: 'truncated', error: err.message, turns };
    else trajectory = { episodeId: input.episodeId, status: 'failed', error: `episode: ${(err as Error)?.message ?? String(err)}`, turns };
  } finally {
    opened?.close();
  }
  // An attempt that met an infrastructure failure is no trajectory, whatever the episode function did with it.
  if (infrastructure) throw infrastructure.cause;
  if (diverged) throw diverged;
  if (fault) return { episodeId: input.episodeId, status: 'failed', error: `episode: ${fault.message}`, turns };
  // Whether the agent's code caught the gateway's limit error or rethrew it (the Agents SDK and the AI SDK do),
  // the episode ran into its limit: truncated, so its turns still train.
  if (ep.sessionLimit && trajectory.status !== 'truncated')
    trajectory = { episodeId: input.episodeId, status: 'truncated', error: ep.sessionLimit.message, turns };
  if (Object.keys(counters).length > 0) trajectory.counters = counters;
  return trajectory;
}
