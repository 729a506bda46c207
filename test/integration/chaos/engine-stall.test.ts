/**
 * An engine that answers Health but makes no progress: step 1's update takes the train
 * queue and never finishes (test fault `stall-update`, engines/onnx/faults.ts), while
 * the engine process stays alive and keeps answering Health with its queue depth and
 * unchanged device runs. The pool worker's watchdog counts it hung within its limit, kills
 * it (the update attempt fails, retryably) and starts a new engine (without the fault), and
 * the run ends bit-identical to an uninterrupted run with the same config.
 * (The silent-engine branch, SIGSTOP, is engine-hang.test.ts.)
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { parseEngineFaults } from '../../../engines/onnx/faults';
import { HEALTH_EVERY_MS } from '../../../gpu-workers/engine-process';
import type { trainingRun } from '../../../workflows';
import { compareRuns, loadStoredRun } from '../../../testing/chaos/compare';
import { startHarness, type Harness } from '../../../testing/stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const HANG_MS = 10_000;
const STEPS = 2;
const STALLED = 'stall-stalled';
const config = (runId: string) => ({
  team: 'math',
  runId,
  steps: STEPS,
  groupsPerStep: 2,
  groupSize: 4,
  rollout: 'batched' as const,
  evalEvery: 0,
  evalTasks: 4,
  seed: 5,
});

let h: Harness;
const events: Array<Record<string, unknown> & { at: number }> = [];

before(async () => {
  // Only the first engine gets the fault (it reads the environment it is spawned with): the
  // engine the watchdog starts in its place redoes the update normally.
  process.env.TROUPE_ENGINE_FAULTS = `stall-update:${STALLED}/policy/step1$`;
  try {
    h = await startHarness({ pool: { engineHangMs: HANG_MS, log: (e) => events.push({ ...e, at: Date.now() }) } });
  } finally {
    delete process.env.TROUPE_ENGINE_FAULTS;
  }
});
after(async () => h?.shutdown());

it('the stall-update fault matches request ids like nan-update, and only its own', () => {
  const f = parseEngineFaults('stall-update:r/policy/step1$,nan-update:r/policy/step0$');
  assert.equal(f.stallUpdate('r/policy/step1'), true);
  assert.equal(f.stallUpdate('r/policy/step1/lr0.1'), false);
  assert.equal(f.stallUpdate('r/policy/step0'), false);
  assert.equal(f.nanUpdate('r/policy/step0'), true);
  assert.equal(f.nanUpdate('r/policy/step1'), false);
  assert.deepEqual(f.armed, ['stall-update:r/policy/step1$', 'nan-update:r/policy/step0$']);
});

it('an engine that answers Health but stalls an update is found hung within the limit, restarted, and the run ends bit-identical', async () => {
  const calm = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
    taskQueue: h.taskQueue,
    workflowId: 'stall-calm',
    args: [config('stall-calm')],
  });
  assert.equal(calm.status, 'completed');
  assert.ok(!events.some((e) => e.event === 'engine_hung'), 'a working engine is never hung');

  const stalledPid = h.pool.supervisor!.pid!;
  const handle = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: STALLED, args: [config(STALLED)] });
  // Ask the engine for Health ourselves while the run goes: during the stall it answers.
  const answers: Array<{ at: number; deviceRuns: number; queueDepth: number }> = [];
  const deadline = Date.now() + 180_000;
  while (!events.some((e) => e.event === 'engine_hung')) {
    if (Date.now() > deadline) {
      process.kill(stalledPid, 'SIGKILL'); // else the pool worker's shutdown would wait on the stalled update
      assert.fail(`the stalled engine was never found hung (events: ${JSON.stringify(events.map((e) => e.event))})`);
    }
    try {
      const health = await h.pool.supervisor!.client().health({ timeoutMs: 1000 });
      if (h.pool.supervisor!.pid === stalledPid) answers.push({ at: Date.now(), deviceRuns: health.deviceRuns, queueDepth: health.queueDepth });
    } catch {
      // killed between our check and the call
    }
    await sleep(250);
  }
  const summary = await handle.result();
  assert.equal(summary.status, 'completed');

  const hung = events.find((e) => e.event === 'engine_hung')!;
  assert.equal(hung.pid, stalledPid);
  const stalledMs = hung.stalledMs as number;
  console.log(
    `engine answering Health with a stalled update: found hung after ${(stalledMs / 1000).toFixed(1)} s without progress (limit ${HANG_MS / 1000} s, Health every ${HEALTH_EVERY_MS / 1000} s), restarted as pid ${h.pool.supervisor!.pid}`,
  );
  assert.ok(stalledMs >= HANG_MS && stalledMs <= HANG_MS + 2 * HEALTH_EVERY_MS + 1000, `detected after ${stalledMs} ms without progress`);
  // It answered all along the stall, with work queued and no device run finishing.
  const during = answers.filter((a) => a.at >= hung.at - stalledMs + HEALTH_EVERY_MS && a.at <= hung.at);
  assert.ok(during.length >= 2, `Health answered during the stall (${JSON.stringify(answers.slice(-30))})`);
  assert.ok(
    during.every((a) => a.queueDepth >= 1 && a.deviceRuns === during[0]!.deviceRuns),
    JSON.stringify(during),
  );
  assert.notEqual(h.pool.supervisor!.pid, stalledPid, 'a new engine serves the pool');
  assert.ok(
    events.some((e) => e.event === 'engine_started' && e.at > hung.at),
    'restarted after the kill',
  );

  // The update attempt on the stalled engine failed and was retried.
  const history = await handle.fetchHistory();
  const retried = history.events!.filter((e) => (e.activityTaskStartedEventAttributes?.attempt ?? 0) >= 2);
  assert.ok(retried.length >= 1, 'an activity was retried');

  const comparison = compareRuns(await loadStoredRun(h.db.sql, 'stall-calm'), await loadStoredRun(h.db.sql, STALLED), STEPS, ['policy']);
  assert.deepEqual(comparison.problems, []);
  assert.equal(comparison.versionsCompared, STEPS + 1);
});
