/**
 * Tools: one shape for every tool (zod input, zod output, execute), and the
 * syntaxes a policy uses to call them. `execute` runs in an activity, never in
 * workflow code; the parsing and validation here are pure and run anywhere.
 */
import { z } from 'zod';
import type { ChatTemplate, FunctionDefinition } from './chat-template';
import { describe, FieldError, joinPath, type FieldIssue } from '../infra/issues';

export interface ToolContext {
  episodeId: string;
  turn: number;
  call: number;
  /** Seed for any random choice the tool makes, so a retry reproduces it. */
  seed: number;
  /** Aborted when the tool's time limit passes or the activity is cancelled. */
  signal: AbortSignal;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the default is "any tool": execute takes I (contravariant), so unknown would refuse every typed tool
export interface Tool<I = any, O = any> {
  readonly name: string;
  readonly description: string;
  readonly input: z.ZodType<I>;
  readonly output: z.ZodType<O>;
  readonly timeoutMs: number;
  execute(input: I, ctx: ToolContext): Promise<O>;
  /** Text appended to the agent's context (as mask-0 tokens) for an output. */
  render(output: O): string;
  /**
   * The JSON Schema of the input as a chat template shows it to the agent (its `parameters`);
   * when absent, the JSON Schema of `input` (toolParameters). An MCP tool's is the one the team declares.
   */
  readonly parameters?: Readonly<Record<string, unknown>>;
}

const failsRunKey = Symbol.for('troupe.toolFailsRun');

/**
 * A tool's failure that its team says fails the run (mcpServer's `onError: 'fail-run'`), thrown
 * by its execute: not a tool error the agent reads but a failure no retry can fix. executeTool
 * answers it as a reply with `failsRun` set, and the runtime fails the run with `runMessage`.
 * Recognized by a registered symbol, so copies of this module (team code that loads its own copy
 * of the package) agree.
 */
export class ToolFailsRun extends Error {
  override readonly name = 'ToolFailsRun';
  /** `error`: the tool error (as the agent would have read it); `runMessage`: why the run fails. */
  constructor(
    error: string,
    readonly runMessage: string,
  ) {
    super(error);
    (this as unknown as Record<symbol, boolean>)[failsRunKey] = true;
  }
}
/** Whether `e` is a ToolFailsRun (of any copy of this module). */
export function isToolFailsRun(e: unknown): e is ToolFailsRun {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[failsRunKey] === true;
}

/** What the runtime that runs a tool's calls needs to know of it besides the call (mcpServer sets it). */
export interface ToolRuntimeHints {
  /** The tool holds state per episode where its calls run: an episode's calls go to one thread (its state's). */
  readonly perEpisode?: boolean;
  /** A call that runs past the tool's timeoutMs fails the run, with this message, instead of being a tool error. */
  readonly timeoutFailsRun?: (timeoutMs: number) => string;
  /** Its output is an MCP `tools/call` result (`content`, `structuredContent`): the gateway's MCP server passes it on as is. */
  readonly mcpResult?: boolean;
}
const hintsKey = Symbol.for('troupe.toolRuntimeHints');

/** The tool with `hints` (the same object). */
export function withRuntimeHints<T extends Tool>(tool: T, hints: ToolRuntimeHints): T {
  (tool as unknown as Record<symbol, ToolRuntimeHints>)[hintsKey] = hints;
  return tool;
}

/** A tool's runtime hints (none: an empty object). */
export function runtimeHints(tool: Tool): ToolRuntimeHints {
  return (tool as unknown as Record<symbol, ToolRuntimeHints | undefined>)[hintsKey] ?? {};
}

/**
 * Episode ends, for tools that hold something per episode (mcpServer's scope 'episode'): the
 * runtime that runs an episode's tool calls calls episodeEnded(id) in that process (thread) once
 * the episode is over, and each hook a tool registered there releases what it holds for it. The
 * hooks live on globalThis under a registered symbol: every copy of this module in a thread sees
 * the same hooks.
 */
type EpisodeEndHook = (episodeId: string) => Promise<void>;
const endHooksKey = Symbol.for('troupe.episodeEndHooks');
function endHooks(): Set<EpisodeEndHook> {
  const g = globalThis as unknown as Record<symbol, Set<EpisodeEndHook> | undefined>;
  return (g[endHooksKey] ??= new Set());
}

/** Registers `hook` to run when an episode ends in this thread (once per hook; adding it again is a no-op). */
export function onEpisodeEnd(hook: EpisodeEndHook): void {
  endHooks().add(hook);
}

/** Tells this thread's tools that `episodeId` ended; never throws (a hook that fails is ignored). */
export async function episodeEnded(episodeId: string): Promise<void> {
  await Promise.all([...endHooks()].map((h) => h(episodeId).catch(() => undefined)));
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

/**
 * What makes a value a tool, as problems relative to the tool's path. The
 * runtime calls `input.safeParse`, `execute`, `render` and reads `timeoutMs`,
 * so all must be there: defineTool checks what it built, and defineTeam checks
 * each agent's tools again (a hand-written object must not reach an episode).
 */
export function toolIssues(t: unknown): FieldIssue[] {
  if (t === null || typeof t !== 'object') return [{ path: '', message: `not a tool (use defineTool), got ${describe(t)}` }];
  const x = t as Record<string, unknown>;
  const issues: FieldIssue[] = [];
  const bad = (path: string, message: string) => issues.push({ path, message });
  if (typeof x.name !== 'string' || !toolName.test(x.name)) bad('name', `must match ${toolName}, got ${JSON.stringify(x.name)}`);
  for (const k of ['input', 'output'])
    if (typeof (x[k] as { safeParse?: unknown } | undefined)?.safeParse !== 'function') bad(k, 'must be a zod schema (build tools with defineTool)');
  for (const k of ['execute', 'render']) if (typeof x[k] !== 'function') bad(k, 'must be a function (build tools with defineTool)');
  if (!(typeof x.timeoutMs === 'number' && x.timeoutMs > 0 && Number.isFinite(x.timeoutMs)))
    bad('timeoutMs', `must be a number > 0, got ${describe(x.timeoutMs)}`);
  return issues;
}

const parametersOf = new WeakMap<Tool, Record<string, unknown>>();

/**
 * The JSON Schema of what a tool takes, as the agent is shown it: the tool's own `parameters`, else
 * its zod input's (z.toJSONSchema, as input; `$schema` left out), computed once per tool. The same
 * tool gives the same schema, its keys in the same order, so the same tools give the same tokens.
 */
export function toolParameters(tool: Tool): Record<string, unknown> {
  let p = parametersOf.get(tool);
  if (!p) {
    if (tool.parameters) p = { ...tool.parameters };
    else {
      p = z.toJSONSchema(tool.input, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
      delete p.$schema; // the agent needs what to write, not the draft
    }
    parametersOf.set(tool, p);
  }
  return p;
}

/** Tools as a chat template is given them (`tools`): OpenAI-style function definitions, in the agent's order. */
export function functionDefinitions(tools: readonly Tool[]): FunctionDefinition[] {
  return tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: toolParameters(t) } }));
}

