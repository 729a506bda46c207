/**
 * A transformer team (`recall`) trained end to end against the real stack in
 * both rollout modes (issue 12): the durable run (one child workflow per
 * episode, one activity per turn) commits a version per step with every
 * metric, its weights move, the rollout–update log-prob gap it records stays
 * within the documented Score vs Generate tolerance, and it ends bit for bit
 * where the batched run with the same seed ends (the same episodes, so the
 * same updates on CPU).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { listVersions } from '../../../activities/store/versions';
import { loadStepEpisodes } from '../../../activities/store/trajectories';
import type { trainingRun } from '../../../workflows';
import { checkRunBookkeeping, startHarness, type Harness } from '../../../testing/stack';

/** engines/onnx/transformer/README.md: generated log-probs equal Score's within 1e-5. */
const SCORE_GENERATE_TOLERANCE = 1e-5;

describe('a transformer team in both rollout modes', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });

  it('recall trains in durable mode: versions, metrics with logprobGapMean, moving weights, the batched run’s result', async () => {
    const steps = 2;
    const run = (rollout: 'durable' | 'batched') =>
      h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: `recall-${rollout}`,
        args: [{ team: 'recall', steps, groupsPerStep: 3, groupSize: 4, rollout, evalEvery: 1, evalTasks: 4, seed: 9 }],
      });
    const [durable, batched] = await Promise.all([run('durable'), run('batched')]);
    for (const s of [durable, batched]) {
      assert.equal(s.status, 'completed');
      assert.deepEqual(s.versions, { policy: steps });
      assert.equal(s.finalEval?.episodes, 4);
    }
    await checkRunBookkeeping(h, 'recall-durable', steps, ['reader'], ['policy']);

    // The durable episodes ran as child workflows and were stored as such.
    const episodes = await loadStepEpisodes(h.db.sql, 'recall-durable', 0, 'train');
    assert.equal(episodes.length, 12);
    assert.ok(episodes.every((e) => e.meta.mode === 'durable' && e.trajectory.turns.length === 1));

    const gaps = await h.db
      .sql`SELECT step, name, value FROM metrics WHERE run_id = 'recall-durable' AND kind = 'update' AND scope = 'policy' AND name IN ('logprobGapMean', 'logprobGapMax') ORDER BY step, name`;
    assert.deepEqual(
      gaps.map((r) => `${r.step}:${r.name}`),
      ['0:logprobGapMax', '0:logprobGapMean', '1:logprobGapMax', '1:logprobGapMean'],
    );
    for (const r of gaps) assert.ok(r.value >= 0 && r.value <= SCORE_GENERATE_TOLERANCE, `step ${r.step} ${r.name} = ${r.value}`);

    const [spec] = await h.db.sql`SELECT spec FROM versions WHERE run_id = 'recall-durable' AND version = 0`;
    assert.equal((spec!.spec as { family: string }).family, 'transformer');
    const durableVersions = await listVersions(h.db.sql, 'recall-durable');
    assert.equal(new Set(durableVersions.map((v) => v.sha256)).size, steps + 1, 'every update changed the weights');
    // Same seed, same episodes, bitwise-reproducible updates: the same weights at every version.
    assert.deepEqual(
      (await listVersions(h.db.sql, 'recall-batched')).map((v) => v.sha256),
      durableVersions.map((v) => v.sha256),
    );
  });
});
