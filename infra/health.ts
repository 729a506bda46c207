// A worker's readiness endpoint for process managers (a Kubernetes readinessProbe, a
// systemd ExecStartPost check): GET /healthz answers 200 with a JSON line while the worker
// is ready, 503 with the same JSON while it is not (still waiting for Temporal, PostgreSQL
// or its engine; shutting down).
//
//   const server = await serveHealth({ port: 9464 }, () => ({ ready: worker.getState() === 'RUNNING' }));
import * as http from 'node:http';

export interface Readiness {
  ready: boolean;
  [detail: string]: unknown;
}

/** Listens on host:port (default all interfaces, as a probe comes from outside the pod); resolves once listening. */
export function serveHealth(at: { port: number; host?: string }, readiness: () => Readiness): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/healthz') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /healthz\n');
      return;
    }
    const r = readiness();
    res.writeHead(r.ready ? 200 : 503, { 'content-type': 'application/json' }).end(`${JSON.stringify(r)}\n`);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host ?? '0.0.0.0', () => {
      server.unref(); // the worker decides when the process ends
      resolve(server);
    });
  });
}