/** A tool's render when it has none: its output as JSON. */
const renderJson = (o: unknown): string => JSON.stringify(o);

/**
 * The part of every output's JSON a schema fixes (punctuation, quotes, keys, literals), as a
 * value: strings '', numbers, booleans and enums a digit (the caller drops digits: their
 * characters vary by value), arrays and records empty, optional fields left out. Undefined
 * where the schema does not fix the shape (a union, any, a transform).
 */
function fixedPart(schema: unknown): { value: unknown } | undefined {
  const def = (schema as { _zod?: { def?: Record<string, unknown> } })?._zod?.def;
  switch (def?.type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(def.shape as Record<string, unknown>)) {
        if ((v as { _zod?: { def?: { type?: string } } })._zod?.def?.type === 'optional') continue;
        const part = fixedPart(v);
        if (!part) return undefined;
        out[k] = part.value;
      }
      return { value: out };
    }
    case 'string':
    case 'enum':
      return { value: '' };
    case 'number':
    case 'int':
    case 'boolean':
      return { value: 0 };
    case 'literal':
      return (def.values as unknown[]).length === 1 ? { value: (def.values as unknown[])[0] } : undefined;
    case 'array':
      return { value: [] };
    case 'record':
      return { value: {} };
    case 'null':
      return { value: null };
    case 'default':
    case 'readonly':
      return fixedPart(def.innerType);
    default:
      return undefined;
  }
}

