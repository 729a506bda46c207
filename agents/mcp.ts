/**
 * MCP servers as team tools: `mcpServer({ name, command | url, tools })` starts an MCP server
 * (a stdio command or a streamable-HTTP URL) where the team's tools run, and gives each of the
 * server's tools the team names as a Troupe tool whose calls are the server's `tools/call`.
 *
 * Listing: a team is defined synchronously, and `tools/list` is a call to a process that is
 * not running yet, so the team declares the tools it gives its agents (by name) and the server
 * is listed when it starts: a declared tool the server does not have is a tool error naming
 * the tools it has, and each tool's input is checked against the server's own JSON schema
 * (zod's fromJSONSchema) before it is sent. What a chat template shows the agent of a tool's
 * input is the schema the team declares with it (`inputSchema`), else any object. `list()` lists
 * a server from anywhere (a check at run start, a script that prints the schemas).
 *
 * Processes: scope 'worker' (the default), one server per process that runs the team's tools (a
 * pool worker's tool thread), started on the first call and again after it dies; scope 'episode',
 * one per episode in that process, started on the episode's first call and ended when the runtime
 * says the episode ended (episodeEnded, agents/tool.ts). A call to a server that does not start,
 * crashes, hangs past the tool's timeoutMs (the server is then killed and restarted on the next
 * call), or answers out of the protocol's schema is a tool error: the episode goes on; with
 * onError 'fail-run' it fails the run instead (ToolFailsRun). `close()` ends the servers; a
 * thread that is ended closes its end of the servers' stdin, on which a stdio server exits, and
 * its owner kills what is left (activities/training/thread-children.ts).
 *
 * Durable episodes run every tool call as an activity, so the result is recorded in the
 * workflow's history and a replay gets it without calling the server again.
 *
 * The SDK (@modelcontextprotocol/sdk, an optional peer dependency) is loaded on the first call
 * with a real import(): this module is imported by team code, which also runs in the workflow
 * sandbox, where nothing may reach a process or the network.
 */
import { z } from 'zod';
import { esmImport } from '../infra/esm';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { BroadcastChannel } from 'node:worker_threads';
import { describe, FieldError, type FieldIssue } from '../infra/issues';
import { defineTool, onEpisodeEnd, ToolFailsRun, withRuntimeHints, zodMessage, type Tool } from './tool';

export interface McpServerOptions {
  /** Names the server in errors, and in the default descriptions of its tools. */
  name: string;
  /** A stdio server: the command to start (e.g. 'npx'), its arguments, environment (added to the worker's) and directory. */
  command?: string;
  args?: readonly string[];
  env?: Readonly<Record<string, string>>;
  cwd?: string;
  /** A streamable-HTTP server: its URL. Either `command` or `url`. */
  url?: string;
  /**
   * 'worker' (default): one server per process (thread) that runs the team's tools, shared by the
   * episodes it runs. 'episode': one server per episode, started on the episode's first call of
   * one of its tools and ended when the episode ends, so no state passes between episodes.
   */
  scope?: 'worker' | 'episode';
  /**
   * A server that does not start, crashes, hangs past timeoutMs or answers out of the protocol's
   * schema: 'tool-error' (default) gives the agent a tool error and the episode goes on;
   * 'fail-run' fails the run at once (not retried), naming the server, the tool and what went wrong.
   */
  onError?: 'tool-error' | 'fail-run';
  /**
   * The server's tools the agents get: their MCP names (each also the Troupe tool's name), or
   * Troupe name → MCP name, or Troupe name → { tool, description, inputSchema }. `inputSchema`
   * (a JSON Schema object) is what a chat template shows the agent as the tool's parameters
   * (default: any object); each call is still checked against the server's own schema.
   */
  tools: readonly string[] | Readonly<Record<string, string | McpToolDeclaration>>;
  /** Each call's time limit, starting the server included (default 30 000 ms). */
  timeoutMs?: number;
}

/** A server's tool as the team gives it to its agents. */
export interface McpToolDeclaration {
  /** The MCP tool's name on the server. */
  tool: string;
  /** Default: `<tool> (MCP server <name>)`. */
  description?: string;
  /** The JSON Schema the agent is shown for the tool's input (default `{ "type": "object" }`); not what calls are checked against. */
  inputSchema?: Readonly<Record<string, unknown>>;
}

