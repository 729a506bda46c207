/**
 * Partial rollouts in an asynchronous run (k = 1, batched) against the real stack:
 * the run completes; carried episodes are continued by exactly one later rollout
 * (trained there or carried on, never both, none lost); an episode that finished
 * while its group did not is not run again; each generation was sampled by the
 * version the pipeline serves the rollout that made it, max(0, j − k) for rollout j
 * (read from the carried rows and the trained turns' token versions); the update's
 * staleness histogram counts each token at its own version; the rollout of step
 * t + 1 is scheduled before the update of step t completes; the same config and
 * seed give the same weights. With maxCarrySteps n, no trained token is more than
 * n + k versions older than the update's base version.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { trainingRun } from '../../../workflows';
import { listVersions } from '../../../activities/store/versions';
import { loadStepEpisodes, type StoredEpisode } from '../../../activities/store/trajectories';
import type { Generation } from '../../../activities/training/partial';
import type { PartialRolloutResult } from '../../../activities/store/carried';
import type { RunConfigInput } from '../../../schema/run-config';
import { checkRunBookkeeping, startHarness, type Harness } from '../../../testing/stack';

const STEPS = 8;
const K = 1;
const base = {
  team: 'chain',
  teamOptions: { longTail: 0.3 },
  steps: STEPS,
  groupsPerStep: 3,
  groupSize: 2,
  evalEvery: 0,
  evalTasks: 4,
  seed: 5,
  staleness: K,
  partialRollouts: { overProvision: 2, minFinished: 1 },
} satisfies RunConfigInput;

/** The version serving rollout j: version n is the one committed by step n − 1, so this is max(0, j − k). */
const servedAt = (j: number) => Math.max(0, j - K);

/** Versions of an episode's sampled tokens (loss mask 1), in order over its turns. */
const sampledVersions = (e: StoredEpisode) =>
  e.trajectory.turns.flatMap((turn) => turn.lossMask.flatMap((m, i) => (m === 1 ? [turn.tokenVersions?.[i] ?? turn.version] : [])));

