// A TCP forwarder on a fixed local port that can be opened and closed: to a client behind
// it, the target (Temporal, PostgreSQL) is down while the gate is closed (connections are
// refused, open ones are cut) and back when it opens. The target itself keeps running.
import * as net from 'node:net';
import { freePort } from '../../testing/ports';

export interface TcpGate {
  /** host:port clients use */
  address: string;
  port: number;
  open(): Promise<void>;
  /** refuse new connections and cut the open ones */
  close(): Promise<void>;
}

export async function tcpGate(target: { host: string; port: number }): Promise<TcpGate> {
  const port = await freePort();
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  return {
    address: `127.0.0.1:${port}`,
    port,
    async open() {
      if (server) return;
      const s = net.createServer((client) => {
        const upstream = net.connect(target.port, target.host);
        for (const sock of [client, upstream]) {
          sockets.add(sock);
          sock.on('close', () => sockets.delete(sock));
          sock.on('error', () => {
            client.destroy();
            upstream.destroy();
          });
        }
        client.pipe(upstream);
        upstream.pipe(client);
      });
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(port, '127.0.0.1', () => resolve());
      });
      server = s;
    },
    async close() {
      const s = server;
      server = undefined;
      for (const sock of sockets) sock.destroy();
      sockets.clear();
      if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
}

/** host and port of "host:port" or of a postgres:// URL. */
export function hostPort(addressOrUrl: string): { host: string; port: number } {
  if (addressOrUrl.includes('://')) {
    const u = new URL(addressOrUrl);
    return { host: u.hostname, port: Number(u.port || 5432) };
  }
  const i = addressOrUrl.lastIndexOf(':');
  return { host: addressOrUrl.slice(0, i), port: Number(addressOrUrl.slice(i + 1)) };
}
