/**
 * An engine that hangs at the same point on every restart does not loop: step 0's update stalls the device
 * queue (test fault `stall-update`, engines/onnx/faults.ts) in every engine the pool worker starts, since each
 * reads the fault from the environment it is spawned with, and each retry of the update redoes the same work.
 * The watchdog kills each as hung; after MAX_HUNG_IN_A_ROW kills at the same point (no engine got further)
 * the pool worker restarts it no more: the run fails non-retryably (ENGINE_HUNG), saying where it hung, and a
 * fresh engine is started for what comes next.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { MAX_HUNG_IN_A_ROW } from '../../../gpu-workers/engine-process';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';

const HANG_MS = 4000;
const RUN = 'hung-loop';
let h: Harness;
const events: Array<Record<string, unknown> & { at: number }> = [];

before(async () => {
  // kept for the whole test: every engine the pool worker (re)starts gets the fault
  process.env.TROUPE_ENGINE_FAULTS = `stall-update:${RUN}/policy/step0$`;
  h = await startHarness({ pool: { engineHangMs: HANG_MS, log: (e) => events.push({ ...e, at: Date.now() }) } });
});
after(async () => {
  delete process.env.TROUPE_ENGINE_FAULTS;
  await h?.shutdown();
});

const messages = (e: unknown) => {
  let text = '';
  for (let c = e as Error | undefined; c; c = c.cause as Error | undefined) text += ` ${c.message}`;
  return text;
};

it(`an engine hung at the same point ${MAX_HUNG_IN_A_ROW} times in a row fails the run saying where, then a fresh one serves what comes next`, async () => {
  const t0 = Date.now();
  let error: unknown;
  await h.env.client.workflow
    .execute<typeof trainingRun>('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: RUN,
      args: [{ team: 'math', runId: RUN, steps: 1, groupsPerStep: 2, groupSize: 4, rollout: 'batched', evalEvery: 0, evalTasks: 2, seed: 5 }],
    })
    .then(
      () => assert.fail('the run completed'),
      (e: unknown) => (error = e),
    );
  const seconds = (Date.now() - t0) / 1000;
  const hung = events.filter((e) => e.event === 'engine_hung');
  const gaveUp = events.filter((e) => e.event === 'engine_gave_up');
  console.log(`failed after ${seconds.toFixed(1)} s (hang limit ${HANG_MS / 1000} s): ${messages(error).trim()}`);
  assert.equal(hung.length, MAX_HUNG_IN_A_ROW, `killed as hung ${hung.length} times: ${JSON.stringify(hung)}`);
  // the first engine also ran step 0's rollouts; each restart only reloads and redoes the update
  assert.ok(
    hung.every((e, i) => (e.queueDepth as number) >= 1 && (i === 0 || (e.deviceRuns as number) <= (hung[i - 1]!.deviceRuns as number))),
    `each with the update queued, none further than the one before: ${JSON.stringify(hung)}`,
  );
  assert.equal(gaveUp.length, 1);
  assert.match(
    messages(error),
    new RegExp(`killed as hung ${MAX_HUNG_IN_A_ROW} times in a row at the same point \\(after ${hung.at(-1)!.deviceRuns} device runs`),
  );
  assert.match(messages(error), /TROUPE_ENGINE_HANG_S is 4 s/);
  assert.equal(h.pool.supervisor!.restartCount, MAX_HUNG_IN_A_ROW - 1, 'no restart after the last hang but the fresh start the failing call made');
  // the call that failed the run started a fresh engine for the next runs
  for (let i = 0; i < 60 && !h.pool.supervisor!.running; i++) await new Promise((r) => setTimeout(r, 500));
  assert.equal(h.pool.supervisor!.running, true, 'a fresh engine is up for what comes next');
});
