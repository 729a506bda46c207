/**
 * The gateway's HTTP server (node:http, or node:https with a certificate): OpenAI Chat
 * Completions, Responses and Models for the sessions of the episodes running in this
 * thread. One server per episode thread, on loopback unless configured (listen.ts:
 * another address needs TLS), on an ephemeral port; each episode registers a session per agent
 * (`/s/<session>/v1`, and its team tools as an MCP server at `/s/<session>/mcp`) under a
 * per-episode random key, so a request reaches only its own episode's agent. Requests of one episode are taken one at a
 * time, in arrival order, so its turns are numbered as they are recorded;
 * different episodes' calls run concurrently and batch on the engine.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import * as http from 'node:http';
import * as https from 'node:https';
import type { AddressInfo } from 'node:net';
import { urlHost } from '../infra/config';
import { troupeMetrics } from '../infra/metrics';
import type { EpisodeTurns, OpenSessions } from '../agents/episode';
import { GatewayError, invalid } from './errors';
import { parseChatRequest, type ChatRequest } from './request';
import { parseResponsesRequest, responseBody, streamResponse } from './responses';
import { EpisodeCalls } from './journal';
import type { GatewayListen } from './listen';
import { reloadTls, type TlsReloader } from './tls-reload';
import { AgentSession, type Completion } from './session';
import { AgentTools } from './team-tools';
import { serveMcp } from './mcp';

/** An API the gateway serves: its request read as a ChatRequest (one turn), its reply written both ways. */
interface Api {
  parse(body: unknown): ChatRequest;
  body(c: Completion, req: ChatRequest): unknown;
  stream(res: http.ServerResponse, c: Completion, req: ChatRequest): void;
}

const APIS: Record<string, Api> = {
  '/chat/completions': {
    parse: parseChatRequest,
    body: (c, req) => completionBody(c, req.logprobs),
    stream: (res, c, req) => stream(res, c, req.logprobs, req.includeUsage),
  },
  '/responses': {
    parse: parseResponsesRequest,
    body: (c, req) => responseBody(c, req.logprobs),
    stream: (res, c, req) => streamResponse(res, c, req.logprobs),
  },
};

interface Registered {
  key: Buffer;
  session: AgentSession;
  tools: AgentTools;
  episode: { queue: Promise<unknown> };
}

/** How often an HTTPS gateway looks for a renewed certificate (a stat of two files). */
const TLS_CHECK_EVERY_MS = 30_000;
/** Bodies above this are refused (a context the engine could hold is far smaller). */
const MAX_BODY = 16 * 1024 * 1024;

/** A finished gateway request: its API (`chat/completions`, `responses`, `models`, `other`) and HTTP status. */
export type GatewayCallHook = (api: string, status: number) => void;

/** Where finished requests are counted: this process's metrics, unless a thread forwards them (episode-threads.ts). */
let countCall: GatewayCallHook = (api, status) => troupeMetrics().gatewayCalls.add(1, { api, status: String(status) });

/** Counts this thread's gateway requests with `hook` from now on. */
export function countGatewayCallsWith(hook: GatewayCallHook): void {
  countCall = hook;
}

/** The API label of a request path: one of a few, so the metric's labels stay bounded. */
function apiOf(path: string | undefined): string {
  const route = /^\/s\/[A-Za-z0-9_-]+\/(?:v1\/(chat\/completions|responses|models)(?:\/|$)|(mcp)$)/.exec((path ?? '').split('?')[0] ?? '');
  return route?.[1] ?? route?.[2] ?? 'other';
}

export class GatewayServer {
  private readonly sessions = new Map<string, Registered>();
  /** Live episodes' keys, to tell another episode's key from a wrong one. */
  private readonly keys = new Set<string>();
  /** Serves a renewed certificate (HTTPS from files); `tls.check()` looks now. */
  tls: TlsReloader | undefined;

  private constructor(
    private readonly server: http.Server | https.Server,
    readonly origin: string,
  ) {}