/** What an MCP tool's parameters are shown as when the team declares no schema: any object. */
const ANY_OBJECT: Readonly<Record<string, unknown>> = { type: 'object' };

/** A content item of a `tools/call` result (text, image, audio, resource, resource_link). */
export type McpContent = { type: string } & Record<string, unknown>;

export interface McpToolOutput {
  content: McpContent[];
  structuredContent?: Record<string, unknown>;
}

/** A tool as the server lists it. */
export interface McpToolInfo {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}

export interface McpServer {
  readonly name: string;
  /** The declared tools, as Troupe tools: put them in an agent's `tools`. */
  readonly tools: Tool<Record<string, unknown>, McpToolOutput>[];
  /** Each declared tool's Troupe name and the server's name for it. */
  readonly declared: ReadonlyArray<{ name: string; mcpName: string }>;
  /** onError 'fail-run': a server problem fails the run. */
  readonly failsRun: boolean;
  /** The server's `tools/list` (starts the server in this process if it is not running). */
  list(): Promise<McpToolInfo[]>;
  /** Ends this process's server (a later call starts it again). */
  close(): Promise<void>;
}

/**
 * Where a worker thread reports the server processes it starts and ends, so that the thread's
 * owner ends them when it ends the thread (activities/training/thread-children.ts).
 */
export const THREAD_CHILDREN_CHANNEL = 'troupe:thread-children';
export interface ThreadChildMessage {
  threadId: number;
  pid: number;
  live: boolean;
}

let reports: { channel: BroadcastChannel; threadId: number } | null | undefined;

/** Tells the thread's owner that `pid` runs (or no longer does); nothing on the main thread. */
async function report(pid: number | null | undefined, isLive: boolean): Promise<void> {
  if (typeof pid !== 'number') return;
  if (reports === undefined) {
    const threads = await loadMcpModule<typeof import('node:worker_threads')>('node:worker_threads');
    reports = threads.isMainThread ? null : { channel: new threads.BroadcastChannel(THREAD_CHILDREN_CHANNEL), threadId: threads.threadId };
    reports?.channel.unref();
  }
  reports?.channel.postMessage({ threadId: reports.threadId, pid, live: isLive } satisfies ThreadChildMessage);
}

const serverName = /^[a-z][a-z0-9_-]{0,39}$/;
const toolName = /^[a-z][a-z0-9_-]{0,39}$/;

const output: z.ZodType<McpToolOutput> = z.object({
  content: z.array(z.looseObject({ type: z.string() })),
  structuredContent: z.record(z.string(), z.unknown()).optional(),
});

/** What an agent reads of a result: its text, a placeholder for what is not text. */
function render(o: McpToolOutput): string {
  if (o.content.length === 0 && o.structuredContent) return JSON.stringify(o.structuredContent);
  return o.content.map(contentText).join('\n');
}

function contentText(c: McpContent): string {
  if (c.type === 'text' && typeof c.text === 'string') return c.text;
  const resource = c.resource as { uri?: string; text?: string } | undefined;
  if (c.type === 'resource' && typeof resource?.text === 'string') return resource.text;
  const what = c.mimeType ?? c.uri ?? resource?.uri;
  return `[${c.type}${typeof what === 'string' ? ` ${what}` : ''}]`;
}

/** A module of the MCP SDK (an optional peer dependency), or of node, by a real import(); a missing SDK says how to install it. */
export async function loadMcpModule<T>(m: string): Promise<T> {
  try {
    return await esmImport<T>(m);
  } catch (e) {
    if ((e as { code?: string }).code === 'ERR_MODULE_NOT_FOUND' && String((e as Error).message).includes('@modelcontextprotocol/sdk'))
      throw new Error('MCP tools need the package @modelcontextprotocol/sdk: npm install @modelcontextprotocol/sdk');
    throw e;
  }
}

/** A running server in this process: its client, its tools, what it last wrote on stderr. */
interface Connection {
  client: Client;
  transport: Transport & { pid?: number | null };
  tools: Map<string, { info: McpToolInfo; input: z.ZodType | undefined }>;
  stderr: string[];
  /** Closed by us (close, its episode's end, the bound on episode servers): a call it cuts short is no failure of the server. */
  closing?: boolean;
}

