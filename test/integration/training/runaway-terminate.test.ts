// Runs whose every batched episode hangs in a synchronous loop (a user's bug). Terminated from
// Temporal as a user would from the Web UI: its rollout activity learns of it at its next
// heartbeat, its episodes' threads are ended (activities/training/episode-threads.ts), the pool
// worker's CPU falls back under 20% within 10 s, and the next run on the same stack completes.
// Left alone with the default 30 s limit: the run fails once its first episodes have all failed
// the same way (activities/training/rollout.ts FAIL_FAST), naming the error, within a minute.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { readRecord } from '../../../stack/processes';
import { cliStack, troupe } from '../../helpers/cli';

const project = path.join(__dirname, 'fixtures', 'runaway-project');
let stack: Awaited<ReturnType<typeof cliStack>>;
before(async () => {
  stack = await cliStack({ TROUPE_PROJECT: project });
});
after(async () => {
  await stack?.cleanup().catch(() => undefined);
});
const args = ['train', 'runaway', '--steps', '1', '--groups', '8', '--group-size', '2', '--seed', '1', '--eval-every', '0'];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TICK = 1 / 100; // seconds per clock tick on Linux (getconf CLK_TCK: 100)

/** CPU seconds (user + system, every thread) of a process so far, from /proc. */
function cpuSeconds(pid: number): number {
  // fields after the command's closing parenthesis: state is the 3rd field, utime the 14th, stime the 15th
  const after = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(after[11]) + Number(after[12])) * TICK;
}

/** The process's CPU share over the next `ms`. */
async function cpuShare(pid: number, ms = 1000): Promise<number> {
  const c0 = cpuSeconds(pid);
  const t0 = performance.now();
  await sleep(ms);
  return (cpuSeconds(pid) - c0) / ((performance.now() - t0) / 1000);
}

test('a terminated run of looping episodes frees its pool worker within seconds; the next run completes', { timeout: 10 * 60_000 }, async () => {
  const first = troupe([...args, '--team-options', '{"forever":true}'], stack.env);

  // the run starts, and its episodes loop on the pool worker's episode threads
  let runId: string | undefined;
  for (let i = 0; i < 300 && !runId; i++) {
    await sleep(1000);
    runId = (await stack.db.sql<{ run_id: string }[]>`SELECT run_id FROM runs WHERE team = 'runaway'`.catch(() => []))[0]?.run_id;
  }
  assert.ok(runId, 'the run started within 5 minutes');
  const pool = readRecord(stack.stateDir, 'pool-worker');
  assert.ok(pool, 'the pool worker is running');
  let busy = 0;
  for (let i = 0; i < 120 && busy < 0.5; i++) busy = await cpuShare(pool.pid);
  assert.ok(busy >= 0.5, `the looping episodes keep the pool worker busy: CPU share ${busy.toFixed(2)}`);

  // terminate it, as from the Web UI
  const connection = await Connection.connect({ address: `127.0.0.1:${stack.env.TROUPE_TEMPORAL_PORT}` });
  try {
    const client = new Client({ connection, namespace: stack.env.TEMPORAL_NAMESPACE || 'default' });
    await client.workflow.getHandle(runId).terminate('runaway-terminate.test');
  } finally {
    await connection.close();
  }
  const t0 = performance.now();
  const shares: string[] = [];
  let calm = false;
  while (!calm && performance.now() - t0 < 10_000) {
    const share = await cpuShare(pool.pid);
    shares.push(share.toFixed(2));
    calm = share < 0.2;
  }
  const freedS = (performance.now() - t0) / 1000;
  console.log(`[runaway-terminate] pool worker CPU share per second after the terminate: ${shares.join(' ')} (calm after ${freedS.toFixed(1)} s)`);
  assert.ok(calm, `the pool worker is back under 20% CPU within 10 s of the terminate: ${shares.join(' ')}`);
  const out1 = await first;
  assert.notEqual(out1.code, 0, 'the terminated run does not end as completed');

  // the same stack runs the next run as usual
  const t1 = performance.now();
  const second = await troupe([...args, '--team-options', '{"calm":true}'], stack.env);
  const secondS = (performance.now() - t1) / 1000;
  const out2 = second.stdout + second.stderr;
  assert.equal(second.code, 0, out2);
  assert.match(out2, /run runaway-\S+ \(runaway\) completed after 1 steps/);
  console.log(`[runaway-terminate] the next run completed in ${secondS.toFixed(1)} s`);
  assert.ok(secondS < 60, `the next run completed within a minute: ${secondS.toFixed(1)} s`);
  assert.equal(readRecord(stack.stateDir, 'pool-worker')?.pid, pool.pid, 'by the same pool worker');
});

test('a run whose first episodes all fail the same way fails within a minute, naming the error', { timeout: 5 * 60_000 }, async () => {
  // every episode loops until the default limit, 30 s: 16 episodes on 4 threads would take 2 min a step, 3 steps before
  // maxStepsWithoutSignal fails the run
  const t0 = performance.now();
  const res = await troupe(
    [
      'train',
      'runaway',
      '--steps',
      '3',
      '--groups',
      '8',
      '--group-size',
      '2',
      '--seed',
      '2',
      '--eval-every',
      '0',
      '--team-options',
      '{"forever":true,"cpuMs":30000}',
    ],
    stack.env,
  );
  const seconds = (performance.now() - t0) / 1000;
  const out = res.stdout + res.stderr;
  console.log(`[runaway-terminate] the failing run ended after ${seconds.toFixed(1)} s`);
  assert.equal(res.code, 1, out);
  assert.match(
    out,
    /the first 4 episodes of step 0 \(train\) all failed the same way, so the run stops here rather than spend the step on it: episode: its code ran 30\.\d s without awaiting a turn or tool call, after its turn 1 \(model policy\)/,
  );
  assert.ok(seconds < 60, `ended within a minute of its start: ${seconds.toFixed(1)} s`);
  const runId = /run (runaway-\S+)/.exec(out)?.[1];
  assert.ok(runId, out);
  const [stored] = await stack.db.sql<{ failed: number }[]>`SELECT count(*)::int AS failed FROM episodes WHERE run_id = ${runId} AND status = 'failed'`;
  assert.ok(stored!.failed >= 4, `the failed episodes are stored for troupe status: ${stored!.failed}`);
});