/**
 * A tool without a render writes its output as JSON into the agent's context: the
 * characters every output's JSON has must be in the team's vocabulary (a character
 * tokenizer without `{` would fail every episode that calls the tool). Path relative to the tool.
 */
export function renderIssues(tool: Tool, encode: (text: string) => unknown): FieldIssue[] {
  if (tool.render !== renderJson) return []; // a team's own render is checked where it runs (the episode names the tool)
  const part = fixedPart(tool.output);
  if (!part) return [];
  const text = JSON.stringify(part.value);
  try {
    encode(text.replace(/[0-9]/g, ''));
    return [];
  } catch (e) {
    return [
      {
        path: 'render',
        message: `the tool has none, so its output is written as JSON (${text}), and ${(e as Error).message}: give it a render that writes what the tokenizer can`,
      },
    ];
  }
}

export function defineTool<I, O>(def: ToolDefinition<I, O>): Tool<I, O> {
  const tool: Tool<I, O> = {
    name: def.name,
    description: def.description,
    input: def.input,
    output: def.output,
    timeoutMs: def.timeoutMs ?? 10_000,
    execute: def.execute,
    render: def.render ?? renderJson,
  };
  const at = typeof def.name === 'string' && toolName.test(def.name) ? `tools.${def.name}` : 'tool';
  const issues = toolIssues(tool);
  if (issues.length > 0) throw new FieldError(issues.map((i) => ({ path: joinPath(at, i.path ? [i.path] : []), message: i.message })));
  return tool;
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
  /**
   * The calls are those a chat template teaches when it lists the tools (hermesSyntax): act() then
   * gives the agent's tools to the template. Other syntaxes are taught by the team's own words, and
   * a listing would teach a call format they do not read (and cost its tokens on every first turn).
   */
  readonly templateTools?: boolean;
  /** Problems of this syntax in a team, paths relative to `toolSyntax`; checked when the team is defined. */
  check?(team: SyntaxContext): FieldIssue[];
}

/** What a syntax is checked against: the tools the team's agents have, its tokenizer and chat template. */
export interface SyntaxContext {
  tools: readonly string[];
  chatTemplate?: ChatTemplate;
  /** Throws when the text has a character outside the vocabulary. */
  encode(text: string): unknown;
}

/** An issue when `text` cannot be tokenized (the policy could never read it). */
function encodeIssue(team: SyntaxContext, path: string, text: string): FieldIssue[] {
  try {
    team.encode(text);
    return [];
  } catch (e) {
    return [{ path, message: (e as Error).message }];
  }
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
    check: (team) => [
      ...(team.tools.includes(opts.tool)
        ? []
        : [{ path: 'tool', message: `unknown tool ${JSON.stringify(opts.tool)} (the agents' tools: ${team.tools.join(', ') || 'none'})` }]),
      ...encodeIssue(team, 'error', opts.error),
    ],
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
    check: (team) => encodeIssue(team, 'renderError', '<error></error>'),
  };
}

/** Formats a zod failure as `field: message; field: message`. */
export function zodMessage(error: z.ZodError, root = ''): string {
  return error.issues.map((i) => `${[root, ...i.path.map(String)].filter(Boolean).join('.') || '(root)'}: ${i.message}`).join('; ');
}
