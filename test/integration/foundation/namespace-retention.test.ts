// Episode retention's Temporal side and its background loop, as a user turns them on (issue #49):
// `troupe up` with TROUPE_RETENTION_EPISODE_DAYS gives the dev server's namespace the same
// retention (whole days) and the control worker starts its retention passes; a bad value is
// refused naming the variable.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { after, test } from 'node:test';
import { Connection } from '@temporalio/client';
import { matchingRetentionDays, namespaceRetentionDays } from '../../../infra/namespace-retention';
import { readRecord } from '../../../stack/processes';
import { cliStack, troupe } from '../../helpers/cli';

const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

test('whole days, at least one', () => {
  assert.equal(matchingRetentionDays(0.25), 1);
  assert.equal(matchingRetentionDays(2.5), 3);
  assert.equal(matchingRetentionDays(7), 7);
  assert.throws(() => matchingRetentionDays(0), /keepDays: must be a number of days > 0/);
});

test('troupe up sets the namespace retention to TROUPE_RETENTION_EPISODE_DAYS and the control worker prunes in the background', async () => {
  const stack = await cliStack({ TROUPE_RETENTION_EPISODE_DAYS: '2.5', TROUPE_RETENTION_EPISODE_SAMPLE: '0.05' });
  cleanups.push(stack.cleanup);
  const up = await troupe(['up', '--no-pool'], stack.env);
  assert.equal(up.code, 0, up.stderr + up.stdout);
  assert.match(up.stderr + up.stdout, /namespace default now keeps closed workflows 3 day\(s\), as TROUPE_RETENTION_EPISODE_DAYS keeps episodes/);
  const connection = await Connection.connect({ address: `127.0.0.1:${stack.env.TROUPE_TEMPORAL_PORT}` });
  try {
    assert.equal(await namespaceRetentionDays(connection, 'default'), 3);
  } finally {
    await connection.close();
  }
  // up waited for the control worker's ready line; the retention loop starts before it is written
  const control = readRecord(stack.stateDir, 'control-worker');
  assert.ok(control);
  const log = fs.readFileSync(control.log, 'utf8');
  assert.match(log, /troupe retention: keep evals, the last 2\.5 day\(s\), a 5% sample by episode id; pruning every 10 minute\(s\)/);

  // a second up finds the retention set and says nothing about it
  const again = await troupe(['up', '--no-pool'], stack.env);
  assert.equal(again.code, 0, again.stderr);
  assert.doesNotMatch(again.stderr + again.stdout, /now keeps closed workflows/);
});

test('a bad retention setting is refused naming the variable', async () => {
  const stack = await cliStack({ TROUPE_RETENTION_EPISODE_SAMPLE: '5' });
  cleanups.push(stack.cleanup);
  const gc = await troupe(['gc', '--dry-run'], stack.env);
  assert.notEqual(gc.code, 0);
  assert.match(gc.stderr, /TROUPE_RETENTION_EPISODE_SAMPLE: must be a fraction from 0 to 1/);
});
