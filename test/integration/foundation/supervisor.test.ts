// `troupe up` leaves a supervisor that restarts what dies (issue 18 item 4): SIGKILL the
// control worker and the pool worker, and both come back by themselves, each restart logged;
// `troupe down` stops the supervisor first, so nothing comes back after it.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { Connection } from '@temporalio/client';
import { pidAlive, readRecord, runningService } from '../../../stack/processes';
import { pollerIdentities } from '../../../infra/temporal-connection';
import { createTestDatabase, freePort, uniqueTaskQueue } from '../../helpers';
import { troupe } from '../../helpers/cli';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

test('the supervisor restarts a killed control worker and a killed pool worker; down stops it first', { timeout: 420_000 }, async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-supervisor-'));
  const db = await createTestDatabase({ migrate: false });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TROUPE_STATE_DIR: stateDir,
    TROUPE_TEMPORAL_PORT: String(await freePort()),
    TROUPE_TEMPORAL_UI_PORT: String(await freePort()),
    TROUPE_TASK_QUEUE: uniqueTaskQueue('control'),
    TROUPE_POOL_TASK_QUEUE: uniqueTaskQueue('pool'),
    TROUPE_DEVICE: 'cpu',
    DATABASE_URL: db.url,
    TEMPORAL_ADDRESS: '',
    TROUPE_DEBUG: '',
  };
  cleanups.push(async () => {
    await troupe(['down'], env);
    await db.drop();
    fs.rmSync(stateDir, { recursive: true, force: true });
  });
  const up = await troupe(['up'], env);
  assert.equal(up.code, 0, up.stderr + up.stdout);
  assert.match(up.stdout, /supervisor {3}pid \d+: restarts what dies/);
  const supervisor = readRecord(stateDir, 'supervisor')!;
  assert.ok(pidAlive(supervisor.pid));

  const connection = await Connection.connect({ address: `127.0.0.1:${env.TROUPE_TEMPORAL_PORT}` });
  cleanups.push(() => connection.close());
  const polls = async (queue: string, kind: 'workflow' | 'activity', pid: number) =>
    (await pollerIdentities(connection, 'default', queue, kind).catch(() => [])).some((id) => id.startsWith(`${pid}@`));

  for (const [name, queue, kind] of [
    ['control-worker', env.TROUPE_TASK_QUEUE!, 'workflow'],
    ['pool-worker', env.TROUPE_POOL_TASK_QUEUE!, 'activity'],
  ] as const) {
    const old = readRecord(stateDir, name)!;
    process.kill(old.pid, 'SIGKILL');
    const deadline = Date.now() + 150_000;
    for (;;) {
      const now = runningService(stateDir, name);
      if (now && now.pid !== old.pid && (await polls(queue, kind, now.pid))) break;
      assert.ok(Date.now() < deadline, `${name} was not restarted within 150 s:\n${fs.readFileSync(supervisor.log, 'utf8').slice(-2000)}`);
      await sleep(250);
    }
  }
  // The new worker polls a moment before the supervisor's own readiness check logs the restart.
  const logDeadline = Date.now() + 60_000;
  let log = fs.readFileSync(supervisor.log, 'utf8');
  while (!/supervisor: restarted .*pool-worker \(pid \d+\)/.test(log) && Date.now() < logDeadline) {
    await sleep(250);
    log = fs.readFileSync(supervisor.log, 'utf8');
  }
  // (the pool worker may die while the supervisor is restarting the control worker: one restart then brings both)
  assert.match(log, /supervisor: not running: control-worker.*; restarting/);
  assert.match(log, /supervisor: restarted .*control-worker \(pid \d+\)/);
  assert.match(log, /supervisor: restarted .*pool-worker \(pid \d+\)/);

  const down = await troupe(['down'], env);
  assert.equal(down.code, 0, down.stderr);
  assert.match(down.stdout, /supervisor +stopped/);
  await sleep(3000);
  for (const name of ['supervisor', 'control-worker', 'pool-worker', 'temporal'])
    assert.equal(runningService(stateDir, name), undefined, `${name} is not running after down`);
});
