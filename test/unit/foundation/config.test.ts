import assert from 'node:assert/strict';
import * as path from 'node:path';
import { test } from 'node:test';
import { ConfigError, loadConfig, redactUrl, temporalAddressOf } from '../../../infra/config';
import { formatError } from '../../../infra/errors';
import { repoRoot } from '../../../infra/paths';

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${err}`);
    return err;
  }
  assert.fail(`expected loadConfig(${JSON.stringify(env)}) to throw`);
}

test('defaults', () => {
  const c = loadConfig({});
  assert.equal(c.namespace, 'default');
  assert.equal(c.taskQueue, 'troupe');
  assert.equal(c.poolTaskQueue, 'troupe-gpu');
  assert.equal(c.device, 'auto');
  assert.equal(c.engineHangS, 20);
  assert.equal(c.temporalPort, 7233);
  assert.equal(c.temporalUiPort, 8233);
  assert.equal(c.postgresPort, 54329);
  assert.equal(c.stateDir, path.join(repoRoot, '.troupe'));
  assert.equal(c.temporalAddress, undefined);
  assert.equal(c.databaseUrl, undefined);
  assert.equal(temporalAddressOf(c), '127.0.0.1:7233');
});

test('values are read and empty strings count as unset', () => {
  const c = loadConfig({
    TEMPORAL_ADDRESS: 'temporal.internal:7233',
    TEMPORAL_NAMESPACE: 'research',
    DATABASE_URL: 'postgresql://u:p@db:5432/troupe',
    TROUPE_STATE_DIR: 'rel/state',
    TROUPE_DEVICE: 'cuda:1',
    TROUPE_ENGINE_HANG_S: '7.5',
    TROUPE_TEMPORAL_PORT: '17233',
    TROUPE_TASK_QUEUE: '',
  });
  assert.equal(c.temporalAddress, 'temporal.internal:7233');
  assert.equal(temporalAddressOf(c), 'temporal.internal:7233');
  assert.equal(c.namespace, 'research');
  assert.equal(c.databaseUrl, 'postgresql://u:p@db:5432/troupe');
  assert.equal(c.stateDir, path.resolve('rel/state'));
  assert.equal(c.device, 'cuda:1');
  assert.equal(c.engineHangS, 7.5);
  assert.equal(c.temporalPort, 17233);
  assert.equal(c.taskQueue, 'troupe');
});

test('a bad DATABASE_URL is named, with what to do', () => {
  for (const bad of ['mysql://root@localhost/db', 'not a url', 'postgres://']) {
    const err = configError({ DATABASE_URL: bad });
    assert.equal(err.variable, 'DATABASE_URL');
    assert.match(err.message, /^DATABASE_URL: /);
    assert.match(err.hint ?? '', /postgres:\/\/user:password@host/);
  }
});

test('the error never echoes a password', () => {
  const err = configError({ DATABASE_URL: 'mysql://u:s3cret@h/db' });
  assert.doesNotMatch(formatError(err), /s3cret/);
  assert.equal(redactUrl('postgres://u:s3cret@h:5432/db'), 'postgres://u:***@h:5432/db');
});

test('each variable names itself in its error', () => {
  const cases: Record<string, string> = {
    TEMPORAL_ADDRESS: 'localhost',
    TROUPE_TEMPORAL_PORT: 'seventy',
    TROUPE_TEMPORAL_UI_PORT: '70000',
    TROUPE_POSTGRES_PORT: '-1',
    TROUPE_DEVICE: 'gpu',
    TROUPE_ENGINE_HANG_S: '0',
    TROUPE_RETENTION_EPISODE_DAYS: '0',
    TROUPE_RETENTION_EPISODE_STEPS: '2.5',
    TROUPE_RETENTION_EPISODE_SAMPLE: '1.5',
    TROUPE_RETENTION_INTERVAL_MINUTES: 'hourly',
  };
  for (const [variable, value] of Object.entries(cases)) {
    const err = configError({ [variable]: value });
    assert.equal(err.variable, variable);
    assert.ok(err.message.startsWith(`${variable}: `), err.message);
  }
});

test('episode retention: off unless a TROUPE_RETENTION_EPISODE_* variable is set; the interval defaults to 10 minutes', () => {
  assert.equal(loadConfig({}).episodeRetention, undefined);
  assert.equal(loadConfig({ TROUPE_RETENTION_INTERVAL_MINUTES: '5' }).episodeRetention, undefined);
  assert.deepEqual(loadConfig({ TROUPE_RETENTION_EPISODE_STEPS: '20' }).episodeRetention, {
    keepDays: undefined,
    keepSteps: 20,
    sample: 0,
    intervalMinutes: 10,
  });
  assert.deepEqual(
    loadConfig({ TROUPE_RETENTION_EPISODE_DAYS: '7', TROUPE_RETENTION_EPISODE_SAMPLE: '0.05', TROUPE_RETENTION_INTERVAL_MINUTES: '2.5' }).episodeRetention,
    { keepDays: 7, keepSteps: undefined, sample: 0.05, intervalMinutes: 2.5 },
  );
});

test('formatError prints one line plus the hint, no stack', () => {
  const out = formatError(configError({ TROUPE_DEVICE: 'tpu' }));
  const lines = out.split('\n');
  assert.equal(lines.length, 2);
  assert.match(lines[0]!, /^troupe: TROUPE_DEVICE: must be auto, cpu, cuda, cuda:N, or a list for --engine pytorch \(cpu,cpu or cuda:0,cuda:1\)$/);
  assert.match(lines[1]!, /^  → /);
});

test('checkpoint store: under the state dir by default, inline limit in bytes', () => {
  const c = loadConfig({ TROUPE_STATE_DIR: '/tmp/s' });
  assert.equal(c.checkpointDir, '/tmp/s/checkpoints');
  assert.equal(c.checkpointInlineMaxBytes, 1048576);
  const d = loadConfig({ TROUPE_STATE_DIR: '/tmp/s', TROUPE_CHECKPOINT_DIR: '/mnt/nfs/ckpt', TROUPE_CHECKPOINT_INLINE_MAX_BYTES: '0' });
  assert.equal(d.checkpointDir, '/mnt/nfs/ckpt');
  assert.equal(d.checkpointInlineMaxBytes, 0);
  const e = configError({ TROUPE_CHECKPOINT_INLINE_MAX_BYTES: '1MiB' });
  assert.equal(e.variable, 'TROUPE_CHECKPOINT_INLINE_MAX_BYTES');
  assert.match(e.message, /whole number of bytes/);
});