describe('partial rollouts with staleness k = 1 (batched)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });
  const run = (runId: string, extra: Partial<RunConfigInput> = {}) =>
    h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [{ ...base, ...extra }] });

  it('continues each carried episode in exactly one later rollout, every token under the version its rollout served', async () => {
    const runId = 'partial-stale-chain';
    const summary = await run(runId);
    assert.equal(summary.status, 'completed');
    assert.deepEqual(summary.versions, { policy: STEPS });
    await checkRunBookkeeping(h, runId, STEPS, ['adder'], ['policy']);

    const carriedRows = (
      await h.db.sql`
      SELECT into_step, episode_id, from_step, finished, generations FROM carried_episodes WHERE run_id = ${runId} ORDER BY episode_id, into_step`
    ).map((r) => ({
      intoStep: r.into_step as number,
      id: r.episode_id as string,
      fromStep: r.from_step as number,
      finished: r.finished as StoredEpisode | null,
      generations: r.generations as Generation[],
    }));
    assert.ok(carriedRows.length > 0, 'episodes were carried');
    const rowsOf = new Map<string, typeof carriedRows>();
    for (const r of carriedRows) rowsOf.set(r.id, [...(rowsOf.get(r.id) ?? []), r]);

    const trainedAt = new Map<string, number>();
    const trained = new Map<string, StoredEpisode>();
    for (let t = 0; t < STEPS; t++) {
      const episodes = await loadStepEpisodes(h.db.sql, runId, t, 'train');
      const groups = new Set(episodes.map((e) => e.meta.groupIndex));
      assert.ok(groups.size >= base.partialRollouts.minFinished, `step ${t}: at least minFinished whole groups (${groups.size})`);
      for (const e of episodes) {
        const id = e.meta.episodeId;
        assert.ok(!trainedAt.has(id), `${id} trained at steps ${trainedAt.get(id)} and ${t}`);
        trainedAt.set(id, t);
        trained.set(id, e);
      }
    }

    // Exactly once: an episode carried into step j is trained at j or carried into j + 1, not both, not neither.
    for (const [id, rows] of rowsOf) {
      const steps = rows.map((r) => r.intoStep);
      const from = rows[0]!.fromStep;
      assert.deepEqual(
        steps,
        Array.from({ length: steps.length }, (_, i) => from + 1 + i),
        `${id}: carried from step ${from} into each following step until trained`,
      );
      const last = steps.at(-1)!;
      if (last === STEPS) assert.ok(!trainedAt.has(id), `${id}: carried out of the last step and trained`);
      else assert.equal(trainedAt.get(id), last, `${id}: carried into step ${last}, trained at ${trainedAt.get(id)}`);
    }
    const ids = await h.db.sql`
      SELECT DISTINCT episode_id FROM (
        SELECT episode_id FROM episodes WHERE run_id = ${runId} AND split = 'train'
        UNION ALL SELECT episode_id FROM carried_episodes WHERE run_id = ${runId}) x`;
    const leftOver = [...rowsOf.values()].filter((rows) => rows.at(-1)!.intoStep === STEPS).length;
    assert.equal(ids.length, trainedAt.size + leftOver, 'every episode ever planned is trained once or still carried');

    // Each generation under the version serving the rollout that made it; a finished episode is not run again.
    let continued = 0;
    let mixed = 0;
    let waited = 0;
    for (const [id, e] of trained) {
      const rows = rowsOf.get(id) ?? [];
      const origin = Number(/:s(\d+):/.exec(id)![1]);
      const finishedRow = rows.find((r) => r.finished !== null);
      // the rollout that finished it: the step before its first finished carry, else the step that trained it
      const finishedIn = finishedRow ? finishedRow.intoStep - 1 : trainedAt.get(id)!;
      const expected: number[] = [];
      let before: Generation[] = [];
      for (const r of rows.filter((r) => r.finished === null)) {
        const gens = r.generations;
        assert.deepEqual(gens.slice(0, before.length), before, `${id}: generations carried into step ${r.intoStep} extend the earlier ones`);
        for (const g of gens.slice(before.length)) {
          assert.equal(g.version, servedAt(r.intoStep - 1), `${id}: a generation of rollout ${r.intoStep - 1}`);
          expected.push(...g.tokens.map(() => g.version));
        }
        before = gens;
      }
      const versions = sampledVersions(e);
      assert.ok(versions.length >= expected.length, `${id}: ${versions.length} sampled tokens, ${expected.length} carried`);
      while (expected.length < versions.length) expected.push(servedAt(finishedIn));
      assert.deepEqual(versions, expected, `${id} (planned at step ${origin}, finished in rollout ${finishedIn}): token versions`);
      if (finishedRow) {
        waited++;
        // every later carry and the trained episode hold the trajectory it finished with
        const done = finishedRow.finished!;
        for (const r of rows.filter((r) => r.intoStep > finishedRow.intoStep))
          assert.deepEqual(r.finished!.trajectory.turns, done.trajectory.turns, `${id}: finished once`);
        assert.deepEqual(
          e.trajectory.turns.map((turn) => turn.responseTokens),
          done.trajectory.turns.map((turn) => turn.responseTokens),
          `${id}: trained as it finished`,
        );
      }
      if (origin < trainedAt.get(id)!) continued++;
      if (new Set(versions).size > 1) mixed++;
    }
    assert.ok(continued > 0, 'some carried episodes were continued and trained in a later step');
    assert.ok(mixed > 0, 'some trained episodes hold tokens of two versions');
    assert.ok(waited > 0, 'some episode finished and waited, carried, for the rest of its group');

    const results = (await h.db.sql`SELECT step, result FROM partial_rollouts WHERE run_id = ${runId} ORDER BY step`).map(
      (r) => r.result as PartialRolloutResult,
    );
    assert.equal(results.length, STEPS, 'one committed partial rollout per step');
    assert.ok(
      results.slice(1).some((r) => r.replayedTokens > 0),
      'carried generations served from the store',
    );
    const m = await h.db.sql`SELECT step, value FROM metrics WHERE run_id = ${runId} AND scope = 'team' AND name = 'partial.carriedEpisodes' ORDER BY step`;
    assert.deepEqual(
      m.map((r) => Number(r.value)),
      results.map((r) => r.carried),
      'partial.* metrics of each step',
    );

    // The update's staleness histogram: each trained token at its own lag, base version t at step t.
    for (let t = 0; t < STEPS; t++) {
      const episodes = (await loadStepEpisodes(h.db.sql, runId, t, 'train')).filter((e) => e.trajectory.status !== 'failed');
      const lags = new Map<number, number>();
      for (const v of episodes.flatMap(sampledVersions)) lags.set(t - v, (lags.get(t - v) ?? 0) + 1);
      const rows = await h.db.sql`SELECT name, value FROM metrics WHERE run_id = ${runId} AND step = ${t} AND kind = 'update' AND scope = 'policy'
        AND name LIKE 'staleness.tokens.%' ORDER BY name`;
      assert.deepEqual(
        new Map(rows.map((r) => [Number((r.name as string).slice('staleness.tokens.'.length)), Number(r.value)])),
        lags,
        `step ${t}: staleness histogram`,
      );
    }

    // The rollout of step t + 1 was scheduled before the update of step t completed (the overlap).
    const events = (await h.env.client.workflow.getHandle(runId).fetchHistory()).events ?? [];
    const scheduled = (type: string) =>
      events
        .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === type)
        .map((e) => ({
          id: Number(String(e.eventId)),
          step: JSON.parse(Buffer.from(e.activityTaskScheduledEventAttributes!.input!.payloads![0]!.data!).toString()).step as number,
        }));
    const updates = scheduled('updateModel');
    const rollouts = scheduled('rolloutPartial');
    assert.deepEqual(
      rollouts.map((r) => r.step),
      Array.from({ length: STEPS }, (_, i) => i),
      'one partial rollout per step, in order',
    );
    for (let t = 0; t + 1 < STEPS; t++) {
      const update = updates.find((u) => u.step === t)!;
      const completed = events.find((e) => Number(String(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1)) === update.id)!;
      const next = rollouts.find((r) => r.step === t + 1)!;
      assert.ok(next.id < Number(String(completed.eventId)), `rollout of step ${t + 1} (event ${next.id}) before update ${t} completed`);
    }
    note(
      `trained ${trainedAt.size}, continued from an earlier step ${continued}, mixing versions ${mixed}, finished and waited for its group ${waited}, left carried ${leftOver}`,
    );
  });

  it('the same config and seed give the same weights', async () => {
    await run('partial-stale-chain-again');
    const weights = async (id: string) => (await listVersions(h.db.sql, id)).map((v) => `${v.model}@${v.version}:${v.sha256}`);
    assert.deepEqual(await weights('partial-stale-chain-again'), await weights('partial-stale-chain'));
  });

  it('maxCarrySteps 2: no trained token is more than 2 + k versions old, held groups are trained at the bound', async () => {
    const runId = 'partial-stale-chain-bounded';
    const n = 2;
    const [unbounded] = await h.db.sql`SELECT max(into_step - from_step)::int AS age FROM carried_episodes WHERE run_id = 'partial-stale-chain'`;
    assert.ok(unbounded!.age > n, `the unbounded run's oldest carried episode is ${unbounded!.age} steps old`);
    const summary = await run(runId, { partialRollouts: { ...base.partialRollouts, maxCarrySteps: n } });
    assert.equal(summary.status, 'completed');
    await checkRunBookkeeping(h, runId, STEPS, ['adder'], ['policy']);
    const trainedAt = new Map<string, number>();
    let oldest = 0;
    for (let t = 0; t < STEPS; t++)
      for (const e of await loadStepEpisodes(h.db.sql, runId, t, 'train')) {
        trainedAt.set(e.meta.episodeId, t);
        const origin = Number(/:s(\d+):/.exec(e.meta.episodeId)![1]);
        assert.ok(t - origin <= n, `${e.meta.episodeId} planned at step ${origin}, trained at step ${t}`);
        // the update of step t has base version t; rollout j sampled version max(0, j - k), j >= t - n
        for (const v of sampledVersions(e)) {
          assert.ok(t - v <= n + K && v >= servedAt(origin), `${e.meta.episodeId}: token version ${v} at step ${t}`);
          oldest = Math.max(oldest, t - v);
        }
      }
    const carried = await h.db.sql`SELECT into_step, from_step, episode_id FROM carried_episodes WHERE run_id = ${runId}`;
    assert.ok(carried.length > 0, 'episodes were carried');
    for (const r of carried) {
      assert.ok(r.into_step - r.from_step <= n, `${r.episode_id} carried into step ${r.into_step} from step ${r.from_step}`);
      if (r.into_step - r.from_step === n && r.into_step < STEPS) assert.equal(trainedAt.get(r.episode_id), r.into_step, `${r.episode_id}: held and trained`);
    }
    const results = (await h.db.sql`SELECT result FROM partial_rollouts WHERE run_id = ${runId} ORDER BY step`).map((r) => r.result as PartialRolloutResult);
    assert.ok(
      results.some((r) => r.heldGroups! > 0),
      'some rollout held a group at the bound',
    );
    note(
      `bounded (n = ${n}, k = ${K}): trained ${trainedAt.size}, oldest trained token lag ${oldest}, held groups per step ${results.map((r) => r.heldGroups).join(' ')}`,
    );
  });
});

function note(line: string) {
  process.stderr.write(`# ${line}\n`);
}
