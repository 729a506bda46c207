/**
 * One agent's OpenAI-compatible session in one episode: a request (Chat
 * Completions, or Responses read as one) becomes one turn of that agent, token in / token out.
 *
 * The context is built from ids, never from re-rendered text where it can be
 * avoided: an assistant message this session returned is matched (with
 * everything before it) to the turn that sampled it, and the new context is
 * that turn's context and sampled ids followed by the template's continuation
 * (`chat.next`) with the messages after it. Only history the session cannot
 * match (a first call, or history the agent's code edited) is rendered by the
 * template and encoded: such a turn is counted in `retokenizedTurns` when it
 * contains assistant messages, since training then sees a context that the
 * policy's own samples did not produce.
 */
import { LimitExceeded, type EpisodeTurns } from '../agents/episode';
import { templateRendersTools, type ChatMessage, type ChatTemplate } from '../agents/chat-template';
import type { TurnRecord } from '../schema/trajectory';
import { GatewayError, invalid } from './errors';
import { JOURNAL_COUNTERS, canonical, requestHash, type EpisodeCalls } from './journal';
import type { ChatRequest, FunctionTool, RequestMessage } from './request';
import { parseToolCalls, renderToolCalls, type ToolCall } from './tool-calls';

export interface Completion {
  turn: TurnRecord;
  message: { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] };
  finishReason: 'stop' | 'length' | 'tool_calls';
  /** Per sampled token (a closing end token left out): its text and log-prob. */
  tokens: Array<{ token: string; logprob: number }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/** Counters kept per agent in the trajectory (`counters`). */
export const COUNTERS = { calls: 'gatewayCalls', retokenized: 'retokenizedTurns', unparsed: 'unparsedToolCalls' } as const;

const argumentsKey = (args: string) => {
  try {
    return canonical(JSON.parse(args));
  } catch {
    return args;
  }
};

const messageKey = (m: RequestMessage | { role: 'assistant'; content: string; toolCalls: ToolCall[] }) =>
  canonical(m.role === 'assistant' ? [m.role, m.content, m.toolCalls.map((c) => [c.id, c.function.name, argumentsKey(c.function.arguments)])] : m);

const historyKey = (tools: readonly FunctionTool[], messages: readonly RequestMessage[]) => canonical([tools, messages.map(messageKey)]);

function toChat(m: RequestMessage): ChatMessage {
  return m.role === 'assistant' ? { role: 'assistant', content: m.content + renderToolCalls(m.toolCalls) } : { role: m.role, content: m.content };
}

/** The param of the first message content or tool call that does not encode; else `tools` (their JSON is the rest of the text). */
function unencodable(req: ChatRequest, encode: (text: string) => unknown): string {
  const fails = (text: string) => {
    try {
      encode(text);
      return false;
    } catch {
      return true;
    }
  };
  for (const [i, m] of req.messages.entries()) {
    const at = req.params.each[i]!;
    if (fails(m.content)) return at.content;
    const call = m.role === 'assistant' ? m.toolCalls.findIndex((c) => fails(renderToolCalls([c]))) : -1;
    if (call >= 0) return at.calls[call]!;
  }
  return 'tools';
}

export class AgentSession {
  /** What this session returned, by the history it answered plus the reply: the turn that sampled it. */
  private readonly exchanges = new Map<string, TurnRecord>();
  readonly model: string;

  constructor(
    private readonly episode: EpisodeTurns,
    readonly role: string,
    private readonly calls: EpisodeCalls,
  ) {
    this.model = episode.team.agents[role]!.model;
  }