  /**
   * A server on `listen.host`, an ephemeral port; HTTPS with `listen.tls`, whose files (when
   * known) are looked at every `tlsCheckEveryMs` for a renewed pair.
   */
  static async start(listen: GatewayListen = { host: '127.0.0.1' }, opts: { tlsCheckEveryMs?: number } = {}): Promise<GatewayServer> {
    let self: GatewayServer | undefined;
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => void self!.handle(req, res);
    const server = listen.tls ? https.createServer({ cert: listen.tls.cert, key: listen.tls.key }, handler) : http.createServer(handler);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, listen.host, resolve);
    });
    server.unref(); // a thread or process with no episodes is not kept alive by it
    // never close an idle keep-alive connection: a client reusing it as it closes gets a connection
    // error (the agent's call fails); the client closes idle connections itself
    server.keepAliveTimeout = 0;
    const { port } = server.address() as AddressInfo;
    self = new GatewayServer(server, `${listen.tls ? 'https' : 'http'}://${urlHost(listen.publicHost ?? listen.host)}:${port}`);
    if (listen.tls?.files)
      self.tls = reloadTls(server as https.Server, listen.tls.files, {
        everyMs: opts.tlsCheckEveryMs ?? TLS_CHECK_EVERY_MS,
        warn: (message) => process.stderr.write(`${JSON.stringify({ ts: new Date().toISOString(), event: 'gateway_tls_refused', message })}\n`),
      });
    return self;
  }

  /** Sessions for every agent of an episode; close() ends them (later requests get 404). */
  open(episode: EpisodeTurns): OpenSessions {
    const key = `sk-troupe-${randomBytes(24).toString('base64url')}`;
    const shared = { queue: Promise.resolve() as Promise<unknown> };
    const calls = new EpisodeCalls(episode);
    const ids: string[] = [];
    const sessions: OpenSessions['sessions'] = {};
    for (const role of episode.team.roles) {
      const id = randomBytes(12).toString('base64url');
      ids.push(id);
      this.sessions.set(id, {
        key: Buffer.from(key),
        session: new AgentSession(episode, role, calls),
        tools: new AgentTools(episode, role, calls),
        episode: shared,
      });
      sessions[role] = { baseURL: `${this.origin}/s/${id}/v1`, apiKey: key, mcpURL: `${this.origin}/s/${id}/mcp` };
    }
    this.keys.add(key);
    return {
      sessions,
      close: () => {
        for (const id of ids) this.sessions.delete(id);
        this.keys.delete(key);
      },
    };
  }

  async close(): Promise<void> {
    this.tls?.stop();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    res.once('close', () => countCall(apiOf(req.url), res.statusCode));
    try {
      const url = new URL(req.url ?? '/', this.origin);
      const m = /^\/s\/([A-Za-z0-9_-]+)\/(?:v1(\/.*)|mcp)$/.exec(url.pathname);
      if (!m) throw new GatewayError(404, `no route ${url.pathname}: use an agent's baseURL or mcpURL (agents.<role>.openai)`, null, 'unknown_route');
      const registered = this.authorize(m[1]!, req.headers.authorization);
      const route = m[2];
      if (route === undefined) {
        // the agent's team tools as an MCP server (streamable HTTP, stateless: POST only)
        if (req.method !== 'POST')
          throw new GatewayError(405, `${req.method} /mcp: use POST (the MCP server is stateless: no stream, no session)`, null, 'method_not_allowed');
        return await serveMcp(req, res, await readJson(req), registered.tools, (call) => this.serialize(registered, call));
      }
      if (route === '/models' || route.startsWith('/models/')) {
        if (req.method !== 'GET') throw new GatewayError(405, `${req.method} ${route}: use GET`, null, 'method_not_allowed');
        const model = { id: registered.session.model, object: 'model', created: 0, owned_by: 'troupe' };
        if (route === '/models') return json(res, 200, { object: 'list', data: [model] });
        const id = decodeURIComponent(route.slice('/models/'.length));
        if (id !== model.id) throw new GatewayError(404, `this session serves model ${JSON.stringify(model.id)}`, 'model', 'model_not_found');
        return json(res, 200, model);
      }
      const api = APIS[route];
      if (!api) throw new GatewayError(404, `no route ${route} (the gateway serves /chat/completions, /responses and /models)`, null, 'unknown_route');
      if (req.method !== 'POST') throw new GatewayError(405, `${req.method} ${route}: use POST`, null, 'method_not_allowed');
      const request = api.parse(await readJson(req));
      const done = await this.serialize(registered, () => registered.session.complete(request));
      if (request.stream) api.stream(res, done, request);
      else json(res, 200, api.body(done, request));
    } catch (e) {
      const err =
        e instanceof GatewayError
          ? e
          : new GatewayError(500, `the episode's runtime failed: ${(e as Error)?.message ?? String(e)}`, null, 'server_error', 'server_error');
      if (!res.headersSent) json(res, err.status, err.body());
      else res.end();
    }
  }

  /** Runs `call` after the episode's calls before it: one call of an episode at a time, so its calls are recorded in the order they are numbered. */
  private serialize<T>(registered: Registered, call: () => Promise<T>): Promise<T> {
    const run = registered.episode.queue.then(call);
    registered.episode.queue = run.catch(() => undefined);
    return run;
  }

  private authorize(id: string, header: string | undefined): Registered {
    const registered = this.sessions.get(id);
    if (!registered) throw new GatewayError(404, 'unknown session (its episode has ended, or the baseURL is not an agent’s)', 'baseURL', 'session_not_found');
    const given = /^Bearer (.+)$/.exec(header ?? '')?.[1];
    if (!given) throw new GatewayError(401, 'missing: send the session’s apiKey as a Bearer token', 'apiKey', 'invalid_api_key');
    const key = Buffer.from(given);
    if (key.length === registered.key.length && timingSafeEqual(key, registered.key)) return registered;
    if (this.keys.has(given))
      throw new GatewayError(403, 'belongs to another episode: a request may only append to its own episode', 'apiKey', 'session_mismatch');
    throw new GatewayError(401, 'is not this session’s key', 'apiKey', 'invalid_api_key');
  }
}

