/**
 * A Chat Completions request, checked field by field. What the gateway uses
 * is typed; what it cannot honour (n > 1, top_logprobs) is refused, naming the
 * field; fields that do not change the tokens (user, metadata, store, seed:
 * Troupe seeds every turn itself) are ignored.
 */
import { invalid } from './errors';
import type { ToolCall } from './tool-calls';

export type RequestMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; toolCalls: ToolCall[] }
  | { role: 'tool'; content: string; toolCallId: string };

export interface FunctionTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export interface ChatRequest {
  model: string;
  messages: RequestMessage[];
  tools: FunctionTool[];
  /** 'none': the tools are neither shown nor parsed. 'required' and a named tool are accepted, not enforced: the policy decides. */
  toolChoice: 'none' | 'auto' | 'required' | { name: string };
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  stop: string[];
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
  /** Where the messages are in the request as sent, for errors. */
  params: MessageParams;
}

/** Where a request's messages are, in the terms of the API it came through. */
export interface MessageParams {
  /** The field that holds them: `messages`, `input`. */
  messages: string;
  /** Per message: its content's path (`messages[2].content`, `input[2].output`, `instructions`) and each tool call's (`messages[1].tool_calls[0]`, `input[3]`). */
  each: Array<{ content: string; calls: string[] }>;
}

type Json = Record<string, unknown>;
export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

export function parseChatRequest(body: unknown): ChatRequest {
  if (!isObject(body)) throw invalid('body', 'must be a JSON object');
  if (typeof body.model !== 'string' || body.model === '') throw invalid('model', 'is required (a string)');
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) throw invalid('messages', 'is required (a non-empty array)');
  const tools = parseTools(body.tools);
  const parsed = messages.map((m, i) => parseMessage(m, `messages[${i}]`));
  const out: ChatRequest = {
    model: body.model,
    messages: parsed,
    tools,
    toolChoice: parseToolChoice(body.tool_choice, tools),
    stop: parseStop(body.stop),
    stream: optionalBool(body.stream, 'stream') ?? false,
    includeUsage: false,
    logprobs: optionalBool(body.logprobs, 'logprobs') ?? false,
    params: {
      messages: 'messages',
      each: parsed.map((m, i) => ({
        content: `messages[${i}].content`,
        calls: m.role === 'assistant' ? m.toolCalls.map((_, k) => `messages[${i}].tool_calls[${k}]`) : [],
      })),
    },
  };
  if (body.stream_options !== undefined && body.stream_options !== null) {
    if (!isObject(body.stream_options)) throw invalid('stream_options', 'must be an object');
    out.includeUsage = optionalBool(body.stream_options.include_usage, 'stream_options.include_usage') ?? false;
  }
  if (body.n !== undefined && body.n !== null && body.n !== 1)
    throw invalid('n', `only 1 is supported (one episode turn per call), got ${JSON.stringify(body.n)}`);
  if (body.top_logprobs !== undefined && body.top_logprobs !== null && body.top_logprobs !== 0)
    throw invalid('top_logprobs', 'is not supported: the engine returns the sampled tokens’ log-probs only');
  const legacy = positiveInteger(body.max_tokens, 'max_tokens');
  const maxTokens = positiveInteger(body.max_completion_tokens, 'max_completion_tokens') ?? legacy;
  return { ...out, ...(maxTokens !== undefined ? { maxTokens } : {}), ...parseSampling(body) };
}

/** `temperature` and `top_p`, the same in both APIs. */
export function parseSampling(body: Json): Pick<ChatRequest, 'temperature' | 'topP'> {
  const out: Pick<ChatRequest, 'temperature' | 'topP'> = {};
  if (body.temperature !== undefined && body.temperature !== null) {
    const t = body.temperature;
    if (typeof t !== 'number' || !(t >= 0 && t <= 2)) throw invalid('temperature', `must be a number in [0, 2], got ${JSON.stringify(t)}`);
    out.temperature = t;
  }
  if (body.top_p !== undefined && body.top_p !== null) {
    const p = body.top_p;
    if (typeof p !== 'number' || !(p > 0 && p <= 1)) throw invalid('top_p', `must be a number in (0, 1], got ${JSON.stringify(p)}`);
    out.topP = p;
  }
  return out;
}

export function positiveInteger(v: unknown, field: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (!(Number.isInteger(v) && (v as number) > 0)) throw invalid(field, `must be a positive integer, got ${JSON.stringify(v)}`);
  return v as number;
}

export function optionalBool(v: unknown, field: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalid(field, `must be a boolean, got ${JSON.stringify(v)}`);
  return v;
}

/** A message's content: a string, null (an assistant message with tool calls), or text parts. */
function text(v: unknown, at: string, nullable: boolean): string {
  if (typeof v === 'string') return v;
  if ((v === null || v === undefined) && nullable) return '';
  if (!Array.isArray(v)) throw invalid(at, 'must be a string or an array of text parts');
  return v
    .map((part, j) => {
      if (!isObject(part) || part.type !== 'text' || typeof part.text !== 'string')
        throw invalid(`${at}[${j}]`, `only text parts ({ type: "text", text }) are supported, got ${JSON.stringify(isObject(part) ? part.type : part)}`);
      return part.text;
    })
    .join('');
}

