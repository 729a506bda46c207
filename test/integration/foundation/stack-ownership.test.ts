// One owner of a state dir's processes (issue: duplicate and orphaned workers). The user's
// steps: `troupe up`, edit a team, `troupe train` (which restarts the workers while the
// supervisor watches), then `troupe down`. Exactly one control worker must poll afterwards,
// and `down` must leave no process of the state dir behind, not even one whose record was lost.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { editTeam } from '../../helpers/edit-team';
import { markedProcesses, removeRecord, readRecord } from '../../../stack/processes';
import { cliStack, troupe } from '../../helpers/cli';

const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The worker processes of `stateDir` running `entry` (their engines and other children left out). */
function workers(stateDir: string, entry: string): number[] {
  return markedProcesses(stateDir)
    .filter((p) => p.argv.some((a) => a.endsWith(path.join('processes', entry))))
    .map((p) => p.pid);
}

test('a team-code restart under the supervisor leaves one control worker, and down ends every process of the state dir', async () => {
  const stack = await cliStack();
  const { env, stateDir } = stack;
  let restore = () => {};
  cleanups.push(async () => {
    restore();
    await stack.cleanup();
  });

  const up = await troupe(['up'], env);
  assert.equal(up.code, 0, up.stderr + up.stdout);
  assert.equal(workers(stateDir, 'control-worker.ts').length, 1);

  restore = editTeam(); // the team code hash changes
  const train = await troupe(['train', 'math', '--steps', '1', '--eval-every', '0', '--groups', '2', '--group-size', '2'], env);
  assert.equal(train.code, 0, train.stderr + train.stdout);
  assert.match(train.stderr + train.stdout, /restarting it/);

  // The supervisor checks every second; the duplicate used to appear ~13 s after the restart.
  for (let i = 0; i < 15; i++) {
    const control = workers(stateDir, 'control-worker.ts');
    assert.ok(control.length <= 1, `two control workers: ${control.join(', ')}`);
    await sleep(1000);
  }
  const control = workers(stateDir, 'control-worker.ts');
  assert.deepEqual(control, [readRecord(stateDir, 'control-worker')!.pid]);

  // A pool worker whose record is lost (as if its starter died before writing it): the
  // supervisor starts a new one, and `up` ends the untracked one first.
  const [lostPool] = workers(stateDir, 'pool-worker.ts');
  assert.ok(lostPool);
  removeRecord(stateDir, 'pool-worker');
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline && (readRecord(stateDir, 'pool-worker')?.pid ?? lostPool) === lostPool) await sleep(500);
  const pools = workers(stateDir, 'pool-worker.ts');
  assert.deepEqual(pools, [readRecord(stateDir, 'pool-worker')!.pid], `pool workers now: ${pools.join(', ')}`);
  assert.ok(!pools.includes(lostPool));

  // And a control worker whose record is lost is still ended by `down`.
  removeRecord(stateDir, 'supervisor'); // so nothing restarts it
  removeRecord(stateDir, 'control-worker');
  const down = await troupe(['down'], env);
  assert.equal(down.code, 0, down.stderr + down.stdout);
  assert.match(down.stdout, /without a record/);
  await sleep(500);
  assert.deepEqual(
    markedProcesses(stateDir).map((p) => `${p.service} ${p.pid} ${p.argv.join(' ')}`),
    [],
  );
});
