/**
 * Tool calls in sampled text, by the Hermes / Qwen convention the chat
 * templates use: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
 * (a call's JSON read by agents/hermes.ts, as act()'s hermesSyntax reads it).
 * Parsed into OpenAI `tool_calls`; a reply whose calls do not all parse (bad
 * JSON, no name, a tool the request did not offer, an unclosed tag) is
 * returned as text, whole, and counted by the caller.
 */
import { HERMES_CLOSE as CLOSE, HERMES_OPEN as OPEN, hermesCallText, parseHermesCall } from '../agents/hermes';

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ParsedReply = { content: string | null; toolCalls: ToolCall[]; unparsed: boolean };

/** The calls in `text`; `idPrefix` makes the call ids (unique per episode turn); `tools`: the names offered. */
export function parseToolCalls(text: string, tools: ReadonlySet<string>, idPrefix: string): ParsedReply {
  if (!text.includes(OPEN)) return { content: text, toolCalls: [], unparsed: false };
  const asText: ParsedReply = { content: text, toolCalls: [], unparsed: true };
  const calls: ToolCall[] = [];
  let content = '';
  let at = 0;
  for (;;) {
    const start = text.indexOf(OPEN, at);
    if (start < 0) break;
    const end = text.indexOf(CLOSE, start + OPEN.length);
    if (end < 0) return asText;
    content += text.slice(at, start);
    const call = parseHermesCall(text.slice(start + OPEN.length, end));
    if ('error' in call || !tools.has(call.name)) return asText;
    calls.push({ id: `${idPrefix}_${calls.length}`, type: 'function', function: { name: call.name, arguments: JSON.stringify(call.arguments) } });
    at = end + CLOSE.length;
  }
  content = (content + text.slice(at)).trim();
  return { content: content === '' ? null : content, toolCalls: calls, unparsed: false };
}

/** An assistant message's tool calls written back in the convention (history Troupe did not sample). */
export function renderToolCalls(calls: readonly ToolCall[]): string {
  return calls.map((c) => hermesCallText(c.function.name, parseArguments(c.function.arguments))).join('');
}

function parseArguments(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}
