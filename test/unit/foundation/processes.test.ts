import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { EXTRA_POOL_WORKER, pidAlive, readRecord, recordedServiceNames, runningService, spawnService, stopService, writeRecord } from '../../../infra/processes';

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
  for (const f of ['pool-worker.pid', 'pool-worker-3.pid', 'pool-worker-2.pid', 'pool-worker-2.log', 'control-worker.pid', 'pool-worker-x.pid']) fs.writeFileSync(path.join(stateDir, f), '{}');
  assert.deepEqual(recordedServiceNames(stateDir, EXTRA_POOL_WORKER), ['pool-worker-2', 'pool-worker-3']);
  assert.deepEqual(recordedServiceNames(path.join(stateDir, 'missing'), EXTRA_POOL_WORKER), []);
});
