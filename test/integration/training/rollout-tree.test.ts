/**
 * Durable rollouts through rollout nodes (workflows/rollout-node.ts) against the
 * real stack. A tiny rolloutNodeSize makes a test-sized step take the tree path:
 * the run starts only rollout nodes, each node starts its slice of episodes
 * under the plan's episode ids, and the run trains exactly as the flat run
 * with the same seed (same trajectories, same weights). Both histories replay.
 * So does a run with several episodes to a workflow (episodesPerWorkflow), flat
 * and through nodes.
 *
 * TROUPE_SCALE_TEST=1 adds a durable step of 10,000 episodes (20 nodes of 500),
 * printing its wall time and history sizes: too slow for CI on a small machine.
 * TROUPE_SCALE_GROUPS=G runs G groups of 8 instead of 1,250. `npm test` ends a
 * test file after 20 min (tools/test.js --test-timeout) whatever this test's own
 * timeout; TROUPE_TEST_TIMEOUT_S=7200 lifts that:
 *   TROUPE_SCALE_TEST=1 TROUPE_TEST_TIMEOUT_S=7200 npm test -- integration/training/rollout-tree
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Worker } from '@temporalio/worker';
import type { temporal } from '@temporalio/proto';
import { workflowBundle } from '../../helpers';
import type { trainingRun } from '../../../workflows';
import { loadStepEpisodes } from '../../../activities/store/trajectories';
import { listVersions } from '../../../activities/store/versions';
import { checkRunBookkeeping, startHarness, type Harness } from '../../../testing/stack';

type History = temporal.api.history.v1.IHistory;

/** The child workflows a history started: workflow type and id, in start order. */
const childrenOf = (history: History) =>
  history.events!.flatMap((e) => {
    const a = e.startChildWorkflowExecutionInitiatedEventAttributes;
    return a ? [{ type: a.workflowType!.name!, id: a.workflowId! }] : [];
  });

/** A stored episode's tokens, logprobs and rewards (what training reads), without timings. */
const trainable = (e: Awaited<ReturnType<typeof loadStepEpisodes>>[number]) => ({
  id: e.meta.episodeId.replace(/^[^:]+:/, ''),
  turns: e.trajectory.turns.map((t) => ({ agent: t.agent, context: t.contextTokens, response: t.responseTokens, logprobs: t.logprobs, lossMask: t.lossMask })),
  rewards: e.rewards,
  success: e.success,
});

