/**
 * Workers start before their dependencies and ride out faults during their own start-up
 * (issue 18 item 1): each comes up by itself, with a log line saying what it waits for.
 *
 * - pool worker: its engine is SIGKILLed twice while starting, and Temporal (behind a closed
 *   TCP gate) refuses connections until the gate opens;
 * - control worker: PostgreSQL and Temporal both refuse connections at first.
 *
 * Before the fix both workers exited 1 on the first of these faults.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { pollerIdentities } from '../../../infra/temporal-connection';
import { childProcesses } from '../../../testing/chaos/stack';
import { createTestDatabase, startTemporal, uniqueTaskQueue, type TestDatabase } from '../../helpers';
import { hostPort, tcpGate } from '../../helpers/tcp-gate';

const repo = path.join(__dirname, '..', '..', '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let env: TestWorkflowEnvironment;
let db: TestDatabase;
const started: ChildProcess[] = [];

before(async () => {
  env = await startTemporal();
  db = await createTestDatabase();
});
after(async () => {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await db?.drop();
  await env?.teardown();
});

function startWorker(entry: string, args: string[], extraEnv: Record<string, string>): { child: ChildProcess; log: () => string } {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(repo, entry), ...args], {
    cwd: repo,
    env: { ...process.env, ...extraEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  let text = '';
  child.stdout!.on('data', (d: Buffer) => void (text += d.toString()));
  child.stderr!.on('data', (d: Buffer) => void (text += d.toString()));
  return { child, log: () => text };
}

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs: number, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    assert.equal(child.exitCode, null, `the worker exited (code ${child.exitCode}) while waiting for ${what}:\n${log().slice(-2000)}`);
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}:\n${log().slice(-2000)}`);
    await sleep(50);
  }
}

const polls = async (queue: string, kind: 'workflow' | 'activity', pid: number) =>
  (await pollerIdentities(env.connection, 'default', queue, kind).catch(() => [])).some((id) => id.startsWith(`${pid}@`));

it('a pool worker comes up by itself after its engine dies twice during start-up and Temporal refuses connections', { timeout: 240_000 }, async () => {
  const gate = await tcpGate(hostPort(env.address));
  const queue = uniqueTaskQueue('gpu');
  const { child, log } = startWorker('processes/pool-worker.ts', ['--task-queue', queue, '--temporal-address', gate.address, '--device', 'cpu'], {
    DATABASE_URL: db.url,
  });
  try {
    // SIGKILL each of the first two engines as soon as it exists: long before it listens.
    const killed: number[] = [];
    while (killed.length < 2) {
      await until(
        'an engine child',
        () => childProcesses(child.pid!).some((c) => c.argv.some((a) => a.endsWith('onnx-engine.ts')) && !killed.includes(c.pid)),
        60_000,
        child,
        log,
      );
      const engine = childProcesses(child.pid!).find((c) => c.argv.some((a) => a.endsWith('onnx-engine.ts')) && !killed.includes(c.pid))!;
      process.kill(engine.pid, 'SIGKILL');
      killed.push(engine.pid);
    }
    await until('the engine to start', () => /"event":"engine_started"/.test(log()), 90_000, child, log);
    assert.equal((log().match(/"event":"engine_waiting"/g) ?? []).length >= 2, true, 'one waiting line per failed engine start');
    // Temporal is unreachable: the worker says so and stays alive.
    await until('a line saying it waits for Temporal', () => /waiting for Temporal at 127\.0\.0\.1:\d+.*attempt 2/.test(log()), 30_000, child, log);
    assert.equal(await polls(queue, 'activity', child.pid!), false);
    await gate.open();
    await until('the pool worker to poll its queue', () => polls(queue, 'activity', child.pid!), 60_000, child, log);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
    await gate.close();
  }
});

it(
  'a pool worker whose engine cannot start by its own fault (an unusable device) exits with the engine message instead of waiting',
  { timeout: 120_000 },
  async () => {
    const { child, log } = startWorker(
      'processes/pool-worker.ts',
      ['--task-queue', uniqueTaskQueue('gpu'), '--temporal-address', env.address, '--device', 'cuda:9'],
      { DATABASE_URL: db.url },
    );
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    assert.equal(code, 1, log());
    assert.match(log(), /pool-worker: engine exited before listening \(code 1, signal null\): .*cuda/s);
  },
);

it('a control worker comes up by itself once PostgreSQL and then Temporal accept connections', { timeout: 240_000 }, async () => {
  const pgGate = await tcpGate(hostPort(db.url));
  const temporalGate = await tcpGate(hostPort(env.address));
  const dbUrl = new URL(db.url);
  dbUrl.hostname = '127.0.0.1';
  dbUrl.port = String(pgGate.port);
  const queue = uniqueTaskQueue('troupe');
  const { child, log } = startWorker('processes/control-worker.ts', ['--temporal-address', temporalGate.address, '--task-queue', queue], {
    DATABASE_URL: dbUrl.toString(),
  });
  try {
    await until('a line saying it waits for PostgreSQL', () => /waiting for PostgreSQL: .*attempt 2/.test(log()), 60_000, child, log);
    await pgGate.open();
    await until('a line saying it waits for Temporal', () => /waiting for Temporal at 127\.0\.0\.1:\d+.*attempt 2/.test(log()), 60_000, child, log);
    assert.equal(await polls(queue, 'workflow', child.pid!), false);
    await temporalGate.open();
    await until('the control worker to poll its queue', () => polls(queue, 'workflow', child.pid!), 180_000, child, log);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
    await pgGate.close();
    await temporalGate.close();
  }
});