function optionIssues(o: McpServerOptions): FieldIssue[] {
  const issues: FieldIssue[] = [];
  const bad = (path: string, message: string) => issues.push({ path, message });
  if (o === null || typeof o !== 'object') return [{ path: '', message: `must be an object, got ${describe(o)}` }];
  if (typeof o.name !== 'string' || !serverName.test(o.name)) bad('name', `must match ${serverName}, got ${describe(o.name)}`);
  if ((o.command === undefined) === (o.url === undefined)) bad('command', 'give either command (a stdio server) or url (a streamable-HTTP server)');
  if (o.command !== undefined && (typeof o.command !== 'string' || o.command === '')) bad('command', `must be a non-empty string, got ${describe(o.command)}`);
  if (o.args !== undefined && !(Array.isArray(o.args) && o.args.every((a) => typeof a === 'string')))
    bad('args', `must be an array of strings, got ${describe(o.args)}`);
  if (o.url !== undefined) {
    // no URL here: teams are also loaded in the workflow sandbox
    if (typeof o.url !== 'string' || !/^[a-z][a-z0-9+.-]*:\/\/\S+$/i.test(o.url)) bad('url', `must be a URL, got ${describe(o.url)}`);
    else if (!/^https?:/i.test(o.url)) bad('url', `must be http: or https:, got ${JSON.stringify(o.url)}`);
    if (o.command === undefined)
      for (const k of ['args', 'env', 'cwd'] as const) if (o[k] !== undefined) bad(k, 'is for a stdio server (command); this one has a url');
  }
  if (o.scope !== undefined && o.scope !== 'worker' && o.scope !== 'episode')
    bad('scope', `must be 'worker' (one server per process that runs tools) or 'episode' (one server per episode), got ${describe(o.scope)}`);
  if (o.onError !== undefined && o.onError !== 'tool-error' && o.onError !== 'fail-run')
    bad('onError', `must be 'tool-error' (the agent reads a tool error) or 'fail-run' (the run fails), got ${describe(o.onError)}`);
  if (o.timeoutMs !== undefined && !(typeof o.timeoutMs === 'number' && o.timeoutMs > 0 && Number.isFinite(o.timeoutMs)))
    bad('timeoutMs', `must be a number > 0, got ${describe(o.timeoutMs)}`);
  return issues;
}

/** A declared tool: its Troupe name, its MCP name, and what the team says of it. */
interface Declared {
  name: string;
  mcpName: string;
  description?: string;
  inputSchema?: Readonly<Record<string, unknown>>;
}

/** The declared tools, with issues at `tools...`. */
function declaredTools(tools: McpServerOptions['tools'], issues: FieldIssue[]): Declared[] {
  const out: Declared[] = [];
  if (Array.isArray(tools)) {
    tools.forEach((t: unknown, i) => {
      if (typeof t !== 'string' || t === '') issues.push({ path: `tools[${i}]`, message: `must be a tool name, got ${describe(t)}` });
      else if (!toolName.test(t))
        issues.push({
          path: `tools[${i}]`,
          message: `${JSON.stringify(t)} is not a Troupe tool name (${toolName}): name it, tools: { my_name: ${JSON.stringify(t)} }`,
        });
      else out.push({ name: t, mcpName: t });
    });
  } else if (tools !== null && typeof tools === 'object') {
    for (const [name, v] of Object.entries(tools as Record<string, unknown>)) {
      const at = `tools.${name}`;
      if (!toolName.test(name)) issues.push({ path: at, message: `must match ${toolName}` });
      const spec = typeof v === 'string' ? { tool: v } : (v as { tool?: unknown; description?: unknown; inputSchema?: unknown } | null);
      if (typeof spec?.tool !== 'string' || spec.tool === '')
        issues.push({ path: at, message: `must be the MCP tool's name or { tool, description, inputSchema }, got ${describe(v)}` });
      else if (spec.description !== undefined && typeof spec.description !== 'string')
        issues.push({ path: `${at}.description`, message: `must be a string, got ${describe(spec.description)}` });
      else if (spec.inputSchema !== undefined && !isJsonSchemaObject(spec.inputSchema))
        issues.push({ path: `${at}.inputSchema`, message: `must be a JSON Schema of an object ({ type: 'object', ... }), got ${describe(spec.inputSchema)}` });
      else
        out.push({
          name,
          mcpName: spec.tool,
          ...(spec.description !== undefined ? { description: spec.description as string } : {}),
          ...(spec.inputSchema !== undefined ? { inputSchema: spec.inputSchema as Record<string, unknown> } : {}),
        });
    }
  } else issues.push({ path: 'tools', message: `must list the server's tools the agents get, got ${describe(tools)}` });
  if (out.length === 0 && !issues.some((i) => i.path.startsWith('tools'))) issues.push({ path: 'tools', message: 'must name at least one tool' });
  return out;
}

