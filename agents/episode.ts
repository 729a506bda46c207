/**
 * Runs a team's episode function on one task and records its graph trajectory.
 *
 * The same code runs in both rollout modes; only `EpisodeIO` differs:
 * - durable: generate and callTool are Temporal activities, the episode
 *   function runs in an episode workflow;
 * - batched: they are direct calls inside one rollout activity.
 * Everything here is pure and deterministic given the IO replies, so it is safe
 * inside the workflow sandbox and produces identical trajectories in both modes.
 */
import type { StopReason, ToolCallRecord, Trajectory, TurnRecord } from '../schema/trajectory';
import type { Sampling } from './agent';
import { deriveSeed } from './seed';
import type { AnyTeam } from './team';
import { zodMessage } from './tool';

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
 */
export type ToolCallReply =
  { ok: true; output: unknown; rendered: string; durationMs: number } | { ok: false; error: string; durationMs: number; fault?: string };

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

/** One completed gateway call: the request it answered (by hash) and what was sampled for it. */
export interface JournaledCall {
  /** The episode's gateway calls are numbered 0, 1, ... in the order they are answered. */
  index: number;
  agent: string;
  /** sha256 of the agent and the request (gateway/journal.ts). */
  requestHash: string;
  tokens: number[];
  logprobs: number[];
  stopReason: StopReason;
  durationMs: number;
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

/** The running episode as the gateway sees it: take and record turns, count what it could not keep exact. */
export interface EpisodeTurns {
  readonly team: AnyTeam;
  readonly episodeId: string;
  /** A turn; `answered`: an earlier attempt's journaled reply, recorded as the turn's sample instead of generating. */
  turn(role: string, req: SessionTurnRequest, answered?: JournaledCall): Promise<TurnRecord>;
  count(role: string, counter: string, n?: number): void;
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

/** Thrown inside the episode when a limit is exceeded; the episode ends `truncated`. */
export class LimitExceeded extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LimitExceeded';
  }
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

/**
 * The version of each response token of a turn. A carried episode's turn may hold
 * generations of several versions; tool output (not sampled) takes the turn's version.
 */
class TokenVersions {
  private readonly runs: Array<[count: number, version: number | undefined]> = [];
  /** The version of the turn's first sampled token. */
  first: number | undefined;
  add(count: number, version: number | undefined) {
    if (version !== undefined && count > 0) this.first ??= version;
    this.runs.push([count, version]);
  }
  /** Per token, or undefined when every sampled token is the turn's version (the common case keeps no array). */
  perToken(turnVersion: number): number[] | undefined {
    if (this.runs.every(([n, v]) => n === 0 || v === undefined || v === turnVersion)) return undefined;
    return this.runs.flatMap(([n, v]) => Array.from({ length: n }, () => v ?? turnVersion));
  }
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
  const chat = team.chatTemplate;
  const turns: TurnRecord[] = [];
  const handles: TurnHandle[] = [];
  const lastTurnOf = new Map<string, number>();
  const syntax = team.toolSyntax;
  const triggerIds = syntax ? [...new Set(syntax.triggers.flatMap((t) => tok.idsContaining(t.slice(-1))))] : [];

