/**
 * A run never hangs silently: when every attempt of an activity fails (here the
 * pool worker's store is unreachable), the retry policy gives up after its 20
 * attempts (~3 min of backoff) and the run fails with the activity's last error
 * as the cause. Slow by design, so only with TROUPE_CHAOS_LONG=1.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure } from '@temporalio/common';
import { createPoolWorker, type PoolWorker } from '../../../processes/pool-worker';
import { connect } from '../../../infra/db';
import { activityRetry } from '../../../workflows/timeouts';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';

const long = process.env.TROUPE_CHAOS_LONG === '1';

let h: Harness;
let broken: PoolWorker;
const unreachable = connect('postgres://nobody:x@127.0.0.1:1/none', { max: 1, connectTimeout: 2 });

before(async () => {
  if (!long) return;
  h = await startHarness();
  // Replace the pool worker by one whose store is unreachable: every pool activity fails, retryably.
  await h.pool.shutdown();
  broken = await createPoolWorker({
    connection: h.env.nativeConnection,
    namespace: h.env.namespace ?? 'default',
    taskQueue: 'troupe-gpu',
    device: 'cpu',
    quietEngine: true,
    sql: unreachable,
  });
  void broken.run();
  h.pool = broken;
});
after(async () => {
  await h?.shutdown();
  await unreachable.end({ timeout: 1 }).catch(() => undefined);
});

it(
  'a persistent activity failure fails the run after the retry policy gives up, naming the cause',
  { skip: !long && 'slow (~3 min): TROUPE_CHAOS_LONG=1', timeout: 600_000 },
  async (t) => {
    const t0 = Date.now();
    let failure: unknown;
    await assert.rejects(
      h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: 'never-hangs',
        args: [{ team: 'math', steps: 2, groupsPerStep: 2, groupSize: 2, evalTasks: 2 }],
      }),
      (e) => ((failure = e), e instanceof WorkflowFailedError),
    );
    const seconds = (Date.now() - t0) / 1000;
    const activity = (failure as WorkflowFailedError).cause;
    assert.ok(activity instanceof ActivityFailure, String(activity));
    assert.equal(activity.activityType, 'initModel');
    assert.match(String(activity.cause?.message), /ECONNREFUSED|connect/, 'the last error is the cause');
    const history = await h.env.client.workflow.getHandle('never-hangs').fetchHistory();
    const scheduled = history.events!.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'initModel')!;
    const started = history.events!.find((e) => String(e.activityTaskStartedEventAttributes?.scheduledEventId) === String(scheduled.eventId))!;
    assert.equal(started.activityTaskStartedEventAttributes!.attempt, activityRetry.maximumAttempts, 'failed on the last attempt the policy allows');
    // 1 + 2 + 4 + 8 + 10 x 15 s of backoff between 20 attempts: ~165 s, then it fails; it does not wait forever.
    assert.ok(seconds > 150 && seconds < 400, `failed after ${seconds.toFixed(0)}s`);
    t.diagnostic(`the run failed after ${seconds.toFixed(0)}s: ${activity.cause?.message}`);
  },
);