function json(res: http.ServerResponse, status: number, body: unknown) {
  const text = JSON.stringify(body);
  // the OpenAI clients retry 4xx/5xx unless told not to: a retry would be a second turn
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...(status >= 400 ? { 'x-should-retry': 'false' } : {}),
  });
  res.end(text);
}

/** The request's body as JSON; not JSON is refused naming `body`. */
async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const raw = await readBody(req);
  try {
    return JSON.parse(raw) as unknown;
  } catch (e) {
    throw invalid('body', `not valid JSON: ${(e as Error).message}`);
  }
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new GatewayError(413, `over ${MAX_BODY} bytes`, 'body', 'request_too_large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** Unique per turn of an episode (the episode itself is the session's). */
const completionId = (c: Completion) => `chatcmpl-troupe-${c.turn.index}`;

function logprobsOf(c: Completion) {
  return { content: c.tokens.map((t) => ({ token: t.token, logprob: t.logprob, bytes: [...Buffer.from(t.token)], top_logprobs: [] })), refusal: null };
}

function completionBody(c: Completion, logprobs: boolean) {
  return {
    id: completionId(c),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: c.turn.model,
    choices: [{ index: 0, message: { ...c.message, refusal: null }, logprobs: logprobs ? logprobsOf(c) : null, finish_reason: c.finishReason }],
    usage: c.usage,
  };
}

/**
 * Server-sent events, sent once the turn is sampled (the engine generates a turn whole): the
 * role, the content with its log-probs, each tool call, the finish reason, usage if asked, [DONE].
 * The tokens are the non-streamed reply's.
 */
function stream(res: http.ServerResponse, c: Completion, logprobs: boolean, includeUsage: boolean) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  const base = { id: completionId(c), object: 'chat.completion.chunk', created: Math.floor(Date.now() / 1000), model: c.turn.model };
  const send = (choices: unknown[], extra: Record<string, unknown> = {}) => res.write(`data: ${JSON.stringify({ ...base, choices, ...extra })}\n\n`);
  send([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]);
  if (c.message.content !== null) send([{ index: 0, delta: { content: c.message.content }, logprobs: logprobs ? logprobsOf(c) : null, finish_reason: null }]);
  (c.message.tool_calls ?? []).forEach((call, i) =>
    send([{ index: 0, delta: { tool_calls: [{ index: i, id: call.id, type: 'function', function: call.function }] }, logprobs: null, finish_reason: null }]),
  );
  send([{ index: 0, delta: {}, logprobs: null, finish_reason: c.finishReason }]);
  if (includeUsage) send([], { usage: c.usage });
  res.end('data: [DONE]\n\n');
}