  async function act(role: string, message: string, opts?: { after?: readonly TurnHandle[] }): Promise<TurnHandle> {
    const spec = team.agents[role]!;
    const taken = turns.filter((t) => t.agent === role).length;
    if (taken >= spec.maxTurns) throw new LimitExceeded(`agents.${role}.maxTurns (${spec.maxTurns}) exceeded`);
    if (turns.length >= team.limits.maxTurns) throw new LimitExceeded(`limits.maxTurns (${team.limits.maxTurns}) exceeded`);

    const index = turns.length;
    const started = io.now();
    const parents = new Set<number>();
    for (const h of opts?.after ?? []) parents.add(h.index);
    const own = lastTurnOf.get(role);
    const prev = spec.memory && own !== undefined ? turns[own]! : undefined;
    if (prev) parents.add(prev.index);
    const context: number[] = [];
    if (chat) {
      // Framed by the chat template; the earlier turn's ids are kept as they were, never re-rendered.
      if (prev)
        context.push(...prev.contextTokens, ...prev.responseTokens, ...tok.encode(chat.next([{ role: 'user', content: message }], prev.stopReason === 'eos')));
      else
        context.push(
          ...tok.encode(
            chat.open([...(spec.instructions ? [{ role: 'system' as const, content: spec.instructions }] : []), { role: 'user', content: message }]),
          ),
        );
    } else {
      context.push(tok.bosId, ...tok.encode(spec.instructions));
      // The agent's own earlier turns, as it saw and wrote them (BOS dropped).
      if (prev) context.push(...prev.contextTokens.slice(1), ...prev.responseTokens);
      context.push(...tok.encode(message));
    }

    const response: number[] = [];
    const logprobs: number[] = [];
    const mask: Array<0 | 1> = [];
    const versions = new TokenVersions();
    const toolCalls: ToolCallRecord[] = [];
    const sampling = { ...spec.sampling, ...input.sampling };
    let budget = spec.maxTokens;
    let stop: StopReason = 'max_tokens';
    let replyStart = 0;
    for (let segment = 0; budget > 0; segment++) {
      const reply = await io.generate({
        model: spec.model,
        version: input.versions[spec.model]!,
        context: [...context, ...response],
        maxTokens: budget,
        stopTokens: [tok.eosId, ...triggerIds.filter(() => spec.tools.length > 0)],
        sampling,
        seed: deriveSeed(input.seed, 'turn', index, 'segment', segment),
      });
      response.push(...reply.tokens);
      logprobs.push(...reply.logprobs);
      versions.add(reply.tokens.length, reply.version ?? input.versions[spec.model]!);
      for (let i = 0; i < reply.tokens.length; i++) mask.push(1);
      budget -= reply.tokens.length;
      const last = reply.tokens[reply.tokens.length - 1];
      if (reply.stopReason === 'stop_token' && last === tok.eosId) {
        stop = 'eos';
        break;
      }
      if (reply.stopReason !== 'stop_token' || !syntax) break;
      const parsed = syntax.parse(tok.decode([...context, ...response]));
      if (parsed === null) continue; // a trigger's last character without the whole trigger
      if (toolCalls.length >= spec.maxToolCalls) {
        turns.push(record('tool_limit'));
        throw new LimitExceeded(`agents.${role}.maxToolCalls (${spec.maxToolCalls}) exceeded`);
      }
      const call = toolCalls.length;
      const rendered = await runTool(role, parsed, index, call, toolCalls);
      // with a chat template the output is a tool message; the assistant message it interrupts is closed first
      const out = encodeToolOutput(role, toolCalls[toolCalls.length - 1], rendered);
      response.push(...out);
      versions.add(out.length, undefined);
      for (let i = 0; i < out.length; i++) {
        logprobs.push(0);
        mask.push(0);
      }
      replyStart = response.length;
    }

    function record(stopReason: StopReason): TurnRecord {
      const version = versions.first ?? input.versions[spec.model]!;
      const tokenVersions = versions.perToken(version);
      return {
        index,
        agent: role,
        model: spec.model,
        version,
        ...(tokenVersions ? { tokenVersions } : {}),
        parents: [...parents].sort((a, b) => a - b),
        contextTokens: context,
        responseTokens: response,
        logprobs,
        lossMask: mask,
        stopReason,
        toolCalls,
        durationMs: Math.max(0, io.now() - started),
      };
    }
    const turn = record(stop);
    turns.push(turn);
    lastTurnOf.set(role, index);
    const handle: TurnHandle = {
      index,
      agent: role,
      text: tok.decode(response),
      reply: tok.decode(response.slice(replyStart)),
      toolCalls,
      stopReason: stop,
    };
    handles.push(handle);
    return handle;
  }

  /** A tool's rendered output (or the syntax's error text) as tokens; text the tokenizer cannot hold names the tool and what rendered it. */
  function encodeToolOutput(role: string, call: ToolCallRecord | undefined, rendered: string): number[] {
    try {
      return tok.encode(chat ? chat.next([{ role: 'tool', content: rendered }], false) : rendered);
    } catch (e) {
      const tools = team.agents[role]!.tools;
      const i = tools.findIndex((t) => t.name === call?.tool);
      const source = call?.error === undefined && i >= 0 ? `agents.${role}.tools[${i}] (${call!.tool}).render` : 'toolSyntax.renderError';
      throw new Error(`${source} wrote ${JSON.stringify(rendered.slice(0, 80))}: ${(e as Error).message}`);
    }
  }

