/**
 * One agent turn of an episode (`agents.x.act(message)`): the context from the
 * agent's instructions, memory and message; generation in segments, each tool
 * call the agent writes run and its output put in between; the turn recorded.
 * Pure and deterministic given the IO replies, as all of the episode (episode.ts).
 */
import type { StopReason, ToolCallRecord, TurnRecord } from '../schema/trajectory';
import { templateRendersTools, type ChatTemplate } from './chat-template';
import type { EpisodeInput, EpisodeIO, TurnHandle } from './episode';
import { deriveSeed } from './seed';
import type { AnyTeam } from './team';
import { functionDefinitions, type Tool, type ToolSyntax, zodMessage } from './tool';

/** What the turns of a running episode share. */
export interface RunningEpisode {
  readonly team: AnyTeam;
  readonly input: EpisodeInput;
  /** The runtime's IO, its errors told apart from the team's (runEpisode). */
  readonly io: EpisodeIO;
  /** Every turn so far, in order. */
  readonly turns: TurnRecord[];
  /** Each agent's last turn. */
  readonly lastTurnOf: Map<string, number>;
  /** Token ids that may end a tool call's trigger: a generation segment stops on them. */
  readonly triggerIds: number[];
  /** A turn limit the gateway ran into (session-turn.ts): the episode ends truncated. */
  sessionLimit?: LimitExceeded;
}

/** Thrown inside the episode when a limit is exceeded; the episode ends `truncated`. */
export class LimitExceeded extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LimitExceeded';
  }
}

/** The limit a new turn of `role` would exceed, or undefined. */
export function turnLimit(ep: RunningEpisode, role: string, spec: AnyTeam['agents'][string]): string | undefined {
  const taken = ep.turns.filter((t) => t.agent === role).length;
  if (taken >= spec.maxTurns) return `agents.${role}.maxTurns (${spec.maxTurns}) exceeded`;
  if (ep.turns.length >= ep.team.limits.maxTurns) return `limits.maxTurns (${ep.team.limits.maxTurns}) exceeded`;
  return undefined;
}

/**
 * The version of each response token of a turn. A carried episode's turn may hold
 * generations of several versions; tool output (not sampled) takes the turn's version.
 */
export class TokenVersions {
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

/** A turn of `role` on `message`, after the turns `opts.after` (and its own last one, with memory). */
export async function takeTurn(ep: RunningEpisode, role: string, message: string, opts?: { after?: readonly TurnHandle[] }): Promise<TurnHandle> {
  const { team, input, io, turns, lastTurnOf } = ep;
  const tok = team.tokenizer;
  const syntax = team.toolSyntax;
  const spec = team.agents[role]!;
  const limit = turnLimit(ep, role, spec);
  if (limit) throw new LimitExceeded(limit);

  const index = turns.length;
  const started = io.now();
  const parents = new Set<number>();
  for (const h of opts?.after ?? []) parents.add(h.index);
  const own = lastTurnOf.get(role);
  const prev = spec.memory && own !== undefined ? turns[own]! : undefined;
  if (prev) parents.add(prev.index);
  const context = turnContext(team, spec, prev, message);

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
      stopTokens: [tok.eosId, ...ep.triggerIds.filter(() => spec.tools.length > 0)],
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
    const rendered = await runTool(ep, role, parsed, index, call, toolCalls);
    // with a chat template the output is a tool message; the assistant message it interrupts is closed first
    const out = encodeToolOutput(team, role, toolCalls[toolCalls.length - 1], rendered);
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
  return handle;
}

/** A turn's context: the agent's instructions, its own earlier turn when it has memory, and the message. */
function turnContext(team: AnyTeam, spec: AnyTeam['agents'][string], prev: TurnRecord | undefined, message: string): number[] {
  const tok = team.tokenizer;
  const chat = team.chatTemplate;
  const context: number[] = [];
  if (chat) {
    // Framed by the chat template; the earlier turn's ids are kept as they were, never re-rendered.
    if (prev)
      context.push(...prev.contextTokens, ...prev.responseTokens, ...tok.encode(chat.next([{ role: 'user', content: message }], prev.stopReason === 'eos')));
    else context.push(...tok.encode(chatOpening(chat, spec, message, team.toolSyntax)));
  } else {
    context.push(tok.bosId, ...tok.encode(spec.instructions));
    // The agent's own earlier turns, as it saw and wrote them (BOS dropped).
    if (prev) context.push(...prev.contextTokens.slice(1), ...prev.responseTokens);
    context.push(...tok.encode(message));
  }
  return context;
}

/**
 * An agent's first turn on a chat template: its instructions as the system message, then the
 * message; its tools, as function definitions, when the team calls them in the template's own
 * syntax (`syntax.templateTools`: hermesSyntax) and the template shows tools (Qwen/Hermes list
 * them in the system turn). Otherwise the turn renders without them.
 */
export function chatOpening(
  chat: ChatTemplate,
  spec: { instructions: string; tools: readonly Tool[] },
  message: string,
  syntax: Pick<ToolSyntax, 'templateTools'> | undefined,
): string {
  const tools = spec.tools.length > 0 && syntax?.templateTools === true && templateRendersTools(chat) ? functionDefinitions(spec.tools) : undefined;
  return chat.open([...(spec.instructions ? [{ role: 'system' as const, content: spec.instructions }] : []), { role: 'user', content: message }], tools);
}

/** A tool's rendered output (or the syntax's error text) as tokens; text the tokenizer cannot hold names the tool and what rendered it. */
function encodeToolOutput(team: AnyTeam, role: string, call: ToolCallRecord | undefined, rendered: string): number[] {
  const tok = team.tokenizer;
  const chat = team.chatTemplate;
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
  ep: RunningEpisode,
  role: string,
  parsed: NonNullable<ReturnType<ToolSyntax['parse']>>,
  turn: number,
  call: number,
  calls: ToolCallRecord[],
): Promise<string> {
  const { team, input, io } = ep;
  const syntax = team.toolSyntax;
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
