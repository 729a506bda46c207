import * as fs from 'node:fs';
import * as net from 'node:net';

// Ports are picked outside the kernel's ephemeral range, where it hands out ports for outgoing
// connections and for servers that ask for port 0 (Temporal's dev server picks its HTTP, metrics
// and internal service ports so): a port chosen there can be taken before our server binds it.
// The range is read from the kernel, not assumed (Linux's default is 32768-60999).
const FLOOR = 20_000;
const CEILING = 65_535;

function ephemeralRange(): [number, number] {
  try {
    const [lo = NaN, hi = NaN] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (Number.isInteger(lo) && Number.isInteger(hi) && lo <= hi) return [lo, hi];
  } catch {
    /* not Linux: fall back to Linux's default */
  }
  return [32_768, 60_999];
}

/** The candidate ports: [FLOOR, CEILING] less the ephemeral range, or all of it when that leaves too few. */
function candidates(): Array<[number, number]> {
  const [lo, hi] = ephemeralRange();
  const spans: Array<[number, number]> = [];
  if (lo - 1 >= FLOOR) spans.push([FLOOR, lo - 1]);
  if (hi + 1 <= CEILING) spans.push([Math.max(FLOOR, hi + 1), CEILING]);
  return spans.reduce((n, [a, b]) => n + b - a + 1, 0) >= 1000 ? spans : [[FLOOR, CEILING]];
}

const SPANS = candidates();
// Handed out by this process: two stacks' ports must differ even when the first one's
// server has not bound its port yet.
const handedOut = new Set<number>();

/** A random candidate port no higher than `max`. */
function randomPort(max: number): number {
  const spans = SPANS.map(([a, b]): [number, number] => [a, Math.min(b, max)]).filter(([a, b]) => a <= b);
  let i = Math.floor(Math.random() * spans.reduce((n, [a, b]) => n + b - a + 1, 0));
  for (const [a, b] of spans) {
    if (i <= b - a) return a + i;
    i -= b - a + 1;
  }
  throw new Error(`freePort: no candidate port at or below ${max}`);
}

function tryPort(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A TCP port that was free a moment ago on 127.0.0.1, outside the ephemeral range, never handed
 * out before by this process; at most `max` (Temporal stores membership ports as smallint).
 */
export async function freePort(max = CEILING): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = randomPort(max);
    if (handedOut.has(port)) continue;
    if (await tryPort(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`freePort: no free port found outside the ephemeral range after 200 tries`);
}
