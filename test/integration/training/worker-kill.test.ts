/**
 * kill -9 of the pool worker process in the middle of a durable episode: the
 * episode finishes on a restarted worker, with the same trajectory as an
 * uninterrupted episode with the same seed.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { loadTeam } from '../../../agents/team-registry';
import { createRun } from '../../../activities/store/runs';
import { loadEpisode } from '../../../activities/store/trajectories';
import { loadTasks } from '../../../activities/tasks';
import { planTrainEpisodes } from '../../../activities/training/plan';
import { createTrainingPoolActivities } from '../../../activities/training/pool';
import { createControlWorker } from '../../../processes/control-worker';
import type { episodeWorkflow } from '../../../workflows';
import { fileStack, uniqueTaskQueue, workflowBundle } from '../../helpers';
import { startPool } from '../../../testing/stack';
import { finishThroughPoolKill } from '../fixtures/pool-kill';

const stack = fileStack();

it('a durable episode survives kill -9 of the pool worker mid-episode and ends with the same trajectory', async () => {
  const { env, db } = stack;
  const taskQueue = uniqueTaskQueue('troupe');
  const control = await createControlWorker({
    connection: env.nativeConnection,
    namespace: 'default',
    taskQueue,
    sql: db.sql,
    workflowBundle: await workflowBundle(),
  });
  const controlRun = control.run();
  const team = loadTeam('math');
  const ref = { team: 'math', teamOptions: {} };
  try {
    // Reference: the same episode (same seed) on an undisturbed in-process pool worker.
    const pool = await startPool(env, db);
    const activities = createTrainingPoolActivities({ sql: db.sql, engine: () => pool.getClient(), checkpoints: db.checkpoints });
    for (const runId of ['calm', 'killed']) {
      await createRun(db.sql, { runId, team: 'math', config: {} });
      await new MockActivityEnvironment().run(activities.initModel, { ...ref, runId, model: 'policy', seed: 4 });
    }
    const spec = (runId: string) => planTrainEpisodes(loadTasks(team), { runId, step: 0, seed: 4, groupsPerStep: 1, groupSize: 1 })[0]!;
    const args = (runId: string) =>
      [{ ...ref, runId, step: 0, split: 'train' as const, spec: spec(runId), versions: { policy: 0 } }] as [Parameters<typeof episodeWorkflow>[0]];
    await env.client.workflow.execute<typeof episodeWorkflow>('episodeWorkflow', { taskQueue, workflowId: 'calm-episode', args: args('calm') });
    await pool.shutdown();

    // The same episode on a pool worker process that is killed after the first turn's generation.
    const handle = await env.client.workflow.start<typeof episodeWorkflow>('episodeWorkflow', {
      taskQueue,
      workflowId: 'killed-episode',
      args: args('killed'),
    });
    const result = await finishThroughPoolKill(env, db, handle, 90_000);
    assert.equal(result.status, 'completed');

    const calm = (await loadEpisode(db.sql, spec('calm').episodeId))!;
    const killed = (await loadEpisode(db.sql, spec('killed').episodeId))!;
    const tokens = (e: typeof calm) => e.trajectory.turns.map((t) => ({ ctx: t.contextTokens, out: t.responseTokens, lp: t.logprobs, mask: t.lossMask }));
    assert.deepEqual(tokens(killed), tokens(calm));
    assert.deepEqual(killed.rewards, calm.rewards);
    assert.equal(killed.trajectory.turns.length, 2);
  } finally {
    control.shutdown();
    await controlRun;
  }
});
