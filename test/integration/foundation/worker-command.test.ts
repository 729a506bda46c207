/**
 * `troupe worker pool` as a process manager runs it (cli/bin.js in child processes): two of
 * them on one queue both serve a run's work (their identities are in the Temporal history of
 * its activities), /healthz says 503 while a worker waits for Temporal and 200 once it polls
 * with its engine up, and SIGTERM ends a worker with exit code 0. And `troupe up
 * --pool-workers 2` starts two pool workers that both poll, which `troupe down` stops.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import { createControlWorker } from '../../../processes/control-worker';
import { repoRoot } from '../../../infra/paths';
import { pidAlive, readRecord } from '../../../stack/processes';
import { connectTemporal, pollerIdentities } from '../../../infra/temporal-connection';
import type { trainingRun } from '../../../workflows';
import { createTestDatabase, freePort, startTemporal, uniqueTaskQueue, workflowBundle, type TestDatabase } from '../../helpers';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let env: TestWorkflowEnvironment;
let db: TestDatabase;
const children: ChildProcess[] = [];

before(async () => {
  env = await startTemporal();
  db = await createTestDatabase();
});
after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await db?.drop();
  await env?.teardown();
});

function workerProcess(args: string[], extraEnv: NodeJS.ProcessEnv = {}): ChildProcess & { output: () => string } {
  const child = spawn(process.execPath, [path.join(repoRoot, 'cli', 'bin.js'), 'worker', ...args], {
    env: { ...process.env, TEMPORAL_ADDRESS: env.address, TEMPORAL_NAMESPACE: 'default', DATABASE_URL: db.url, ...extraEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (c) => (out += c));
  child.stderr!.on('data', (c) => (out += c));
  children.push(child);
  return Object.assign(child, { output: () => out });
}

async function healthz(port: number): Promise<{ status: number; body: Record<string, unknown> } | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`);
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  } catch {
    return undefined; // not listening yet
  }
}

async function untilHealth(port: number, status: number, child: ChildProcess & { output: () => string }, timeoutMs = 180_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const h = await healthz(port);
    if (h?.status === status) return h;
    assert.equal(child.exitCode, null, `worker exited: ${child.output()}`);
    assert.ok(Date.now() < deadline, `no ${status} from /healthz in time (last: ${JSON.stringify(h)}): ${child.output().slice(-2000)}`);
    await sleep(300);
  }
}

it('two `troupe worker pool` processes on one queue share a run; /healthz answers 503, then 200; SIGTERM exits 0', async () => {
  // A worker that cannot reach Temporal waits, and is not ready.
  const closedPort = await freePort();
  const waitingPort = await freePort();
  const waiting = workerProcess(['pool', '--device', 'cpu', '--health-port', String(waitingPort)], { TEMPORAL_ADDRESS: `127.0.0.1:${closedPort}` });
  const notReady = await untilHealth(waitingPort, 503, waiting);
  assert.equal(notReady.body.ready, false);
  waiting.kill('SIGKILL');

  const queue = uniqueTaskQueue('pool');
  const ports = [await freePort(), await freePort()];
  const workers = ports.map((p) => workerProcess(['pool', '--queue', queue, '--device', 'cpu', '--health-port', String(p)]));
  for (const [i, p] of ports.entries()) {
    const ready = await untilHealth(p, 200, workers[i]!);
    assert.deepEqual([ready.body.ready, ready.body.taskQueue, ready.body.engine], [true, queue, 'up']);
    assert.ok((ready.body.eventLoopLagMs as number) >= 0 && (ready.body.eventLoopLagMs as number) < 30_000, JSON.stringify(ready.body));
  }

  const taskQueue = uniqueTaskQueue('troupe');
  const control: Worker = await createControlWorker({
    connection: env.nativeConnection,
    namespace: 'default',
    taskQueue,
    sql: db.sql,
    poolTaskQueue: queue,
    workflowBundle: await workflowBundle(),
  });
  const controlRun = control.run();
  try {
    // Durable rollouts: one activity per turn (64 here), so the work is spread across both pollers.
    const summary = await env.client.workflow.execute<typeof trainingRun>('trainingRun', {
      taskQueue,
      workflowId: 'two-pools',
      args: [{ team: 'math', steps: 2, groupsPerStep: 4, groupSize: 4, rollout: 'durable', evalEvery: 0, evalTasks: 2, seed: 2 }],
    });
    assert.equal(summary.status, 'completed');
  } finally {
    control.shutdown();
    await controlRun;
  }
  const identities = new Map<string, number>();
  for await (const wf of env.client.workflow.list()) {
    const history = await env.client.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory();
    for (const e of history.events ?? []) {
      const id = e.activityTaskStartedEventAttributes?.identity;
      if (id) identities.set(id, (identities.get(id) ?? 0) + 1);
    }
  }
  for (const w of workers) {
    const mine = [...identities].filter(([id]) => id.startsWith(`${w.pid}@`));
    assert.ok(mine.length === 1 && mine[0]![1] > 0, `worker pid ${w.pid} started activities (identities: ${JSON.stringify([...identities])})`);
  }

  for (const w of workers) {
    w.kill('SIGTERM');
    const code = await new Promise<number | null>((r) => (w.exitCode !== null ? r(w.exitCode) : w.once('exit', (c) => r(c))));
    assert.equal(code, 0, w.output().slice(-2000));
  }
});

it('up --pool-workers 2 starts two pool workers on the pool queue, each polling under its own identity; down stops both', async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pools-'));
  const queue = uniqueTaskQueue('pool');
  const cliEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: env.address,
    DATABASE_URL: db.url,
    TROUPE_STATE_DIR: stateDir,
    TROUPE_DEVICE: 'cpu',
    TROUPE_TASK_QUEUE: uniqueTaskQueue('troupe'),
    TROUPE_POOL_TASK_QUEUE: queue,
    TROUPE_DASHBOARD_PORT: String(await freePort()),
  };
  const troupe = (args: string[]) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn(process.execPath, [path.join(repoRoot, 'cli', 'bin.js'), ...args], { env: cliEnv, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (c) => (out += c));
      child.stderr.on('data', (c) => (out += c));
      child.on('close', (code) => resolve({ code, out }));
    });
  try {
    const up = await troupe(['up', '--pool-workers', '2', '--no-supervise']);
    assert.equal(up.code, 0, up.out);
    const pools = ['pool-worker', 'pool-worker-2'].map((name) => readRecord(stateDir, name));
    assert.ok(
      pools.every((r) => r && pidAlive(r.pid)),
      up.out,
    );
    const connection = await connectTemporal(env.address);
    try {
      const ids = await pollerIdentities(connection, 'default', queue, 'activity');
      for (const r of pools)
        assert.ok(
          ids.some((id) => id.startsWith(`${r!.pid}@`)),
          `pid ${r!.pid} polls ${queue}: ${ids.join(', ')}`,
        );
    } finally {
      await connection.close();
    }
    const down = await troupe(['down']);
    assert.match(down.out, /pool-worker-2\s+stopped/);
    assert.ok(
      pools.every((r) => !pidAlive(r!.pid)),
      down.out,
    );
  } finally {
    await troupe(['down']);
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
});
