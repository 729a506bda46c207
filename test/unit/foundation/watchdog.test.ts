import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';
import { eventLoopLag } from '../../../stack/watchdog';

const repoRoot = path.resolve(__dirname, '../../..');

/** A node process with the watchdog (a blocked loop: 1.5 s, or RSS: 400 MiB) that then runs `body`; its exit and stderr. */
function child(
  body: string,
  watching: 'loop' | 'memory' = 'loop',
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; ms: number }> {
  const watch =
    watching === 'loop' ? `{ what: 'test worker', blockedLoopMs: 1500 }` : `{ what: 'test worker', rssLimitBytes: 400 * 2 ** 20, rssHint: 'use less' }`;
  const script = `const { watchProcess } = require('./stack/watchdog'); watchProcess(${watch}); ${body}`;
  const t0 = Date.now();
  const p = spawn(process.execPath, ['--import', 'tsx', '-e', script], { cwd: repoRoot, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const killer = setTimeout(() => p.kill('SIGTERM'), 30_000); // not the watchdog's signal
  return new Promise((resolve) =>
    p.on('exit', (code, signal) => {
      clearTimeout(killer);
      resolve({ code, signal, stderr, ms: Date.now() - t0 });
    }),
  );
}

test('a process whose event loop is blocked by a synchronous loop is killed by its watchdog, saying why', async () => {
  const r = await child('setTimeout(() => { while (true) {} }, 200);');
  assert.equal(r.signal, 'SIGKILL', r.stderr);
  const line = lineOf(r.stderr, 'event-loop-blocked');
  assert.equal(line.limitMs, 1500);
  assert.ok((line.blockedMs as number) > 1500);
  assert.match(line.message as string, /^test worker: the event loop has been blocked for \d+ s \(a synchronous loop/);
});

test('a process that is busy but yields (work in slices longer than a tick, shorter than the limit) is left alone', async () => {
  // 4 s of work in 600 ms slices: the loop runs late every time, but never for the limit.
  const r = await child(
    'let n = 0; const slice = () => { const end = Date.now() + 600; while (Date.now() < end) {} if (++n < 7) setTimeout(slice, 0); else process.exit(0); }; slice();',
  );
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.code, 0, r.stderr);
  assert.doesNotMatch(r.stderr, /event-loop-blocked/);
});

const lineOf = (stderr: string, event: string) =>
  JSON.parse(stderr.split('\n').find((l) => l.includes(`"event":"${event}"`)) ?? 'null') as Record<string, unknown>;

for (const [how, body] of [
  [
    'while the main thread allocates synchronously (as a native ONNX Runtime run does)', // ~4 GiB/s at most (a 4 MiB page-touching fill, then ~1 ms of arithmetic): bounded growth between looks even on a loaded host
    'const held = []; let x = 0; for (;;) { held.push(Buffer.alloc(4 * 2 ** 20, 1)); for (let i = 0; i < 1e6; i++) x += i; }',
  ],
  ['while the process allocates a little at a time', 'const held = []; setInterval(() => held.push(Buffer.alloc(16 * 2 ** 20, 1)), 20);'],
] as const) {
  test(`a process whose memory passes the limit ${how} is killed before it takes the host, saying why`, async () => {
    const r = await child(body, 'memory');
    assert.equal(r.signal, 'SIGKILL', r.stderr);
    const line = lineOf(r.stderr, 'memory-exceeded');
    assert.equal(line.limitBytes, 400 * 2 ** 20);
    // Looked at every 100 ms: killed soon after the limit, not gigabytes later.
    assert.ok((line.rssBytes as number) > 400 * 2 ** 20 && (line.rssBytes as number) < 2 * 2 ** 30, JSON.stringify(line));
    assert.match(
      line.message as string,
      /^test worker: resident memory \d+ MiB is over the limit of 400 MiB; exiting before the host runs out of memory \(use less\)$/,
    );
  });
}

test('eventLoopLag reports how late the loop ran', async () => {
  const lag = eventLoopLag(60_000);
  await new Promise((r) => setTimeout(r, 50));
  const end = Date.now() + 300;
  while (Date.now() < end);
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(lag().eventLoopLagMs >= 250, JSON.stringify(lag()));
});
