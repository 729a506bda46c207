// Runs whose every batched episode hangs in a synchronous loop (a user's bug). Terminated from
// Temporal as a user would from the Web UI: its rollout activity learns of it at its next
// heartbeat, its episodes' threads are ended (activities/training/episode-threads.ts), the pool
// worker's CPU falls back under 20% within 10 s, and the next run on the same stack completes.
// Stopped with `troupe stop --now`: the same, and the run closes as stopped without a final eval.
// Left alone with the default 30 s limit: the run fails once its first episodes have all failed
// the same way (schema/rollout-progress.ts FAIL_FAST), naming the error, within a minute; a durable
// rollout of episodes that all throw does the same.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { procStat } from '../../../infra/proc-stat';
import { readRecord } from '../../../stack/processes';
import { cliStack, newRunId, storedRunIds, troupe } from '../../helpers/cli';

const project = path.join(__dirname, 'fixtures', 'runaway-project');
let stack: Awaited<ReturnType<typeof cliStack>>;
before(async () => {
  stack = await cliStack({ TROUPE_PROJECT: project });
});
after(async () => {
  await stack?.cleanup().catch(() => undefined);
});
const args = ['train', 'runaway', '--steps', '1', '--groups', '8', '--group-size', '2', '--eval-every', '0'];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** CPU seconds (user + system, every thread) of a live process so far. */
const cpuSeconds = (pid: number): number => procStat(pid)!.cpuSeconds;

/** The process's CPU share over the next `ms`. */
async function cpuShare(pid: number, ms = 1000): Promise<number> {
  const c0 = cpuSeconds(pid);
  const t0 = performance.now();
  await sleep(ms);
  return (cpuSeconds(pid) - c0) / ((performance.now() - t0) / 1000);
}

/** Starts a run of looping episodes; resolves once they keep the pool worker busy. */
async function loopingRun(seed: number) {
  // runs of earlier tests (a terminated one is still 'running' in the store until someone looks)
  const earlier = await storedRunIds(stack.db);
  const done = troupe([...args, '--seed', String(seed), '--team-options', '{"forever":true}'], stack.env);
  const runId = await newRunId(stack.db, 'runaway', earlier);
  assert.ok(runId, 'the run started within 5 minutes');
  const pool = readRecord(stack.stateDir, 'pool-worker');
  assert.ok(pool, 'the pool worker is running');
  let busy = 0;
  for (let i = 0; i < 120 && busy < 0.5; i++) busy = await cpuShare(pool.pid);
  assert.ok(busy >= 0.5, `the looping episodes keep the pool worker busy: CPU share ${busy.toFixed(2)}`);
  return { runId, pool: pool.pid, done };
}

/** Samples the pool worker's CPU share each second until it is under 20%, for at most 10 s. */
async function calmsDown(pid: number, what: string) {
  const t0 = performance.now();
  const shares: string[] = [];
  let calm = false;
  while (!calm && performance.now() - t0 < 10_000) {
    const share = await cpuShare(pid);
    shares.push(share.toFixed(2));
    calm = share < 0.2;
  }
  console.log(
    `[runaway-terminate] ${what}: pool worker CPU share per second after it: ${shares.join(' ')} (calm after ${((performance.now() - t0) / 1000).toFixed(1)} s)`,
  );
  assert.ok(calm, `the pool worker is back under 20% CPU within 10 s of the ${what}: ${shares.join(' ')}`);
}

/** The next run on the same stack, by the same pool worker, completes within a minute. */
async function nextRunCompletes(pool: number) {
  const t1 = performance.now();
  const second = await troupe([...args, '--seed', '1', '--team-options', '{"calm":true}'], stack.env);
  const secondS = (performance.now() - t1) / 1000;
  const out2 = second.stdout + second.stderr;
  assert.equal(second.code, 0, out2);
  assert.match(out2, /run runaway-\S+ \(runaway\) completed after 1 steps/);
  console.log(`[runaway-terminate] the next run completed in ${secondS.toFixed(1)} s`);
  assert.ok(secondS < 60, `the next run completed within a minute: ${secondS.toFixed(1)} s`);
  assert.equal(readRecord(stack.stateDir, 'pool-worker')?.pid, pool, 'by the same pool worker');
}