describe('durable rollouts through rollout nodes', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });

  const config = { team: 'math', steps: 2, groupsPerStep: 3, groupSize: 2, rollout: 'durable', evalEvery: 1, evalTasks: 5, seed: 7 } as const;

  it('a step of 6 episodes at rolloutNodeSize 4 runs as nodes of 4 + 2 episodes and trains exactly as the flat run', async () => {
    const run = (runId: string, rolloutNodeSize: number) =>
      h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: runId,
        args: [{ ...config, runId, rolloutNodeSize }],
      });
    const [tree, flat] = await Promise.all([run('tree', 4), run('flat', 1000)]);
    for (const s of [tree, flat]) {
      assert.equal(s.status, 'completed');
      assert.equal(s.failedEpisodes, 0);
      assert.equal(s.initialEval?.episodes, 5);
    }
    await checkRunBookkeeping(h, 'tree', config.steps, ['solver', 'verifier'], ['policy']);

    // The tree run's own children are rollout nodes only: per step 2 (4 + 2 episodes), per eval 2 (4 + 1).
    const treeHistory = await h.env.client.workflow.getHandle('tree').fetchHistory();
    const nodes = childrenOf(treeHistory);
    assert.deepEqual(
      nodes.map((c) => c.id),
      [
        'tree:eval0:n0',
        'tree:eval0:n1',
        'tree:s0:n0',
        'tree:s0:n1',
        'tree:eval1:n0',
        'tree:eval1:n1',
        'tree:s1:n0',
        'tree:s1:n1',
        'tree:eval2:n0',
        'tree:eval2:n1',
      ],
    );
    assert.ok(nodes.every((c) => c.type === 'rolloutNode'));
    // Each node starts its slice of episodes under the plan's ids.
    const nodeHistory = async (id: string) => h.env.client.workflow.getHandle(id).fetchHistory();
    const s0n0 = await nodeHistory('tree:s0:n0');
    assert.deepEqual(
      childrenOf(s0n0).map((c) => c.id),
      ['tree:s0:g0:e0', 'tree:s0:g0:e1', 'tree:s0:g1:e0', 'tree:s0:g1:e1'],
    );
    assert.deepEqual(
      childrenOf(await nodeHistory('tree:s0:n1')).map((c) => c.id),
      ['tree:s0:g2:e0', 'tree:s0:g2:e1'],
    );
    assert.deepEqual(
      childrenOf(await nodeHistory('tree:eval0:n1')).map((c) => c.id),
      ['tree:eval0:t4'],
    );
    console.log(`rollout node tree:s0:n0: ${s0n0.events!.length} events for 4 episode children`);
    // The flat run (6 <= 1000) starts its episodes itself, as before.
    const flatChildren = childrenOf(await h.env.client.workflow.getHandle('flat').fetchHistory());
    assert.ok(flatChildren.every((c) => c.type === 'episodeWorkflow'));
    assert.equal(flatChildren.length, 3 * 5 + 2 * 6);

    // Same seeds, same trajectories and weights: the shape of the fan-out changes nothing the run trains on.
    for (let step = 0; step < config.steps; step++)
      for (const split of ['train', 'eval'] as const)
        assert.deepEqual(
          (await loadStepEpisodes(h.db.sql, 'tree', step, split)).map(trainable),
          (await loadStepEpisodes(h.db.sql, 'flat', step, split)).map(trainable),
          `step ${step} ${split}`,
        );
    const weights = async (runId: string) => (await listVersions(h.db.sql, runId)).map((v) => `${v.model}@${v.version}:${v.sha256}`);
    assert.deepEqual(await weights('tree'), await weights('flat'));
    assert.equal((await weights('tree')).length, config.steps + 1);

    const bundle = await workflowBundle();
    await Worker.runReplayHistory({ workflowBundle: bundle }, treeHistory, 'tree');
    await Worker.runReplayHistory({ workflowBundle: bundle }, s0n0, 'tree:s0:n0');
  });

  it('episodesPerWorkflow runs several episodes to a workflow, flat and through nodes, and trains exactly as one per workflow', async () => {
    const run = (runId: string, extra: { rolloutNodeSize?: number; episodesPerWorkflow?: number }) =>
      h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: runId,
        args: [{ ...config, runId, ...extra }],
      });
    const [one, grouped, groupedTree] = await Promise.all([
      run('one', {}),
      run('grouped', { episodesPerWorkflow: 4 }),
      run('grouped-tree', { rolloutNodeSize: 4, episodesPerWorkflow: 3 }),
    ]);
    for (const s of [one, grouped, groupedTree]) {
      assert.equal(s.status, 'completed');
      assert.equal(s.failedEpisodes, 0);
    }
    await checkRunBookkeeping(h, 'grouped', config.steps, ['solver', 'verifier'], ['policy']);
    // Flat: a step's 6 episodes in workflows of 4 + 2, an eval's 5 in 4 + 1, named by the plan indices they run.
    const groupedHistory = await h.env.client.workflow.getHandle('grouped').fetchHistory();
    const children = childrenOf(groupedHistory);
    assert.deepEqual(
      children.map((c) => c.id),
      [
        'grouped:eval0:e0-3',
        'grouped:eval0:e4-4',
        'grouped:s0:e0-3',
        'grouped:s0:e4-5',
        'grouped:eval1:e0-3',
        'grouped:eval1:e4-4',
        'grouped:s1:e0-3',
        'grouped:s1:e4-5',
        'grouped:eval2:e0-3',
        'grouped:eval2:e4-4',
      ],
    );
    assert.ok(children.every((c) => c.type === 'episodeGroupWorkflow'));
    // Through nodes of 4: each node runs its slice in workflows of at most 3.
    const nodeChildren = async (id: string) => childrenOf(await h.env.client.workflow.getHandle(id).fetchHistory()).map((c) => c.id);
    assert.deepEqual(await nodeChildren('grouped-tree:s0:n0'), ['grouped-tree:s0:e0-2', 'grouped-tree:s0:e3-3']);
    assert.deepEqual(await nodeChildren('grouped-tree:s0:n1'), ['grouped-tree:s0:e4-5']);

    // One workflow of 4 episodes: their turns are its activities, each episode looked up and stored once.
    const group = await h.env.client.workflow.getHandle('grouped:s0:e0-3').fetchHistory();
    const markers = group.events!.filter((e) => e.markerRecordedEventAttributes).length;
    assert.equal(markers, 2 * 4, 'an episodeSpec and a recordEpisode local activity per episode');
    const turns = group.events!.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'generateTurn').length;
    const stored = (await loadStepEpisodes(h.db.sql, 'grouped', 0, 'train')).slice(0, 4);
    assert.equal(stored.length, 4);
    assert.equal(
      turns,
      stored.reduce((n, e) => n + e.trajectory.turns.length, 0),
      'one generateTurn activity per stored turn',
    );

    for (const runId of ['grouped', 'grouped-tree'])
      for (let step = 0; step < config.steps; step++)
        for (const split of ['train', 'eval'] as const)
          assert.deepEqual(
            (await loadStepEpisodes(h.db.sql, runId, step, split)).map(trainable),
            (await loadStepEpisodes(h.db.sql, 'one', step, split)).map(trainable),
            `${runId} step ${step} ${split}`,
          );
    const weights = async (runId: string) => (await listVersions(h.db.sql, runId)).map((v) => `${v.model}@${v.version}:${v.sha256}`);
    assert.deepEqual(await weights('grouped'), await weights('one'));
    assert.deepEqual(await weights('grouped-tree'), await weights('one'));

    const bundle = await workflowBundle();
    await Worker.runReplayHistory({ workflowBundle: bundle }, groupedHistory, 'grouped');
    await Worker.runReplayHistory({ workflowBundle: bundle }, group, 'grouped:s0:e0-3');
  });

  it(
    'a durable step of 10,000 episodes completes (TROUPE_SCALE_TEST=1)',
    { skip: process.env.TROUPE_SCALE_TEST !== '1' && 'opt-in: TROUPE_SCALE_TEST=1', timeout: 3 * 60 * 60_000 },
    async () => {
      const groupsPerStep = Number(process.env.TROUPE_SCALE_GROUPS ?? 1250);
      const episodes = groupsPerStep * 8;
      const t0 = Date.now();
      // Progress, for a person watching a long run: episodes stored so far.
      const progress = setInterval(() => {
        void h.db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM episodes WHERE run_id = 'scale'`.then(([r]) =>
          console.log(`scale: ${r!.n} episodes stored after ${((Date.now() - t0) / 1000).toFixed(0)} s`),
        );
      }, 60_000);
      const summary = await h.env.client.workflow
        .execute<typeof trainingRun>('trainingRun', {
          taskQueue: h.taskQueue,
          workflowId: 'scale',
          args: [{ team: 'math', steps: 1, groupsPerStep, groupSize: 8, rollout: 'durable', evalEvery: 0, evalTasks: 2, seed: 1 }],
        })
        .finally(() => clearInterval(progress));
      const seconds = (Date.now() - t0) / 1000;
      assert.equal(summary.status, 'completed');
      assert.equal(summary.steps, 1);
      assert.equal(summary.versions.policy, 1);
      const [stored] = await h.db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM episodes WHERE run_id = 'scale' AND step = 0 AND split = 'train'`;
      assert.equal(stored!.n, episodes);
      const history = await h.env.client.workflow.getHandle('scale').fetchHistory();
      const nodes = childrenOf(history).filter((c) => c.type === 'rolloutNode');
      assert.equal(nodes.length, Math.ceil(episodes / 500));
      const nodeSizes = await Promise.all(
        nodes.map(async (n) => {
          const events = (await h.env.client.workflow.getHandle(n.id).fetchHistory()).events!;
          return { events: events.length, bytes: events.reduce((b, e) => b + JSON.stringify(e).length, 0) };
        }),
      );
      const maxEvents = Math.max(...nodeSizes.map((s) => s.events));
      const maxBytes = Math.max(...nodeSizes.map((s) => s.bytes));
      console.log(
        `scale: ${episodes} durable episodes in one step, ${nodes.length} rollout nodes; run ${seconds.toFixed(0)} s (initial eval, step, final eval); ` +
          `run history ${history.events!.length} events; largest node history ${maxEvents} events, ~${(maxBytes / 1024).toFixed(0)} KiB as JSON; failed episodes ${summary.failedEpisodes}`,
      );
      // Temporal warns at 10,240 events and stops a history at 51,200; a node stays well under both.
      assert.ok(maxEvents < 10_240, `largest node history ${maxEvents} events`);
    },
  );
});
