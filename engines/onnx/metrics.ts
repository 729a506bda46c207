/**
 * The engine's own Prometheus endpoint (`--metrics-port`): `GET /metrics` in the text exposition
 * format, from the counters behind Health and Stats, so an engine on another host (a GPU box no
 * pool worker watches) can be scraped itself. The PyTorch engine serves the same names
 * (engines/pytorch/metrics.py):
 *
 *   troupe_engine_requests_total{rpc,code}   RPCs answered, by gRPC status name (OK, INVALID_ARGUMENT, ...)
 *   troupe_engine_tokens_generated_total     Stats.tokens_generated
 *   troupe_engine_tokens_trained_total       trainable tokens of committed updates
 *   troupe_engine_generate_batches_total     Stats.generate_batches
 *   troupe_engine_score_runs_total           Stats.score_runs
 *   troupe_engine_update_runs_total          Stats.update_runs
 *   troupe_engine_device_runs_total          Health.device_runs
 *   troupe_engine_queue_depth                Health.queue_depth (the pool worker reports the same gauge for its engine)
 *   troupe_engine_model_versions{model}      versions cached per model (Stats.models)
 *   troupe_engine_model_latest_version{model} newest version per model (Stats.models)
 *   troupe_engine_resident_memory_bytes      the process's resident memory
 *   troupe_engine_uptime_seconds             Health.uptime_s
 */
import * as http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import type { Engine } from './engine';

/** RPCs answered, by RPC and gRPC status code. */
export class RequestCounts {
  private readonly counts = new Map<string, number>();

  count(rpc: string, code: grpc.status): void {
    const key = `${rpc}\u0000${grpc.status[code] ?? String(code)}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }

  entries(): { rpc: string; code: string; n: number }[] {
    return [...this.counts].map(([k, n]) => {
      const [rpc, code] = k.split('\u0000') as [string, string];
      return { rpc, code, n };
    });
  }
}

type Sample = { labels?: Record<string, string>; value: number };

const label = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');

function family(name: string, type: 'counter' | 'gauge', help: string, samples: Sample[]): string {
  const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`];
  for (const s of samples) {
    const ls = Object.entries(s.labels ?? {}).map(([k, v]) => `${k}="${label(v)}"`);
    lines.push(`${name}${ls.length ? `{${ls.join(',')}}` : ''} ${s.value}`);
  }
  return lines.join('\n');
}

/** The exposition text of `engine` now. */
export async function engineMetricsText(engine: Engine, requests: RequestCounts): Promise<string> {
  const health = engine.health();
  const stats = await engine.stats();
  const c = engine.counts();
  const one = (value: number): Sample[] => [{ value }];
  return `${[
    family(
      'troupe_engine_requests_total',
      'counter',
      'RPCs answered, by RPC and gRPC status',
      requests.entries().map((e) => ({ labels: { rpc: e.rpc, code: e.code }, value: e.n })),
    ),
    family('troupe_engine_tokens_generated_total', 'counter', 'Tokens generated', one(stats.tokensGenerated)),
    family('troupe_engine_tokens_trained_total', 'counter', 'Trainable tokens of committed updates', one(c.tokensTrained)),
    family('troupe_engine_generate_batches_total', 'counter', 'Fused generate runs', one(stats.generateBatches)),
    family('troupe_engine_score_runs_total', 'counter', 'Score runs', one(stats.scoreRuns)),
    family('troupe_engine_update_runs_total', 'counter', 'Update runs (committed or not)', one(stats.updateRuns)),
    family('troupe_engine_device_runs_total', 'counter', 'Device runs finished (progress, as Health reports it)', one(health.deviceRuns)),
    family('troupe_engine_queue_depth', 'gauge', 'Requests waiting or running in the engine', one(health.queueDepth)),
    family(
      'troupe_engine_model_versions',
      'gauge',
      'Versions cached per model',
      stats.models.map((m) => ({ labels: { model: m.modelKey }, value: m.versions.length })),
    ),
    family(
      'troupe_engine_model_latest_version',
      'gauge',
      'Newest version per model',
      stats.models.map((m) => ({ labels: { model: m.modelKey }, value: m.latestVersion })),
    ),
    family('troupe_engine_resident_memory_bytes', 'gauge', "The engine process's resident memory", one(process.memoryUsage.rss())),
    family('troupe_engine_uptime_seconds', 'gauge', 'Seconds since the engine started', one(health.uptimeS)),
  ].join('\n')}\n`;
}

/** Serves `GET /metrics` on host:port; resolves once listening (rejects naming the flag when it cannot bind). */
export function serveEngineMetrics(engine: Engine, requests: RequestCounts, host: string, port: number): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: GET /metrics\n');
      return;
    }
    engineMetricsText(engine, requests).then(
      (text) => res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(text),
      (e: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${e.message}\n`),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(new Error(`--metrics-port ${port}: cannot listen on ${host}:${port}${e.code === 'EADDRINUSE' ? ' (already in use)' : ''}: ${e.message}`)),
    );
    server.listen(port, host, () => {
      server.unref();
      resolve(server);
    });
  });
}
