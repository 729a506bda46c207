/**
 * Tool calls by the Hermes / Qwen convention, which their chat templates teach the model when
 * they list its tools: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. One rule for
 * what a call's JSON must be, used by `act()` (hermesSyntax) and by the gateway
 * (gateway/tool-calls.ts), which reads the same sampled text into OpenAI `tool_calls`.
 */
import { describe, type FieldIssue } from '../infra/issues';
import { templateRendersTools } from './chat-template';
import type { ToolSyntax } from './tool';

export const HERMES_OPEN = '<tool_call>';
export const HERMES_CLOSE = '</tool_call>';

/** A call's JSON read: the tool's name and its arguments (an object; `{}` when left out), or why it is not a call. */
export type HermesCall = { name: string; arguments: Record<string, unknown> } | { name?: string; error: string };

/** The JSON between the tags (whitespace around it allowed): `{"name": string, "arguments"?: object}`. */
export function parseHermesCall(json: string): HermesCall {
  let call: unknown;
  try {
    call = JSON.parse(json);
  } catch (e) {
    return { error: `tool call: not JSON (${(e as Error).message})` };
  }
  if (call === null || typeof call !== 'object' || Array.isArray(call))
    return { error: `tool call: must be {"name": ..., "arguments": {...}}, got ${describe(call)}` };
  const { name, arguments: args } = call as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string') return { error: `tool call: "name" must be the tool's name, got ${describe(name)}` };
  if (args !== undefined && (args === null || typeof args !== 'object' || Array.isArray(args)))
    return { name, error: `tool call ${name}: "arguments" must be an object, got ${describe(args)}` };
  return { name, arguments: (args ?? {}) as Record<string, unknown> };
}

/** A call written in the convention. */
export function hermesCallText(name: string, args: unknown): string {
  return `${HERMES_OPEN}${JSON.stringify({ name, arguments: args })}${HERMES_CLOSE}`;
}

/**
 * The syntax of Hermes / Qwen chat templates, for a team whose `chatTemplate` lists the agents'
 * tools (act() gives them to it): generation stops after `</tool_call>`, the JSON since the last
 * `<tool_call>` is the call, and the output is a `tool` message the template frames (Qwen:
 * `<tool_response>…</tool_response>` in a user turn). A failed call's message is that message's
 * content, as `{"error": message}`.
 */
export function hermesSyntax(): ToolSyntax {
  return {
    name: 'hermes',
    triggers: [HERMES_CLOSE],
    templateTools: true,
    parse(visible) {
      if (!visible.endsWith(HERMES_CLOSE)) return null;
      const body = visible.slice(0, -HERMES_CLOSE.length);
      const open = body.lastIndexOf(HERMES_OPEN);
      // the template's own example (in the system turn) is closed: a close after it is not a call
      if (open < 0 || body.includes(HERMES_CLOSE, open)) return { error: `tool call: ${HERMES_CLOSE} without ${HERMES_OPEN}` };
      const call = parseHermesCall(body.slice(open + HERMES_OPEN.length));
      if ('error' in call) return { ...(call.name !== undefined ? { tool: call.name } : {}), error: call.error };
      return { tool: call.name, input: call.arguments };
    },
    renderError: (message) => JSON.stringify({ error: message }),
    check(team) {
      const issues: FieldIssue[] = [];
      if (!team.chatTemplate) issues.push({ path: '', message: 'hermesSyntax needs a chatTemplate that lists the tools (Qwen, Hermes); the team has none' });
      else if (!templateRendersTools(team.chatTemplate))
        issues.push({ path: '', message: "hermesSyntax needs a chatTemplate that lists the tools: the team's never shows its `tools` variable" });
      try {
        team.encode(JSON.stringify({ error: '' }));
      } catch (e) {
        issues.push({ path: 'renderError', message: (e as Error).message });
      }
      return issues;
    },
  };
}
