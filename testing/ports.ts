import * as net from 'node:net';

// Below Linux's ephemeral range (32768-60999), where the kernel hands out ports for outgoing
// connections and for servers that ask for port 0 (Temporal's dev server picks its HTTP and
// metrics ports so): a port chosen there can be taken before our server binds it.
const LOW = 20_000;
const HIGH = 32_000;

function tryPort(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A TCP port that was free a moment ago on 127.0.0.1, outside the ephemeral range. */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW));
    if (await tryPort(port)) return port;
  }
  throw new Error(`freePort: no free port found in ${LOW}-${HIGH} after 200 tries`);
}
