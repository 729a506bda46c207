/**
 * TROUPE_POOL_TASK_QUEUE moves the pool and the run's pool work with it (issue 11 item 12):
 * a pool worker on a non-default queue and a control worker configured with that queue train
 * a run to the end in both rollout modes. Before the fix the workflows sent pool work to the
 * hard-coded 'troupe-gpu' queue, which nobody polled: the run hung.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { poolTaskQueue } from '../../../activities/training/pool-queues';
import { DEFAULT_POOL } from '../../../agents/model';
import type { trainingRun } from '../../../workflows/training-run';
import { uniqueTaskQueue } from '../../helpers';
import { startHarness, type Harness } from '../../../testing/stack';

let h: Harness;
const movedPoolQueue = uniqueTaskQueue('moved-gpu');

before(async () => {
  h = await startHarness({ poolTaskQueue: movedPoolQueue });
});
after(async () => h?.shutdown());

it('the default pool is served on the configured queue; other pools on their own name', () => {
  assert.equal(poolTaskQueue(DEFAULT_POOL, 'moved'), 'moved');
  assert.equal(poolTaskQueue('big-gpus', 'moved'), 'big-gpus');
});

for (const rollout of ['batched', 'durable'] as const) {
  it(`a ${rollout} run trains on a pool moved to another task queue`, { timeout: 120_000 }, async () => {
    const handle = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: `moved-pool-${rollout}`,
      args: [{ team: 'math', steps: 1, groupsPerStep: 2, groupSize: 2, evalEvery: 0, evalTasks: 2, rollout, seed: 1 }],
    });
    // A run whose pool work goes to an unpolled queue never ends: bound the wait.
    const summary = await Promise.race([
      handle.result(),
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('the run made no progress in 60 s: its pool work went to a queue nobody polls')), 60_000).unref(),
      ),
    ]).finally(() => handle.terminate('test over').catch(() => undefined));
    assert.equal(summary.status, 'completed');
    assert.deepEqual(summary.versions, { policy: 1 });
  });
}
