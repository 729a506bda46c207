import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';
import { eventLoopLag } from '../../../infra/event-loop';

const repoRoot = path.resolve(__dirname, '../../..');

/** A node process with the watchdog (limit 1.5 s) that then runs `body`; its exit and stderr. */
function child(body: string): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; ms: number }> {
  const script = `const { watchBlockedLoop } = require('./infra/event-loop'); watchBlockedLoop({ limitMs: 1500, what: 'test worker' }); ${body}`;
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
  const line = JSON.parse(r.stderr.split('\n').find((l) => l.includes('event-loop-blocked'))!) as Record<string, unknown>;
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

test('eventLoopLag reports how late the loop ran', async () => {
  const lag = eventLoopLag(60_000);
  await new Promise((r) => setTimeout(r, 50));
  const end = Date.now() + 300;
  while (Date.now() < end);
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(lag().eventLoopLagMs >= 250, JSON.stringify(lag()));
});