  async function runTool(
    role: string,
    parsed: NonNullable<ReturnType<NonNullable<typeof syntax>['parse']>>,
    turn: number,
    call: number,
    calls: ToolCallRecord[],
  ): Promise<string> {
    const allowed = team.agents[role]!.tools;
    const fail = (tool: string, inputValue: unknown, error: string, durationMs = 0) => {
      calls.push({ index: call, tool, input: inputValue, error, durationMs });
      return syntax!.renderError(error);
    };
    if ('error' in parsed) return fail(parsed.tool ?? '', null, parsed.error);
    const tool = allowed.find((t) => t.name === parsed.tool);
    if (!tool)
      return fail(
        parsed.tool,
        parsed.input,
        `unknown tool ${JSON.stringify(parsed.tool)} for agent ${role} (allowed: ${allowed.map((t) => t.name).join(', ') || 'none'})`,
      );
    const valid = tool.input.safeParse(parsed.input);
    if (!valid.success) return fail(tool.name, parsed.input, `${tool.name}: invalid input: ${zodMessage(valid.error, 'input')}`);
    const reply = await io.callTool({
      tool: tool.name,
      input: valid.data,
      episodeId: input.episodeId,
      turn,
      call,
      seed: deriveSeed(input.seed, 'turn', turn, 'tool', call),
    });
    if (!reply.ok) return fail(tool.name, valid.data, reply.error, reply.durationMs);
    calls.push({ index: call, tool: tool.name, input: valid.data, output: reply.output, durationMs: reply.durationMs });
    return reply.rendered;
  }

  // Turns the gateway takes: the context is the gateway's, the limits, seeds and record are the episode's.
  // A limit the gateway hits ends the episode truncated, even if the agent's code caught the HTTP error.
  let sessionLimit: LimitExceeded | undefined;
  const counters: Record<string, Record<string, number>> = {};
  let diverged: JournalDiverged | undefined;
  async function sessionTurn(role: string, req: SessionTurnRequest, answered?: JournaledCall): Promise<TurnRecord> {
    const spec = team.agents[role]!;
    const taken = turns.filter((t) => t.agent === role).length;
    const limit =
      taken >= spec.maxTurns
        ? `agents.${role}.maxTurns (${spec.maxTurns}) exceeded`
        : turns.length >= team.limits.maxTurns
          ? `limits.maxTurns (${team.limits.maxTurns}) exceeded`
          : undefined;
    if (limit) throw (sessionLimit ??= new LimitExceeded(limit));
    const index = turns.length;
    const started = io.now();
    const sampling = { ...spec.sampling, ...req.sampling, ...input.sampling };
    const response: number[] = [];
    const logprobs: number[] = [];
    const versions = new TokenVersions();
    let budget = Math.min(req.maxTokens, spec.maxTokens);
    let stop: StopReason = answered?.stopReason ?? 'max_tokens';
    if (answered) {
      response.push(...answered.tokens);
      logprobs.push(...answered.logprobs);
      budget = 0;
    }
    for (let segment = 0; budget > 0; segment++) {
      const reply = await io.generate({
        model: spec.model,
        version: input.versions[spec.model]!,
        context: [...req.context, ...response],
        maxTokens: budget,
        stopTokens: [tok.eosId, ...req.stopTokens],
        sampling,
        seed: deriveSeed(input.seed, 'turn', index, 'segment', segment),
      });
      response.push(...reply.tokens);
      logprobs.push(...reply.logprobs);
      versions.add(reply.tokens.length, reply.version ?? input.versions[spec.model]!);
      budget -= reply.tokens.length;
      if (reply.stopReason !== 'stop_token') break;
      if (reply.tokens.at(-1) === tok.eosId || req.stopped(tok.decode(response))) {
        stop = 'eos';
        break;
      }
    }
    const version = versions.first ?? input.versions[spec.model]!;
    const tokenVersions = versions.perToken(version);
    const turn: TurnRecord = {
      index,
      agent: role,
      model: spec.model,
      version,
      ...(tokenVersions ? { tokenVersions } : {}),
      parents: [...new Set(req.parents)].sort((a, b) => a - b),
      contextTokens: req.context,
      responseTokens: response,
      logprobs,
      lossMask: response.map(() => 1 as const),
      stopReason: stop,
      toolCalls: [],
      durationMs: answered ? answered.durationMs : Math.max(0, io.now() - started),
    };
    turns.push(turn);
    lastTurnOf.set(role, index);
    return turn;
  }
  const episodeTurns: EpisodeTurns = {
    team,
    episodeId: input.episodeId,
    turn: sessionTurn,
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
      act: (m, o) => act(role, m, o),
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
  if (sessionLimit && trajectory.status !== 'truncated') trajectory = { episodeId: input.episodeId, status: 'truncated', error: sessionLimit.message, turns };
  if (Object.keys(counters).length > 0) trajectory.counters = counters;
  return trajectory;
}