/** An object with `type: 'object'` (what MCP requires of a tool's inputSchema) that JSON can write. */
function isJsonSchemaObject(v: unknown): boolean {
  if (v === null || typeof v !== 'object' || Array.isArray(v) || (v as { type?: unknown }).type !== 'object') return false;
  try {
    JSON.stringify(v);
    return true;
  } catch {
    return false;
  }
}

/**
 * Scope 'episode': the most servers one mcpServer keeps live in one process (thread), a backstop.
 * Episodes end by the runtime's hook (episodeEnded): a batched episode on the thread that ran it,
 * a durable one when its control worker scores it. A durable episode whose scoring runs on
 * another control worker, or one that never finishes (its run failed or was stopped), ends on no
 * thread, and its server would wait for nothing until the thread ends: past this many, the least
 * recently used server is closed when a new episode's starts. Least recently used, because a
 * live episode calls its tools every few turns and an abandoned one never again; an episode
 * whose server was closed so starts a fresh one on its next call, as after a crash. A bound, not
 * a timer: a durable episode may wait minutes between calls (its turns queued), and a timer
 * would close a live episode's server, when a bound does so only past this many episodes.
 */
export const MAX_EPISODE_SERVERS = 64;

/** A server of this process: the one being started, and the one running. */
interface Slot {
  connecting?: Promise<Connection>;
  live?: Connection;
}

/** Starts a server and lists its tools; an error names it, with the end of its stderr. */
async function startServer(opts: McpServerOptions, timeoutMs: number, label: string): Promise<Connection> {
  const { Client } = await loadMcpModule<typeof import('@modelcontextprotocol/sdk/client/index.js')>('@modelcontextprotocol/sdk/client/index.js');
  const stderr: string[] = [];
  let transport: Connection['transport'];
  if (opts.command !== undefined) {
    const { StdioClientTransport, getDefaultEnvironment } = await loadMcpModule<typeof import('@modelcontextprotocol/sdk/client/stdio.js')>(
      '@modelcontextprotocol/sdk/client/stdio.js',
    );
    const stdio = new StdioClientTransport({
      command: opts.command,
      args: [...(opts.args ?? [])],
      env: { ...getDefaultEnvironment(), ...opts.env },
      ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
      stderr: 'pipe',
    });
    // the server's last lines on stderr, for the error when it dies
    stdio.stderr?.on('data', (d: Buffer) => {
      stderr.push(d.toString());
      if (stderr.length > 20) stderr.shift();
    });
    transport = stdio;
  } else {
    const { StreamableHTTPClientTransport } = await loadMcpModule<typeof import('@modelcontextprotocol/sdk/client/streamableHttp.js')>(
      '@modelcontextprotocol/sdk/client/streamableHttp.js',
    );
    transport = new StreamableHTTPClientTransport(new URL(opts.url ?? ''));
  }
  const client = new Client({ name: 'troupe', version: '0.1.0' });
  const conn: Connection = { client, transport, tools: new Map(), stderr };
  try {
    await client.connect(transport, { timeout: timeoutMs });
    const listed = await client.listTools(undefined, { timeout: timeoutMs });
    for (const t of listed.tools) {
      let input: z.ZodType | undefined;
      try {
        input = z.fromJSONSchema(t.inputSchema as Parameters<typeof z.fromJSONSchema>[0]);
      } catch {
        input = undefined; // a schema zod cannot read: the server checks the input itself
      }
      conn.tools.set(t.name, {
        info: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), inputSchema: t.inputSchema },
        input,
      });
    }
  } catch (e) {
    await client.close().catch(() => undefined);
    throw new Error(`MCP server ${opts.name} (${label}) did not start: ${(e as Error).message}${stderrTail(stderr)}`);
  }
  return conn;
}

