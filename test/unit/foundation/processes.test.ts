import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import {
  EXTRA_POOL_WORKER,
  endStrayProcesses,
  pidAlive,
  readRecord,
  recordedServiceNames,
  removeRecord,
  runningService,
  spawnService,
  stopService,
  strayProcesses,
  writeRecord,
} from '../../../stack/processes';

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-proc-'));

test('spawnService records the process; stopService stops it and removes the pid file', async () => {
  const stateDir = tmp();
  const rec = spawnService({ stateDir, name: 'sleeper', command: 'sleep', args: ['60'] });
  assert.ok(pidAlive(rec.pid));
  assert.deepEqual(readRecord(stateDir, 'sleeper')?.argv, ['sleep', '60']);
  assert.equal(runningService(stateDir, 'sleeper')?.pid, rec.pid);
  assert.equal(await stopService(stateDir, 'sleeper'), 'stopped');
  assert.equal(pidAlive(rec.pid), false);
  assert.equal(fs.existsSync(path.join(stateDir, 'sleeper.pid')), false);
  assert.match(fs.readFileSync(path.join(stateDir, 'sleeper.log'), 'utf8'), /starting sleeper: sleep 60/);
});

test('a pid file whose pid now runs another command is not ours: nothing is signalled', async () => {
  const stateDir = tmp();
  const other = spawnService({ stateDir, name: 'other', command: 'sleep', args: ['60'] });
  try {
    // Pretend an old record points at that pid with a different command (pid reuse).
    writeRecord(stateDir, { name: 'stale', pid: other.pid, argv: ['temporal', 'server', 'start-dev'], log: '', startedAt: '' });
    assert.equal(runningService(stateDir, 'stale'), undefined);
    assert.equal(await stopService(stateDir, 'stale'), 'not-running');
    assert.ok(pidAlive(other.pid), 'the unrelated process must survive');
  } finally {
    await stopService(stateDir, 'other');
  }
});

test('recordedServiceNames lists the pid files of extra pool workers, not the first one or other services', () => {
  const stateDir = tmp();
  for (const f of ['pool-worker.pid', 'pool-worker-3.pid', 'pool-worker-2.pid', 'pool-worker-2.log', 'control-worker.pid', 'pool-worker-x.pid'])
    fs.writeFileSync(path.join(stateDir, f), '{}');
  assert.deepEqual(recordedServiceNames(stateDir, EXTRA_POOL_WORKER), ['pool-worker-2', 'pool-worker-3']);
  assert.deepEqual(recordedServiceNames(path.join(stateDir, 'missing'), EXTRA_POOL_WORKER), []);
});

// The duplicate-worker bug: a restart stopped the old worker while the supervisor started a new
// one under the same name; the stopper then removed the NEW record, leaving a worker nobody tracked.
test('stopping a service keeps the record of another process started under its name meanwhile', async () => {
  const stateDir = tmp();
  // Takes ~0.5 s to exit on SIGTERM, as a worker draining its tasks does.
  const slow = spawnService({ stateDir, name: 'worker', command: 'sh', args: ['-c', 'trap "sleep 0.5; exit 0" TERM; sleep 60 & wait; sleep 0.6'] });
  await new Promise((r) => setTimeout(r, 200)); // let sh install its trap
  const stopping = stopService(stateDir, 'worker');
  const replacement = spawnService({ stateDir, name: 'worker', command: 'sleep', args: ['60'] });
  try {
    assert.equal(await stopping, 'stopped');
    assert.equal(pidAlive(slow.pid), false);
    assert.equal(readRecord(stateDir, 'worker')?.pid, replacement.pid, 'the replacement must stay recorded');
  } finally {
    await stopService(stateDir, 'worker');
    await endStrayProcesses(stateDir);
  }
});

test('a process of the state dir that lost its record is a stray; recorded ones and their children are not', async () => {
  const stateDir = tmp();
  const other = tmp();
  const tracked = spawnService({ stateDir, name: 'pool', command: 'sh', args: ['-c', 'sleep 60 & wait'] });
  const lost = spawnService({ stateDir, name: 'control', command: 'sleep', args: ['61'] });
  const elsewhere = spawnService({ stateDir: other, name: 'control', command: 'sleep', args: ['62'] });
  try {
    await new Promise((r) => setTimeout(r, 200)); // the child `sleep 60` of the tracked shell
    assert.deepEqual(strayProcesses(stateDir), []);
    removeRecord(stateDir, 'control');
    assert.deepEqual(
      strayProcesses(stateDir).map((p) => [p.pid, p.service]),
      [[lost.pid, 'control']],
    );
    assert.deepEqual(strayProcesses(stateDir, ['pool']), []);
    const ended = await endStrayProcesses(stateDir, ['control']);
    assert.deepEqual(
      ended.map((p) => p.pid),
      [lost.pid],
    );
    assert.equal(pidAlive(lost.pid), false);
    assert.ok(pidAlive(tracked.pid) && pidAlive(elsewhere.pid), 'recorded processes and other state dirs are left alone');
  } finally {
    await stopService(stateDir, 'pool');
    await stopService(other, 'control');
    await endStrayProcesses(stateDir);
  }
});
