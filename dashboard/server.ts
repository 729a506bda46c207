/**
 * The dashboard's HTTP server: the read-only API (dashboard/api.ts), the page
 * (dashboard/web, built by Vite into dashboard/dist by the project's set-up), and
 * run controls that go through the workflow's own signal and update handlers —
 * refused unless the server was given an access token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import type { AddressInfo } from 'node:net';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Sql } from '../infra/db';
import { errorMessage } from '../infra/errors';
import {
  pauseSignal,
  pipelineStatusQuery,
  resumeSignal,
  setOptimizerUpdate,
  statusQuery,
  stopSignal,
  type RolloutProgressView,
} from '../workflows/definitions';
import { progressText } from '../workflows/training-run/details';
import { OPEN_RUN_STATUSES, reconcileRunEnds } from '../activities/store/run-end';
import { ApiError, getEpisode, getRunDetail, getRunMetrics, intParam, listRuns, listStepEpisodes, stageRuns } from './api';

export interface DashboardOptions {
  sql: Sql;
  port: number;
  host?: string;
  /** The Temporal Web UI's base URL and namespace, for links to a run's workflow page. */
  temporalUiUrl?: string;
  namespace?: string;
  /** The Temporal frontend's address, for the `temporal` commands the run page shows. */
  temporalAddress?: string;
  /**
   * Controls need both: the client sends the workflow's signals and updates; the token gates them.
   * With a client, reads first record the end of runs whose workflow closed without recording it (terminated, timed out).
   */
  client?: Client;
  token?: string;
}

export interface Dashboard {
  url: string;
  close(): Promise<void>;
}

/** The built page (stack/install.js ensureDashboardBuild): index.html and Vite's hashed assets. */
export const DIST = path.join(__dirname, 'dist');
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

/** The built file a path names, if any: only index.html and files directly in assets/, so no path leaves DIST. */
function staticFile(pathname: string): { file: string; type: string } | undefined {
  const rel = pathname === '/' ? 'index.html' : pathname.slice(1);
  const type = TYPES[path.extname(rel)];
  if (!type || (rel !== 'index.html' && !/^assets\/[\w.-]+$/.test(rel))) return undefined;
  return { file: path.join(DIST, rel), type };
}

const CONTROLS = ['pause', 'resume', 'stop', 'stop-now', 'setOptimizer'] as const;
type Control = (typeof CONTROLS)[number];
const MAX_BODY = 64 * 1024;

function send(res: http.ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  let size = 0;
  const parts: Uint8Array[] = [];
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY) throw new ApiError(400, `body: larger than ${MAX_BODY} bytes`);
    parts.push(chunk);
  }
  const text = Buffer.concat(parts).toString('utf8');
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(400, 'body: not JSON');
  }
}

/** Compares in constant time, so response timing does not leak the token. */
function sameSecret(a: string, b: string): boolean {
  const x = new Uint8Array(createHash('sha256').update(a).digest());
  const y = new Uint8Array(createHash('sha256').update(b).digest());
  return timingSafeEqual(x, y);
}

/** Sends a control through the workflow's handlers; setOptimizer's validator decides what is accepted. */
async function control(opts: DashboardOptions, req: http.IncomingMessage, runId: string, what: Control) {
  if (!opts.token || !opts.client) throw new ApiError(403, 'controls are disabled: start the dashboard with TROUPE_DASHBOARD_TOKEN set');
  if (!sameSecret(req.headers.authorization ?? '', `Bearer ${opts.token}`))
    throw new ApiError(401, 'controls need the header "Authorization: Bearer <TROUPE_DASHBOARD_TOKEN>"');
  const body = await readJson(req);
  const handle = opts.client.workflow.getHandle(runId);
  try {
    if (what === 'setOptimizer') return { ok: true, ...(await handle.executeUpdate(setOptimizerUpdate, { args: [body as never] })) };
    if (what === 'stop-now') await handle.signal(stopSignal, { now: true });
    else await handle.signal({ pause: pauseSignal, resume: resumeSignal, stop: stopSignal }[what]);
    return { ok: true };
  } catch (e) {
    // The workflow's rejection (e.g. InvalidOptimizerChange naming each field) is the user's error.
    if (e instanceof WorkflowNotFoundError) throw new ApiError(404, `run "${runId}" not found`);
    const cause = (e as { cause?: unknown }).cause;
    throw new ApiError(400, `${what}: ${errorMessage(cause ?? e)}`);
  }
}

/** How long a run page waits for the workflow's status query before showing no live progress. */
const LIVE_QUERY_MS = 2000;

/** An open run's rollout in flight, as its workflow reports it (the status query): the page's live line; null when none or not reachable. */
async function liveProgress(opts: DashboardOptions, runId: string, status: string): Promise<{ text: string; view: RolloutProgressView } | null> {
  if (!opts.client || !(OPEN_RUN_STATUSES as readonly string[]).includes(status)) return null;
  const query = opts.client.workflow.getHandle(runId).query(statusQuery);
  const timeout = new Promise<undefined>((res) => setTimeout(() => res(undefined), LIVE_QUERY_MS).unref());
  const view = await Promise.race([query.catch(() => undefined), timeout]);
  return view?.progress ? { text: progressText(view.progress), view: view.progress } : null;
}

