/**
 * Episodes of the bundled teams against the real stack: durable (child
 * workflow, one activity per turn and tool call) and batched (one activity)
 * produce the same tokens for the same seeds, and the store returns exactly
 * what was written. Histories replay against the current workflow code.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { loadTeam } from '../../../agents/team-registry';
import { loadTasks } from '../../../activities/tasks';
import { planTrainEpisodes } from '../../../activities/training/plan';
import { createTrainingPoolActivities } from '../../../activities/training/pool';
import { loadEpisode, saveEpisodes } from '../../../activities/store/trajectories';
import { locateVersion } from '../../../activities/store/versions';
import { createRun } from '../../../activities/store/runs';
import type { episodeWorkflow } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';
import { workflowBundle } from '../../helpers';

const stripIds = (t: { turns: Array<Record<string, unknown>> }) =>
  t.turns.map(({ durationMs, toolCalls, ...rest }) => ({
    ...rest,
    toolCalls: (toolCalls as Array<Record<string, unknown>>).map(({ durationMs: _d, ...c }) => c),
  }));

describe('episodes against Temporal, the engine and Postgres', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });

  for (const teamName of ['math', 'research', 'chain']) {
    it(`${teamName}: durable and batched episodes give identical trajectories, stored and read back exactly`, async () => {
      const team = loadTeam(teamName);
      const pool = createTrainingPoolActivities({ sql: h.db.sql, engine: () => h.pool.getClient(), checkpoints: h.db.checkpoints });
      const ref = { team: teamName, teamOptions: {} };
      for (const runId of [`${teamName}-durable`, `${teamName}-batched`]) {
        await createRun(h.db.sql, { runId, team: teamName, config: {} });
        for (const model of Object.keys(team.models)) await new MockActivityEnvironment().run(pool.initModel, { ...ref, runId, model, seed: 3 });
      }
      // Same seed, different runs: the same initial weights.
      const model = Object.keys(team.models)[0]!;
      assert.equal(
        (await locateVersion(h.db.sql, `${teamName}-durable`, model, 0))!.sha256,
        (await locateVersion(h.db.sql, `${teamName}-batched`, model, 0))!.sha256,
      );

      const plan = (runId: string) => planTrainEpisodes(loadTasks(team), { runId, step: 0, seed: 3, groupsPerStep: 3, groupSize: 2 });
      const versions = Object.fromEntries(Object.keys(team.models).map((m) => [m, 0]));
      const durable = plan(`${teamName}-durable`);
      const results = await Promise.all(
        durable.map((spec) =>
          h.env.client.workflow.execute<typeof episodeWorkflow>('episodeWorkflow', {
            taskQueue: h.taskQueue,
            workflowId: spec.episodeId,
            args: [{ ...ref, runId: `${teamName}-durable`, step: 0, split: 'train', spec, versions }],
          }),
        ),
      );
      assert.deepEqual(
        results.map((r) => r.episodeId),
        durable.map((s) => s.episodeId),
      );

      const batched = plan(`${teamName}-batched`);
      const out = await new MockActivityEnvironment().run(pool.rolloutBatch, {
        ...ref,
        runId: `${teamName}-batched`,
        step: 0,
        split: 'train' as const,
        specs: batched,
        versions,
      });
      assert.deepEqual(out, { episodes: 6, skipped: 0, failed: 0 });
      // A retry skips what is stored.
      const again: { skipped: number } = await new MockActivityEnvironment().run(pool.rolloutBatch, {
        ...ref,
        runId: `${teamName}-batched`,
        step: 0,
        split: 'train' as const,
        specs: batched,
        versions,
      });
      assert.equal(again.skipped, 6);

      let generated = 0;
      for (let i = 0; i < durable.length; i++) {
        const d = (await loadEpisode(h.db.sql, durable[i]!.episodeId))!;
        const b = (await loadEpisode(h.db.sql, batched[i]!.episodeId))!;
        assert.equal(d.meta.mode, 'durable');
        assert.equal(b.meta.mode, 'batched');
        assert.deepEqual(stripIds(d.trajectory), stripIds(b.trajectory), `episode ${i}`);
        assert.deepEqual(d.rewards, b.rewards);
        assert.equal(d.trajectory.status, b.trajectory.status);
        assert.deepEqual(d.trajectory.outcome, b.trajectory.outcome);
        for (const t of d.trajectory.turns) {
          generated += t.lossMask.filter((m) => m === 1).length;
          // Log-probs of sampled tokens are real; tool output carries none.
          t.lossMask.forEach((m, k) => (m === 1 ? assert.ok(t.logprobs[k]! < 0) : assert.equal(t.logprobs[k], 0)));
        }
        // chain: one role, up to four turns, each with a per-turn component read back from the store
        if (teamName === 'chain') assert.deepEqual(new Set(d.rewards.map((r) => JSON.stringify(r.perTurn))), new Set(['["step"]']));
        else assert.equal(d.trajectory.turns.length, team.roles.length);
      }
      assert.ok(generated > 0);

      // Round trip: what is read back is written again unchanged under new ids (several in one
      // transaction, next to one already stored, which is skipped), and read back equal.
      const stored = await Promise.all(durable.slice(0, 2).map(async (spec) => (await loadEpisode(h.db.sql, spec.episodeId))!));
      const copies = stored.map((e) => ({
        ...e,
        meta: { ...e.meta, episodeId: `${e.meta.episodeId}-copy` },
        trajectory: { ...e.trajectory, episodeId: `${e.meta.episodeId}-copy` },
      }));
      const inserted = await saveEpisodes(h.db.sql, [...copies, stored[0]!]);
      assert.deepEqual([...inserted].sort(), copies.map((c) => c.meta.episodeId).sort());
      for (const [i, copy] of copies.entries()) {
        const back = (await loadEpisode(h.db.sql, copy.meta.episodeId))!;
        assert.deepEqual(back.trajectory, copy.trajectory);
        assert.deepEqual(back.rewards, stored[i]!.rewards);
        assert.equal(back.success, stored[i]!.success);
      }
      assert.equal((await saveEpisodes(h.db.sql, copies)).size, 0, 'a second save of the same ids writes nothing');
      assert.deepEqual((await loadEpisode(h.db.sql, copies[0]!.meta.episodeId))!.trajectory.turns.length, copies[0]!.trajectory.turns.length);

      // The durable episodes' histories replay against the current workflow code.
      for (const spec of durable.slice(0, 2)) {
        const history = await h.env.client.workflow.getHandle(spec.episodeId).fetchHistory();
        await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, spec.episodeId);
      }
    });
  }
});
