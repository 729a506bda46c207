/**
 * A hung engine: SIGSTOP of the engine process while a run's pool activity is in flight.
 * The engine neither dies nor answers; the pool worker's watchdog counts it hung within
 * 30 s, kills it (the attempt fails, retryably) and starts a new one, and the run ends
 * bit-identical to an uninterrupted run with the same config (every version's weights
 * and optimizer state, every stored episode).
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { DEFAULT_HANG_MS } from '../../../gpu-workers/engine-process';
import type { trainingRun } from '../../../workflows';
import { compareRuns, loadStoredRun } from '../../../testing/chaos/compare';
import { startHarness, type Harness } from '../../../testing/stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const STEPS = 3;
const config = (runId: string) => ({
  team: 'math',
  runId,
  steps: STEPS,
  groupsPerStep: 4,
  groupSize: 4,
  rollout: 'batched' as const,
  evalEvery: 0,
  evalTasks: 4,
  seed: 7,
});

let h: Harness;
const events: Array<Record<string, unknown> & { at: number }> = [];

before(async () => {
  h = await startHarness({ pool: { log: (e) => events.push({ ...e, at: Date.now() }) } });
});
after(async () => h?.shutdown());

it('a SIGSTOPped engine is found hung within 30 s, restarted, and the run ends bit-identical to an uninterrupted one', async () => {
  const calm = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
    taskQueue: h.taskQueue,
    workflowId: 'hang-calm',
    args: [config('hang-calm')],
  });
  assert.equal(calm.status, 'completed');

  const handle = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', {
    taskQueue: h.taskQueue,
    workflowId: 'hang-stopped',
    args: [config('hang-stopped')],
  });
  // Stop the engine while step 1's rollout or update is in flight on the pool.
  let stoppedAt = 0;
  let stoppedPid = 0;
  let during = '';
  const deadline = Date.now() + 120_000;
  while (!stoppedAt) {
    const d = await handle.describe();
    const pending = (d.raw.pendingActivities ?? []).map((a) => a.activityType?.name ?? '');
    const { n } = (await h.db.sql`SELECT count(*)::int AS n FROM versions WHERE run_id = 'hang-stopped'`)[0]!;
    // versions: 1 = only v0 (step 0 running), 2 = step 0 committed
    const activity = pending.find((a) => a === 'rolloutBatch' || a === 'updateModel');
    if (n >= 2 && activity) {
      stoppedPid = h.pool.supervisor!.pid!;
      process.kill(stoppedPid, 'SIGSTOP');
      stoppedAt = Date.now();
      during = activity;
    }
    assert.notEqual(d.status.name, 'COMPLETED', 'the run ended before the engine could be stopped');
    assert.ok(Date.now() < deadline, 'step 1 never had a pool activity in flight');
    await sleep(20);
  }
  const summary = await handle.result();
  assert.equal(summary.status, 'completed');

  const hung = events.find((e) => e.event === 'engine_hung' && e.pid === stoppedPid);
  assert.ok(hung, `the watchdog reported the stopped engine (events: ${JSON.stringify(events.map((e) => e.event))})`);
  const detectedMs = hung.at - stoppedAt;
  console.log(
    `engine SIGSTOPped during ${during}: found hung after ${(detectedMs / 1000).toFixed(1)} s (hang limit ${DEFAULT_HANG_MS / 1000} s), restarted as pid ${h.pool.supervisor!.pid}`,
  );
  assert.ok(detectedMs <= 30_000, `detected in ${detectedMs} ms`);
  assert.notEqual(h.pool.supervisor!.pid, stoppedPid, 'a new engine serves the pool');
  assert.ok(
    events.some((e) => e.event === 'engine_started' && e.at > hung.at),
    'restarted after the kill',
  );

  // The attempt on the hung engine failed and was retried.
  const history = await handle.fetchHistory();
  const attempts = history.events!.map((e) => e.activityTaskStartedEventAttributes?.attempt ?? 0);
  assert.ok(Math.max(...attempts) >= 2, 'an activity was retried');

  const comparison = compareRuns(await loadStoredRun(h.db.sql, 'hang-calm'), await loadStoredRun(h.db.sql, 'hang-stopped'), STEPS, ['policy']);
  assert.deepEqual(comparison.problems, []);
  assert.equal(comparison.versionsCompared, STEPS + 1);
  assert.ok(comparison.episodesCompared >= STEPS * 16);
});
