/**
 * Tools: one shape for every tool (zod input, zod output, execute), and the
 * syntaxes a policy uses to call them. `execute` runs in an activity, never in
 * workflow code; the parsing and validation here are pure and run anywhere.
 */
import { z } from 'zod';

export interface ToolContext {
  episodeId: string;
  turn: number;
  call: number;
  /** Seed for any random choice the tool makes, so a retry reproduces it. */
  seed: number;
  /** Aborted when the tool's time limit passes or the activity is cancelled. */
  signal: AbortSignal;
}

export interface Tool<I = any, O = any> {
  readonly name: string;
  readonly description: string;
  readonly input: z.ZodType<I>;
  readonly output: z.ZodType<O>;
  readonly timeoutMs: number;
  execute(input: I, ctx: ToolContext): Promise<O>;
  /** Text appended to the agent's context (as mask-0 tokens) for an output. */
  render(output: O): string;
}

export interface ToolDefinition<I, O> {
  name: string;
  description: string;
  input: z.ZodType<I>;
  output: z.ZodType<O>;
  execute(input: I, ctx: ToolContext): Promise<O>;
  render?: (output: O) => string;
  timeoutMs?: number;
}

const toolName = /^[a-z][a-z0-9_-]{0,39}$/;

export function defineTool<I, O>(def: ToolDefinition<I, O>): Tool<I, O> {
  if (!toolName.test(def.name ?? '')) throw new Error(`tool.name: must match ${toolName}, got ${JSON.stringify(def.name)}`);
  if (!(def.input instanceof z.ZodType)) throw new Error(`tools.${def.name}.input: must be a zod schema`);
  if (!(def.output instanceof z.ZodType)) throw new Error(`tools.${def.name}.output: must be a zod schema`);
  if (typeof def.execute !== 'function') throw new Error(`tools.${def.name}.execute: must be a function`);
  const timeoutMs = def.timeoutMs ?? 10_000;
  if (!(timeoutMs > 0)) throw new Error(`tools.${def.name}.timeoutMs: must be > 0`);
  return {
    name: def.name,
    description: def.description,
    input: def.input,
    output: def.output,
    timeoutMs,
    execute: def.execute,
    render: def.render ?? ((o) => JSON.stringify(o)),
  };
}

/** What a syntax finds at a trigger: a call to validate and run, or a malformed call. */
export type ParsedCall = { tool: string; input: unknown } | { tool?: string; error: string };

/**
 * How a policy writes a tool call. Generation stops after a trigger string; the
 * runtime then asks `parse` about the agent's visible text (context plus what it
 * generated), and appends either the rendered output or `renderError(...)`.
 */
export interface ToolSyntax {
  readonly name: string;
  readonly triggers: readonly string[];
  parse(visible: string): ParsedCall | null;
  renderError(message: string): string;
}

/**
 * Calculator-key syntax: typing the trigger (e.g. '=') calls `tool` on the text
 * since the last separator, the way '=' on a pocket calculator evaluates what is
 * on the display. One token per call, so a policy learning from scratch can find it.
 */
export function keySyntax(opts: { trigger: string; tool: string; argument: string; separators: string; error: string }): ToolSyntax {
  if (opts.trigger.length !== 1) throw new Error('keySyntax.trigger: must be one character');
  return {
    name: `key(${opts.trigger})`,
    triggers: [opts.trigger],
    parse(visible) {
      if (!visible.endsWith(opts.trigger)) return null;
      const body = visible.slice(0, -1);
      let start = body.length;
      while (start > 0 && !opts.separators.includes(body[start - 1]!)) start--;
      const arg = body.slice(start);
      if (arg.length === 0) return { tool: opts.tool, error: `${opts.tool}: empty ${opts.argument}` };
      return { tool: opts.tool, input: { [opts.argument]: arg } };
    },
    renderError: () => opts.error,
  };
}

/**
 * Tag syntax for text models: `<call NAME>{json input}</call>`. The input is the
 * JSON between the tags; the output is rendered as `<out>...</out>`.
 */
export function tagSyntax(): ToolSyntax {
  const close = '</call>';
  return {
    name: 'tag',
    triggers: [close],
    parse(visible) {
      if (!visible.endsWith(close)) return null;
      const open = visible.lastIndexOf('<call ');
      if (open < 0) return { error: 'tool call: </call> without <call NAME>' };
      const inner = visible.slice(open + 6, visible.length - close.length);
      const gt = inner.indexOf('>');
      if (gt < 0) return { error: 'tool call: <call NAME> is not closed with >' };
      const tool = inner.slice(0, gt).trim();
      try {
        return { tool, input: JSON.parse(inner.slice(gt + 1)) };
      } catch (e) {
        return { tool, error: `tool call ${tool}: input is not JSON (${(e as Error).message})` };
      }
    },
    renderError: (message) => `<error>${message}</error>`,
  };
}

/** Formats a zod failure as `field: message; field: message`. */
export function zodMessage(error: z.ZodError, root = ''): string {
  return error.issues
    .map((i) => `${[root, ...i.path.map(String)].filter(Boolean).join('.') || '(root)'}: ${i.message}`)
    .join('; ');
}
