// Workers load team code once, at start. After a team's code changes, starting a run through the
// CLI restarts the workers `troupe up` started, and refuses a worker it cannot restart.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { NativeConnection, Worker } from '@temporalio/worker';
import { upWithCurrentTeams } from '../../../cli/teams';
import { loadConfig } from '../../../infra/config';
import { isTroupeError } from '../../../infra/errors';
import { pidAlive, readRecord } from '../../../stack/processes';
import { pollersOf, teamCodeHash, workerIdentity } from '../../../processes/team-code';
import { connectTemporal } from '../../../infra/temporal-connection';
import { cliStack, troupe } from '../../helpers/cli';
import { editTeam } from '../../helpers/edit-team';

const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

test('an edited team registry restarts the workers troupe up started, and refuses a foreign stale worker', async () => {
  // in-process code (upWithCurrentTeams, loadConfig) reads the stack's settings from process.env
  const stack = await cliStack();
  Object.assign(process.env, stack.env);
  const { stateDir } = stack;
  let restore = () => {};
  cleanups.push(async () => {
    restore();
    await stack.cleanup();
  });
  const config = loadConfig();
  const lines: string[] = [];
  const log = (l: string) => lines.push(l);

  const up = await troupe(['up', '--no-pool'], process.env);
  assert.equal(up.code, 0, up.stderr + up.stdout);
  const first = readRecord(stateDir, 'control-worker')!;

  // Same code: the running worker is kept.
  const before = teamCodeHash();
  await upWithCurrentTeams(config, log, { pool: false });
  assert.equal(readRecord(stateDir, 'control-worker')!.pid, first.pid);
  assert.ok(!lines.some((l) => /restarting/.test(l)), lines.join('\n'));

  // A team's module changes: the worker is restarted and now says the new code.
  restore = editTeam();
  const now = teamCodeHash();
  assert.notEqual(now, before);
  await upWithCurrentTeams(config, log, { pool: false });
  const second = readRecord(stateDir, 'control-worker')!;
  assert.notEqual(second.pid, first.pid);
  assert.ok(!pidAlive(first.pid));
  assert.ok(
    lines.some((l) => l.includes(`the team code changed since the control-worker started (team code ${now}): restarting it`)),
    lines.join('\n'),
  );
  const connection = await connectTemporal(`127.0.0.1:${process.env.TROUPE_TEMPORAL_PORT}`);
  cleanups.push(() => connection.close());
  const pollers = await pollersOf(connection, config.namespace, [config.taskQueue]);
  assert.ok(
    pollers.some((p) => p.identity === workerIdentity(now).replace(/^\d+@/, `${second.pid}@`)),
    JSON.stringify(pollers),
  );

  // A worker Troupe did not start, running other team code: refused, with what to do.
  const native = await NativeConnection.connect({ address: `127.0.0.1:${process.env.TROUPE_TEMPORAL_PORT}` });
  cleanups.push(() => native.close());
  // (of this project: a worker of another project is refused as such, see the package test)
  const elsewhere = workerIdentity('000000000000').replace(/^\d+@\S+/, 'elsewhere@other-host');
  const foreign = await Worker.create({
    connection: native,
    taskQueue: config.poolTaskQueue,
    identity: elsewhere,
    activities: { noop: async () => undefined },
  });
  const running = foreign.run();
  try {
    for (let i = 0; i < 50 && !(await pollersOf(connection, config.namespace, [config.poolTaskQueue])).length; i++)
      await new Promise((r) => setTimeout(r, 200));
    await assert.rejects(upWithCurrentTeams(config, log, { pool: false }), (e: unknown) => {
      assert.ok(isTroupeError(e));
      assert.match(
        e.message,
        new RegExp(
          `worker "elsewhere@other-host project=\\S+ team-code=000000000000" on task queue "${config.poolTaskQueue}" runs team code 000000000000, this project's is ${now}`,
        ),
      );
      assert.match(e.hint!, /restart that worker/);
      return true;
    });
    assert.equal(readRecord(stateDir, 'control-worker')!.pid, second.pid, 'its own worker is current: not restarted');
  } finally {
    foreign.shutdown();
    await running;
  }
});