/** When each dashboard last reconciled its open runs: once per RECONCILE_EVERY_MS, however many pages poll. */
const reconciled = new WeakMap<DashboardOptions, Promise<void>>();
const RECONCILE_EVERY_MS = 2000;

/** Runs stored as running or paused whose workflow closed get their real end (activities/store/run-end.ts); Temporal unreachable: the store as it is. */
function reconcileOpenRuns(opts: DashboardOptions): Promise<void> {
  const client = opts.client;
  if (!client) return Promise.resolve();
  let pending = reconciled.get(opts);
  if (!pending) {
    pending = opts.sql`SELECT run_id AS "runId", status FROM runs WHERE status IN ${opts.sql([...OPEN_RUN_STATUSES])}`
      .then((open) => reconcileRunEnds(opts.sql, client, open as never))
      .then(
        () => undefined,
        () => undefined,
      );
    reconciled.set(opts, pending);
    void pending.then(() => setTimeout(() => reconciled.delete(opts), RECONCILE_EVERY_MS).unref());
  }
  return pending;
}

/** GET /api/pipelines/:id — a pipeline's stages (its workflow's status query) with their runs as stored. */
async function pipelineView(opts: DashboardOptions, pipelineId: string) {
  if (!opts.client) throw new ApiError(503, 'this dashboard has no Temporal connection: pipelines are read from their workflows');
  let view;
  try {
    view = await opts.client.workflow.getHandle(pipelineId).query(pipelineStatusQuery);
  } catch (e) {
    if (e instanceof WorkflowNotFoundError) throw new ApiError(404, `pipeline "${pipelineId}" not found`);
    throw e;
  }
  const runs = await stageRuns(
    opts.sql,
    view.stages.map((s) => s.runId),
  );
  return { ...view, runs };
}

async function route(opts: DashboardOptions, req: http.IncomingMessage, url: URL): Promise<unknown> {
  const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  const q = url.searchParams;
  if (req.method === 'POST' && parts[0] === 'api' && parts[1] === 'runs' && parts.length === 4 && (CONTROLS as readonly string[]).includes(parts[3]!)) {
    return control(opts, req, parts[2]!, parts[3] as Control);
  }
  if (req.method !== 'GET') throw new ApiError(405, `${req.method} ${url.pathname}: not allowed`);
  if (parts[1] === 'config' && parts.length === 2) {
    return {
      temporalUiUrl: opts.temporalUiUrl ?? null,
      namespace: opts.namespace ?? 'default',
      temporalAddress: opts.temporalAddress ?? null,
      controls: Boolean(opts.token && opts.client),
      pid: process.pid,
    };
  }
  if (parts[1] === 'runs') {
    await reconcileOpenRuns(opts);
    if (parts.length === 2) return listRuns(opts.sql, q);
    if (parts.length === 3) {
      const detail = await getRunDetail(opts.sql, parts[2]!, q);
      return { ...detail, progress: await liveProgress(opts, detail.run.runId, detail.run.status) };
    }
    if (parts.length === 4 && parts[3] === 'metrics') return getRunMetrics(opts.sql, parts[2]!, q);
    if (parts.length === 6 && parts[3] === 'steps' && parts[5] === 'episodes') {
      const step = intParam(new URLSearchParams({ step: parts[4]! }), 'step', undefined, -1, 1e9)!;
      return listStepEpisodes(opts.sql, parts[2]!, step, q);
    }
  }
  if (parts[1] === 'episodes' && parts.length === 3) return getEpisode(opts.sql, parts[2]!);
  if (parts[1] === 'pipelines' && parts.length === 3) return pipelineView(opts, parts[2] ?? '');
  throw new ApiError(404, `${url.pathname}: no such API path`);
}

export async function startDashboard(opts: DashboardOptions): Promise<Dashboard> {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://dashboard');
    if (url.pathname.startsWith('/api/')) {
      route(opts, req, url).then(
        (body) => send(res, 200, body),
        (e) => (e instanceof ApiError ? send(res, e.status, { error: e.message }) : send(res, 500, { error: errorMessage(e) })),
      );
      return;
    }
    // Pages are client-routed (#/runs/<id>, #/episodes/<id>): everything else is a static file.
    const s = staticFile(url.pathname);
    if (!s || req.method !== 'GET' || !fs.existsSync(s.file)) {
      if (s && !fs.existsSync(path.join(DIST, 'index.html')))
        return send(res, 503, { error: 'the dashboard page is not built: run `npx troupe up` (or `npm test`), which builds it with Vite' });
      return send(res, 404, { error: `${url.pathname}: not found` });
    }
    // Assets are named by their content hash: cacheable for good; index.html is not.
    res.writeHead(200, { 'content-type': s.type, 'cache-control': url.pathname.startsWith('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache' });
    fs.createReadStream(s.file).pipe(res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '127.0.0.1', () => resolve());
  });
  const { port, address } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