/** Ends a slot's server (one being started, once it has). */
async function closeSlot(slot: Slot): Promise<void> {
  const c = slot.connecting;
  slot.live = slot.connecting = undefined;
  const conn = await c?.catch(() => undefined);
  if (!conn) return;
  conn.closing = true;
  await conn.client.close().catch(() => undefined);
}

/** Why the run fails (onError 'fail-run'): the server, the tool and what went wrong. */
function runMessage(server: string, name: string, mcpName: string, what: string): string {
  return `MCP server ${server}, tool ${name}${mcpName === name ? '' : ` (${mcpName} on the server)`}: ${what} (onError: 'fail-run')`;
}

/** Ends a server at once (SIGKILL for a stdio one) and its client. */
async function kill(conn: Connection): Promise<void> {
  const pid = conn.transport.pid;
  if (typeof pid === 'number') {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await conn.client.close().catch(() => undefined);
}

export function mcpServer(opts: McpServerOptions): McpServer {
  const issues = optionIssues(opts);
  const declared = issues.some((i) => i.path === '') ? [] : declaredTools(opts.tools, issues);
  const at = typeof opts?.name === 'string' && serverName.test(opts.name) ? `mcpServer(${opts.name})` : 'mcpServer';
  if (issues.length > 0) throw new FieldError(issues.map((i) => ({ path: i.path ? `${at}.${i.path}` : at, message: i.message })));
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const label = opts.url ?? [opts.command, ...(opts.args ?? [])].join(' ');
  const perEpisode = opts.scope === 'episode';
  const failRun = opts.onError === 'fail-run';

  /** Scope 'worker': this process's server. */
  const shared: Slot = {};
  /** Scope 'episode': each episode's server in this process, least recently used first. */
  const episodes = new Map<string, Slot>();
  let hooked = false;

  /** The slot of the episode's server (scope 'episode'), made on its first call; else the process's. */
  function slotOf(episodeId: string): Slot {
    if (!perEpisode) return shared;
    let slot = episodes.get(episodeId);
    if (slot)
      episodes.delete(episodeId); // set again below: most recently used last
    else {
      slot = {};
      if (!hooked) {
        hooked = true;
        onEpisodeEnd(endEpisode);
      }
      for (const [id, old] of episodes) {
        if (episodes.size < MAX_EPISODE_SERVERS) break;
        episodes.delete(id);
        void closeSlot(old);
      }
    }
    episodes.set(episodeId, slot);
    return slot;
  }

  async function endEpisode(episodeId: string): Promise<void> {
    const slot = episodes.get(episodeId);
    if (!slot) return;
    episodes.delete(episodeId);
    await closeSlot(slot);
  }

  async function start(slot: Slot): Promise<Connection> {
    const conn = await startServer(opts, timeoutMs, label);
    const { client, transport } = conn;
    slot.live = conn;
    const pid = transport.pid;
    await report(pid, true);
    client.onclose = () => {
      void report(pid, false);
      if (slot.live !== conn) return;
      slot.live = slot.connecting = undefined; // it died: the next call starts another
    };
    return conn;
  }

  const connection = (slot: Slot): Promise<Connection> => {
    const c = (slot.connecting ??= start(slot));
    c.catch(() => {
      if (slot.connecting === c) slot.connecting = undefined;
    });
    return c;
  };

  /** Ends a server that hung or broke the protocol; the next call starts another. */
  async function discard(slot: Slot, conn: Connection): Promise<void> {
    if (slot.live === conn) slot.live = slot.connecting = undefined;
    await kill(conn);
  }

  /** A failure of the server itself: a tool error, or with onError 'fail-run' the run's failure. */
  const serverFailure = (name: string, mcpName: string, error: string, what: string): Error =>
    failRun ? new ToolFailsRun(error, runMessage(opts.name, name, mcpName, what)) : new Error(error);

  const tools = declared.map(({ name, mcpName, description, inputSchema }) =>
    withRuntimeHints(
      {
        // what a chat template shows the agent; calls are checked against the server's schema (execute)
        parameters: inputSchema ?? ANY_OBJECT,
        ...defineTool<Record<string, unknown>, McpToolOutput>({
          name,
          description: description ?? `${mcpName} (MCP server ${opts.name})`,
          input: z.record(z.string(), z.unknown()),
          output,
          timeoutMs,
          render,
          async execute(args, ctx) {
            const slot = slotOf(ctx.episodeId);
            let conn: Connection;
            try {
              conn = await connection(slot);
            } catch (e) {
              const message = (e as Error).message;
              throw serverFailure(name, mcpName, message, message.replace(`MCP server ${opts.name} `, 'the server '));
            }
            const tool = conn.tools.get(mcpName);
            if (!tool)
              throw new Error(`MCP server ${opts.name} has no tool ${JSON.stringify(mcpName)} (it has: ${[...conn.tools.keys()].join(', ') || 'none'})`);
            const checked = tool.input?.safeParse(args);
            if (checked && !checked.success) throw new Error(`invalid input: ${zodMessage(checked.error, 'input')}`);
            let result;
            try {
              result = await conn.client.callTool({ name: mcpName, arguments: args }, undefined, { signal: ctx.signal, timeout: timeoutMs });
            } catch (e) {
              const error = `MCP server ${opts.name}: ${(e as Error).message}${stderrTail(conn.stderr)}`;
              // the server is fine (the agent's problem), or we closed it (the episode ended, close())
              if (serverAnswered(e) || conn.closing) throw new Error(error);
              // a call that timed out or broke the protocol leaves a server not to trust: restart it
              await discard(slot, conn);
              // a call stopped at its time limit: executeTool answers it (timeoutFailsRun below)
              if (ctx.signal.aborted) throw new Error(error);
              throw serverFailure(name, mcpName, error, `${serverProblem(e, timeoutMs)}${stderrTail(conn.stderr)}`);
            }
            const content = (result.content ?? []) as McpContent[];
            if (result.isError) throw new Error(content.map(contentText).join('\n') || 'the tool failed');
            return { content, ...(result.structuredContent ? { structuredContent: result.structuredContent as Record<string, unknown> } : {}) };
          },
        }),
      },
      {
        perEpisode,
        mcpResult: true,
        ...(failRun ? { timeoutFailsRun: (ms: number) => runMessage(opts.name, name, mcpName, `no answer within ${ms} ms (timeoutMs)`) } : {}),
      },
    ),
  );

  return registered({
    name: opts.name,
    tools,
    declared: declared.map(({ name, mcpName }) => ({ name, mcpName })),
    failsRun: failRun,
    list: async () => {
      if (!perEpisode) return [...(await connection(shared)).tools.values()].map((t) => t.info);
      // scope 'episode': a server of no episode, for the listing only
      const slot: Slot = {};
      try {
        return [...(await connection(slot)).tools.values()].map((t) => t.info);
      } finally {
        await closeSlot(slot);
      }
    },
    close: async () => {
      const slots = [shared, ...episodes.values()];
      episodes.clear();
      await Promise.all(slots.map(closeSlot));
    },
  });
}

/** The server each MCP tool calls (mcpServersOf). */
const SERVER_OF = new WeakMap<object, McpServer>();
const registered = (server: McpServer): McpServer => {
  for (const t of server.tools) SERVER_OF.set(t, server);
  return server;
};

/** The MCP servers behind `tools` (each once), in the order their first tool comes. */
export function mcpServersOf(tools: Iterable<object>): McpServer[] {
  const out = new Set<McpServer>();
  for (const t of tools) {
    const s = SERVER_OF.get(t);
    if (s) out.add(s);
  }
  return [...out];
}

/** What went wrong with a server whose call failed without its answering (serverAnswered is false). */
function serverProblem(e: unknown, timeoutMs: number): string {
  const code = (e as { code?: unknown })?.code;
  const message = (e as Error)?.message ?? String(e);
  if (code === -32000) return `the server exited mid-call (${message})`;
  if (code === -32001) return `no answer within ${timeoutMs} ms (timeoutMs)`;
  return `the server answered out of the protocol's schema (${message}); the server was killed`;
}

/**
 * An error the server answered (a JSON-RPC error: unknown tool, invalid params), after which it
 * is still fine to use; not the SDK's own -32000 (connection closed) and -32001 (request timed out),
 * nor a reply that failed the protocol's schema.
 */
function serverAnswered(e: unknown): boolean {
  const code = (e as { code?: unknown })?.code;
  return typeof code === 'number' && code !== -32000 && code !== -32001;
}

const stderrTail = (lines: string[]): string => {
  const text = lines.join('').trim();
  return text ? ` (server stderr: ${text.slice(-500)})` : '';
};