function parseMessage(m: unknown, at: string): RequestMessage {
  if (!isObject(m)) throw invalid(at, 'must be an object');
  switch (m.role) {
    case 'system':
    case 'developer':
      return { role: 'system', content: text(m.content, `${at}.content`, false) };
    case 'user':
      return { role: 'user', content: text(m.content, `${at}.content`, false) };
    case 'assistant': {
      const calls = m.tool_calls ?? [];
      if (!Array.isArray(calls)) throw invalid(`${at}.tool_calls`, 'must be an array');
      return {
        role: 'assistant',
        content: text(m.content, `${at}.content`, true),
        toolCalls: calls.map((c, j) => {
          const path = `${at}.tool_calls[${j}]`;
          if (!isObject(c) || !isObject(c.function)) throw invalid(`${path}.function`, 'must be an object');
          if (typeof c.id !== 'string') throw invalid(`${path}.id`, 'must be a string');
          if (typeof c.function.name !== 'string') throw invalid(`${path}.function.name`, 'must be a string');
          if (typeof c.function.arguments !== 'string') throw invalid(`${path}.function.arguments`, 'must be a string (JSON)');
          return { id: c.id, type: 'function' as const, function: { name: c.function.name, arguments: c.function.arguments } };
        }),
      };
    }
    case 'tool':
      if (typeof m.tool_call_id !== 'string') throw invalid(`${at}.tool_call_id`, 'must be a string');
      return { role: 'tool', content: text(m.content, `${at}.content`, false), toolCallId: m.tool_call_id };
    default:
      throw invalid(`${at}.role`, `must be system, developer, user, assistant or tool, got ${JSON.stringify(m.role)}`);
  }
}

function parseTools(v: unknown): FunctionTool[] {
  return parseToolList(v, (t, at) => {
    if (!isObject(t) || t.type !== 'function') throw invalid(`${at}.type`, 'must be "function"');
    if (!isObject(t.function)) throw invalid(`${at}.function`, 'must be an object');
    return [t.function, `${at}.function`];
  });
}

/**
 * A `tools` list, checked: `locate` finds each tool's function definition (name, description,
 * parameters) and its path (Chat Completions nests it under `function`, the Responses API does not).
 */
export function parseToolList(v: unknown, locate: (tool: unknown, at: string) => [Json, string]): FunctionTool[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid('tools', 'must be an array');
  const names = new Set<string>();
  return v.map((t, i) => {
    const [f, at] = locate(t, `tools[${i}]`);
    if (typeof f.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(f.name)) throw invalid(`${at}.name`, 'must be 1-64 letters, digits, _ or -');
    if (names.has(f.name)) throw invalid(`${at}.name`, `duplicate tool ${f.name}`);
    names.add(f.name);
    if (f.description !== undefined && f.description !== null && typeof f.description !== 'string') throw invalid(`${at}.description`, 'must be a string');
    if (f.parameters !== undefined && f.parameters !== null) schemaIssue(f.parameters, `${at}.parameters`);
    return {
      type: 'function',
      function: {
        name: f.name,
        ...(typeof f.description === 'string' ? { description: f.description } : {}),
        ...(f.parameters !== undefined && f.parameters !== null ? { parameters: f.parameters as Json } : {}),
      },
    };
  });
}

const SCHEMA_TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);

/** The structural rules of JSON Schema a tool's parameters must keep (not a full validator: enough to catch a non-schema). */
function schemaIssue(s: unknown, at: string): void {
  if (typeof s === 'boolean') return;
  if (!isObject(s)) throw invalid(at, 'must be a JSON Schema (an object)');
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    for (const t of types) if (typeof t !== 'string' || !SCHEMA_TYPES.has(t)) throw invalid(`${at}.type`, `${JSON.stringify(t)} is not a JSON Schema type`);
  }
  if (s.properties !== undefined) {
    if (!isObject(s.properties)) throw invalid(`${at}.properties`, 'must be an object of schemas');
    for (const [k, p] of Object.entries(s.properties)) schemaIssue(p, `${at}.properties.${k}`);
  }
  if (s.items !== undefined) schemaIssue(s.items, `${at}.items`);
  if (s.required !== undefined && !(Array.isArray(s.required) && s.required.every((r) => typeof r === 'string')))
    throw invalid(`${at}.required`, 'must be an array of property names');
  for (const k of ['anyOf', 'oneOf', 'allOf'] as const) {
    const list = s[k];
    if (list === undefined) continue;
    if (!Array.isArray(list)) throw invalid(`${at}.${k}`, 'must be an array of schemas');
    list.forEach((x, i) => schemaIssue(x, `${at}.${k}[${i}]`));
  }
}

function parseToolChoice(v: unknown, tools: readonly FunctionTool[]): ChatRequest['toolChoice'] {
  if (v === undefined || v === null) return tools.length > 0 ? 'auto' : 'none';
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  if (isObject(v) && v.type === 'function' && isObject(v.function) && typeof v.function.name === 'string') {
    const name = v.function.name;
    if (!tools.some((t) => t.function.name === name)) throw invalid('tool_choice.function.name', `no tool ${JSON.stringify(name)} in tools`);
    return { name };
  }
  throw invalid('tool_choice', 'must be "none", "auto", "required" or { type: "function", function: { name } }');
}

function parseStop(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.length > 4 || list.some((s) => typeof s !== 'string' || s === ''))
    throw invalid('stop', 'must be a non-empty string or an array of up to 4 of them');
  return list as string[];
}