  async complete(req: ChatRequest): Promise<Completion> {
    const team = this.episode.team;
    const tok = team.tokenizer;
    const chat = team.chatTemplate;
    if (req.model !== this.model)
      throw new GatewayError(
        404,
        `this session serves agent ${this.role}'s model ${JSON.stringify(this.model)}, not ${JSON.stringify(req.model)}`,
        'model',
        'model_not_found',
      );
    if (!chat)
      throw new GatewayError(400, `team ${team.name} has no chatTemplate: the gateway renders messages with it`, req.params.messages, 'no_chat_template');
    const tools = req.toolChoice === 'none' ? [] : req.tools;
    if (tools.length > 0 && !templateRendersTools(chat))
      throw invalid('tools', `team ${team.name}'s chat template does not render tools (it never shows its \`tools\` variable)`);

    const { context, parents, retokenized } = this.contextOf(req, tools, chat);
    const stops = req.stop;
    const stopTokens = [...new Set(stops.flatMap((s) => tok.idsContaining(s.slice(-1))))];
    // numbered only once it is valid: a refused request takes no index and records nothing
    const hash = requestHash(this.role, req);
    const { index, answered } = await this.calls.takeTurn(this.role, hash);
    let turn: TurnRecord;
    try {
      turn = await this.episode.turn(
        this.role,
        {
          context,
          parents,
          maxTokens: req.maxTokens ?? team.agents[this.role]!.maxTokens,
          sampling: { ...(req.temperature !== undefined ? { temperature: req.temperature } : {}), ...(req.topP !== undefined ? { topP: req.topP } : {}) },
          stopTokens,
          stopped: (text) => stops.some((s) => text.includes(s)),
        },
        answered,
      );
    } catch (e) {
      if (e instanceof LimitExceeded) throw new GatewayError(400, `${e.message}: the episode ends truncated`, null, 'episode_limit');
      throw e;
    }
    // journaled before the agent sees the reply: whatever an agent was answered, a retry answers the same
    if (answered) this.episode.count(this.role, JOURNAL_COUNTERS.replayed);
    else
      await this.calls.record({
        index,
        agent: this.role,
        requestHash: hash,
        tokens: turn.responseTokens,
        logprobs: turn.logprobs,
        stopReason: turn.stopReason,
        durationMs: turn.durationMs,
      });
    this.episode.count(this.role, COUNTERS.calls);
    this.episode.count(this.role, COUNTERS.retokenized, retokenized ? 1 : 0);

    const sampled = turn.responseTokens.at(-1) === tok.eosId ? turn.responseTokens.slice(0, -1) : turn.responseTokens;
    let text = tok.decode(sampled);
    const cut = Math.min(...stops.map((s) => text.indexOf(s)).filter((i) => i >= 0));
    if (Number.isFinite(cut)) text = text.slice(0, cut); // OpenAI leaves the stop sequence out
    const parsed = tools.length > 0 ? parseToolCalls(text, new Set(tools.map((t) => t.function.name)), `call_${turn.index}`) : undefined;
    this.episode.count(this.role, COUNTERS.unparsed, parsed?.unparsed ? 1 : 0);
    const toolCalls = parsed?.toolCalls ?? [];
    const content = parsed ? parsed.content : text;
    this.exchanges.set(`${historyKey(tools, req.messages)}\n${messageKey({ role: 'assistant', content: content ?? '', toolCalls })}`, turn);
    return {
      turn,
      message: { role: 'assistant', content, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) },
      finishReason: toolCalls.length > 0 ? 'tool_calls' : turn.stopReason === 'max_tokens' ? 'length' : 'stop',
      tokens: sampled.map((id, i) => ({ token: tok.decode([id]), logprob: turn.logprobs[i]! })),
      usage: { prompt_tokens: context.length, completion_tokens: turn.responseTokens.length, total_tokens: context.length + turn.responseTokens.length },
    };
  }

  /** The request's context: continued from the latest assistant message this session returned, else rendered whole. */
  private contextOf(req: ChatRequest, tools: readonly FunctionTool[], chat: ChatTemplate) {
    const messages = req.messages;
    const tok = this.episode.team.tokenizer;
    const encode = (text: string) => {
      try {
        return tok.encode(text);
      } catch (e) {
        throw invalid(
          unencodable(req, (piece) => tok.encode(piece)),
          (e as Error).message,
        );
      }
    };
    const render = (fn: () => string) => {
      try {
        return fn();
      } catch (e) {
        throw invalid(req.params.messages, (e as Error).message);
      }
    };
    for (let j = messages.length - 1; j >= 0; j--) {
      const m = messages[j]!;
      if (m.role !== 'assistant') continue;
      const prev = this.exchanges.get(`${historyKey(tools, messages.slice(0, j))}\n${messageKey(m)}`);
      if (!prev) continue;
      const rest = messages.slice(j + 1);
      const endedOnEos = prev.responseTokens.at(-1) === tok.eosId;
      return {
        context: [...prev.contextTokens, ...prev.responseTokens, ...encode(render(() => chat.next(rest.map(toChat), endedOnEos)))],
        parents: [prev.index],
        retokenized: rest.some((r) => r.role === 'assistant'),
      };
    }
    return {
      context: encode(render(() => chat.open(messages.map(toChat), tools))),
      parents: [],
      retokenized: messages.some((m) => m.role === 'assistant'),
    };
  }
}
