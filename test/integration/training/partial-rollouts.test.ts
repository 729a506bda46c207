/**
 * Partial rollouts against the real stack (batched): a run on `chain` with a long
 * tail completes; each step trains on whole groups only; unfinished groups are
 * carried in the store and continue in the next step under the newer version
 * (their turns mix versions), so every planned episode is trained exactly once
 * or is still carried at the end, none is lost or repeated; carried generations
 * are served from the store, never sampled again; the same config gives the
 * same weights. With partialRollouts.maxCarrySteps, no episode is carried more
 * often and none is trained later than the bound allows: no trained token is
 * older than that, and the rollout waits for the held groups instead of
 * dropping them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { trainingRun } from '../../../workflows';
import { listVersions } from '../../../activities/store/versions';
import { loadStepEpisodes } from '../../../activities/store/trajectories';
import type { RunConfigInput } from '../../../schema/run-config';
import type { PartialRolloutResult } from '../../../activities/store/carried';
import { checkRunBookkeeping, startHarness, type Harness } from '../../../testing/stack';

const STEPS = 5;
const base = {
  team: 'chain',
  teamOptions: { longTail: 0.3 },
  steps: STEPS,
  groupsPerStep: 3,
  groupSize: 2,
  evalEvery: 0,
  evalTasks: 4,
  seed: 5,
  partialRollouts: { overProvision: 2, minFinished: 2 },
} satisfies RunConfigInput;

describe('partial rollouts (batched)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });
  const run = (runId: string, extra: Partial<RunConfigInput> = {}) =>
    h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [{ ...base, ...extra }] });

  it('trains whole groups, carries the rest under newer versions, loses and repeats nothing', async () => {
    const runId = 'partial-chain';
    const summary = await run(runId);
    assert.equal(summary.status, 'completed');
    assert.deepEqual(summary.versions, { policy: STEPS });
    await checkRunBookkeeping(h, runId, STEPS, ['adder'], ['policy']);

    const trainedIds = new Set<string>();
    let carriedTrained = 0;
    let mixedVersions = 0;
    for (let t = 0; t < STEPS; t++) {
      const episodes = await loadStepEpisodes(h.db.sql, runId, t, 'train');
      const groups = new Map<number, string[]>();
      for (const e of episodes) groups.set(e.meta.groupIndex, [...(groups.get(e.meta.groupIndex) ?? []), e.meta.episodeId]);
      assert.ok(groups.size >= 2, `step ${t}: at least minFinished whole groups (${groups.size})`);
      for (const [g, ids] of groups) {
        assert.equal(ids.length, base.groupSize, `step ${t} group ${g}: whole`);
        // a group's episodes come from one planned group: same origin step and group
        assert.equal(new Set(ids.map((id) => id.replace(/:e\d+$/, ''))).size, 1, `step ${t} group ${g}: one planned group (${ids.join(', ')})`);
      }
      for (const e of episodes) {
        assert.ok(!trainedIds.has(e.meta.episodeId), `${e.meta.episodeId} trained twice`);
        trainedIds.add(e.meta.episodeId);
        const origin = Number(/:s(\d+):/.exec(e.meta.episodeId)![1]);
        assert.ok(origin <= t);
        if (origin < t) carriedTrained++;
        for (const turn of e.trajectory.turns) {
          const versions = new Set(turn.tokenVersions ?? [turn.version]);
          for (const v of versions) assert.ok(v >= origin && v <= t, `${e.meta.episodeId} turn ${turn.index}: version ${v} within steps ${origin}-${t}`);
          if (turn.tokenVersions) mixedVersions++;
        }
        const used = e.trajectory.turns.map((turn) => turn.version);
        // an episode's turns never go back to an older version
        assert.deepEqual(
          used,
          [...used].sort((a, b) => a - b),
          `${e.meta.episodeId}: versions in order`,
        );
      }
    }
    assert.ok(carriedTrained > 0, 'some carried episodes finished and were trained');

    // Every planned episode is trained once or carried into the step after the last: none lost.
    const carriedRows = await h.db.sql`SELECT into_step, episode_id, from_step, finished IS NOT NULL AS done FROM carried_episodes WHERE run_id = ${runId}`;
    assert.ok(carriedRows.length > 0, 'episodes were carried');
    const leftOver = carriedRows.filter((r) => r.into_step === STEPS).map((r) => r.episode_id as string);
    for (const id of leftOver) assert.ok(!trainedIds.has(id), `${id} is both trained and carried out of the last step`);
    const planned = await h.db.sql`SELECT step, result FROM partial_rollouts WHERE run_id = ${runId} ORDER BY step`;
    assert.deepEqual(
      planned.map((r) => r.step),
      Array.from({ length: STEPS }, (_, i) => i),
    );
    // Episodes planned by each step: ceil(3 x 2) groups in flight minus the groups carried in.
    const ids = await h.db.sql`
      SELECT DISTINCT episode_id FROM (
        SELECT episode_id FROM episodes WHERE run_id = ${runId} AND split = 'train'
        UNION ALL SELECT episode_id FROM carried_episodes WHERE run_id = ${runId}) x`;
    assert.equal(ids.length, trainedIds.size + leftOver.length, 'every episode ever planned is trained or still carried');
    // A carried episode that continued had its earlier generations served from the store.
    const results = planned.map((r) => r.result as PartialRolloutResult);
    assert.ok(
      results.slice(1).some((r) => r.replayedTokens > 0),
      'carried generations replayed',
    );
    for (const r of results) assert.ok(r.groups >= 2 && r.generatedTokens > 0);
    // the age of the oldest carried episode, from the carried rows themselves
    for (const [t, r] of results.entries()) {
      const ages = carriedRows.filter((c) => c.into_step === t + 1).map((c) => t + 1 - (c.from_step as number));
      assert.equal(r.carriedMaxAge, Math.max(0, ...ages), `step ${t}: carriedMaxAge`);
    }
    // The step metrics carry the rollout's counts (status and plot read them).
    const m = await h.db.sql`SELECT step, value FROM metrics WHERE run_id = ${runId} AND name = 'partial.carriedEpisodes' ORDER BY step`;
    assert.deepEqual(
      m.map((r) => Number(r.value)),
      results.map((r) => r.carried),
    );
    note(`trained ${trainedIds.size}, carried-then-trained ${carriedTrained}, turns with mixed versions ${mixedVersions}, left carried ${leftOver.length}`);
  });

  it('the same config and seed give the same weights and trajectories', async () => {
    await run('partial-chain-again');
    const weights = async (id: string) => (await listVersions(h.db.sql, id)).map((v) => `${v.model}@${v.version}:${v.sha256}`);
    assert.deepEqual(await weights('partial-chain-again'), await weights('partial-chain'));
    const carried = async (id: string) =>
      (await h.db.sql`SELECT into_step, episode_id, generations FROM carried_episodes WHERE run_id = ${id} ORDER BY into_step, episode_id`).map((r) => [
        r.into_step,
        (r.episode_id as string).replace(id, ''),
        JSON.stringify(r.generations),
      ]);
    assert.deepEqual(await carried('partial-chain-again'), await carried('partial-chain'));
  });

  it('maxCarrySteps 1: a carried group is trained in the next step, no trained token older than one step', async () => {
    const runId = 'partial-chain-bounded';
    const maxCarrySteps = 1;
    // the unbounded run (the first test's) carried some episode twice or more: the bound has something to bound
    const [unbounded] = await h.db.sql`SELECT max(into_step - from_step)::int AS age FROM carried_episodes WHERE run_id = 'partial-chain'`;
    assert.ok(unbounded!.age > maxCarrySteps, `the unbounded run's oldest carried episode is ${unbounded!.age} steps old`);

    const summary = await run(runId, { partialRollouts: { ...base.partialRollouts, maxCarrySteps } });
    assert.equal(summary.status, 'completed');
    assert.deepEqual(summary.versions, { policy: STEPS });
    await checkRunBookkeeping(h, runId, STEPS, ['adder'], ['policy']);

    const trainedAt = new Map<string, number>();
    const results = (await h.db.sql`SELECT step, result FROM partial_rollouts WHERE run_id = ${runId} ORDER BY step`).map(
      (r) => r.result as PartialRolloutResult,
    );
    assert.equal(results.length, STEPS);
    for (let t = 0; t < STEPS; t++) {
      let age = 0;
      for (const e of await loadStepEpisodes(h.db.sql, runId, t, 'train')) {
        trainedAt.set(e.meta.episodeId, t);
        const origin = Number(/:s(\d+):/.exec(e.meta.episodeId)![1]);
        age = Math.max(age, t - origin);
        assert.ok(t - origin <= maxCarrySteps, `${e.meta.episodeId} planned at step ${origin}, trained at step ${t}`);
        // staleness 0: rollout j samples version j, so the oldest token a step-t update sees is version t - maxCarrySteps
        for (const turn of e.trajectory.turns)
          for (const v of turn.tokenVersions ?? [turn.version])
            assert.ok(v >= t - maxCarrySteps && v <= t, `${e.meta.episodeId} turn ${turn.index}: token version ${v} at step ${t}`);
      }
      assert.equal(results[t]!.trainedMaxAge, age, `step ${t}: trainedMaxAge`);
    }
    // From the store: nothing carried past the bound, and every group carried into a step (held there) is trained in it.
    const carriedRows = await h.db.sql`SELECT into_step, from_step, episode_id FROM carried_episodes WHERE run_id = ${runId}`;
    assert.ok(carriedRows.length > 0, 'episodes were carried');
    const heldGroups = new Map<number, Set<string>>();
    for (const r of carriedRows) {
      const id = r.episode_id as string;
      assert.ok(r.into_step - r.from_step <= maxCarrySteps, `${id} carried into step ${r.into_step} from step ${r.from_step}`);
      if (r.into_step === STEPS) continue; // carried out of the last step: no rollout continued it
      assert.equal(trainedAt.get(id), r.into_step, `${id} held and trained in step ${r.into_step}`);
      heldGroups.set(r.into_step, (heldGroups.get(r.into_step) ?? new Set()).add(id.replace(/:e\d+$/, '')));
    }
    for (const [t, r] of results.entries()) assert.equal(r.heldGroups, heldGroups.get(t)?.size ?? 0, `step ${t}: heldGroups`);
    assert.ok(
      results.some((r) => r.heldGroups! > 0),
      'some rollout held a group at the bound',
    );
    // none lost: every episode planned is trained once or still carried out of the last step
    const ids = await h.db.sql`
      SELECT DISTINCT episode_id FROM (
        SELECT episode_id FROM episodes WHERE run_id = ${runId} AND split = 'train'
        UNION ALL SELECT episode_id FROM carried_episodes WHERE run_id = ${runId}) x`;
    const leftOver = carriedRows.filter((r) => r.into_step === STEPS).length;
    assert.equal(ids.length, trainedAt.size + leftOver, 'every episode ever planned is trained or still carried');
    const m = await h.db.sql`SELECT step, value FROM metrics WHERE run_id = ${runId} AND name = 'partial.heldGroups' ORDER BY step`;
    assert.deepEqual(
      m.map((r) => Number(r.value)),
      results.map((r) => r.heldGroups),
    );
    note(
      `bounded: trained ${trainedAt.size}, held groups per step ${results.map((r) => r.heldGroups).join(' ')}, unbounded run's oldest carried ${unbounded!.age} steps`,
    );
  });
});

function note(line: string) {
  process.stderr.write(`# ${line}\n`);
}