test('a terminated run of looping episodes frees its pool worker within seconds; the next run completes', { timeout: 10 * 60_000 }, async () => {
  const { runId, pool, done } = await loopingRun(1);
  // terminate it, as from the Web UI
  const connection = await Connection.connect({ address: `127.0.0.1:${stack.env.TROUPE_TEMPORAL_PORT}` });
  try {
    const client = new Client({ connection, namespace: stack.env.TEMPORAL_NAMESPACE || 'default' });
    await client.workflow.getHandle(runId).terminate('runaway-terminate.test');
  } finally {
    await connection.close();
  }
  await calmsDown(pool, 'terminate');
  assert.notEqual((await done).code, 0, 'the terminated run does not end as completed');
  await nextRunCompletes(pool);
});

test('troupe stop --now cancels the step in flight: the pool worker is freed, the run closes as stopped', { timeout: 10 * 60_000 }, async () => {
  const { runId, pool, done } = await loopingRun(3);
  const stop = await troupe(['stop', runId, '--now'], stack.env);
  assert.equal(stop.code, 0, stop.stdout + stop.stderr);
  assert.match(stop.stdout, /stop --now sent at step 0\/1; it stops now, cancelling the step in flight/);
  await calmsDown(pool, 'stop --now');
  const out = await done;
  assert.match(out.stdout + out.stderr, /stopped/);
  const [row] = await stack.db.sql<{ status: string }[]>`SELECT status FROM runs WHERE run_id = ${runId}`;
  assert.equal(row?.status, 'stopped');
  const events = await stack.db.sql<{ kind: string }[]>`SELECT kind FROM run_events WHERE run_id = ${runId} AND kind = 'stopped-now'`;
  assert.equal(events.length, 1, 'the stop --now is recorded');
  await nextRunCompletes(pool);
});

/** A 3-step run that fails fast: within a minute, naming its episodes' one error; the failed episodes stored. */
async function failsFast(what: string, extra: string[], error: RegExp) {
  const t0 = performance.now();
  const res = await troupe(['train', 'runaway', '--steps', '3', '--groups', '8', '--group-size', '2', '--eval-every', '0', ...extra], stack.env);
  const seconds = (performance.now() - t0) / 1000;
  const out = res.stdout + res.stderr;
  console.log(`[runaway-terminate] the failing ${what} run ended after ${seconds.toFixed(1)} s`);
  assert.equal(res.code, 1, out);
  const named = new RegExp(
    `the first 4 episodes of step 0 \\(train\\) all failed the same way, so the run stops here rather than spend the step on it: ${error.source}`,
  );
  assert.match(out, named);
  assert.ok(seconds < 60, `ended within a minute of its start: ${seconds.toFixed(1)} s`);
  const runId = /run (runaway-\S+)/.exec(out)?.[1];
  assert.ok(runId, out);
  const [stored] = await stack.db.sql<{ failed: number }[]>`SELECT count(*)::int AS failed FROM episodes WHERE run_id = ${runId} AND status = 'failed'`;
  assert.ok(stored!.failed >= 4, `the failed episodes are stored for troupe status: ${stored!.failed}`);
}

test('a run whose first episodes all fail the same way fails within a minute, naming the error', { timeout: 5 * 60_000 }, async () => {
  // every episode loops until the default limit, 30 s: 16 episodes on 4 threads would take 2 min a step, 3 steps before
  // maxStepsWithoutSignal fails the run
  await failsFast(
    'batched',
    ['--seed', '2', '--team-options', '{"forever":true,"cpuMs":30000}'],
    /episode: its code ran 30\.\d s without awaiting a turn or tool call, after its turn 1 \(model policy\)/,
  );
});

test('a durable rollout whose first episodes all fail the same way fails the run, naming the error', { timeout: 5 * 60_000 }, async () => {
  await failsFast(
    'durable',
    ['--seed', '5', '--rollout', 'durable', '--team-options', '{"calm":true,"throws":true}'],
    /.*broken team: every episode throws after its first turn/,
  );
});
