/**
 * A step's batch is built once per pool worker for all its models
 * (activities/training/step-batches.ts), is the batch buildStepBatch makes of
 * the stored episodes, and a retried update after the commit reads the
 * rewards back from the store (readStepRewards); a step stored whole by the
 * worker's rollouts is read ahead. Real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { readStepRewards, writeMetrics } from '../../../activities/store/metrics';
import { createRun } from '../../../activities/store/runs';
import { loadStepEpisodes, saveEpisodes, type StoredEpisode } from '../../../activities/store/trajectories';
import { buildStepBatch } from '../../../activities/training/batch';
import { stepBatches } from '../../../activities/training/step-batches';
import { agentRows } from '../../../activities/training/update-step';
import { mathTeam } from '../../../examples/teams/math';
import { connect } from '../../../infra/db';
import { checkAgainstTeam, parseRunConfig } from '../../../schema/run-config';
import { createTestDatabase, type TestDatabase } from '../../helpers';

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
});
after(async () => {
  await db?.drop();
});

/** A completed episode of step `step`: the solver answers, the verifier judges; rewards `correct` and `judged`. */
function episode(step: number, i: number, correct: number): StoredEpisode {
  const id = `r/s${step}/e${i}`;
  const turn = (index: number, agent: string) => ({
    index,
    agent,
    model: 'policy',
    version: 0,
    parents: index === 0 ? [] : [0],
    contextTokens: [1, 5 + i],
    responseTokens: [14, 2],
    logprobs: [-1, -2],
    lossMask: [1, 1] as Array<0 | 1>,
    stopReason: 'eos' as const,
    toolCalls: [],
    durationMs: 1,
  });
  return {
    meta: { episodeId: id, runId: 'r', step, split: 'train', taskId: `t${i}`, task: { a: 1, b: i }, groupIndex: 0, episodeIndex: i, seed: i, mode: 'batched' },
    trajectory: { episodeId: id, status: 'completed', turns: [turn(0, 'solver'), turn(1, 'verifier')] },
    rewards: [
      { turn: 0, agent: 'solver', components: { correct } },
      { turn: 1, agent: 'verifier', components: { judged: 1 - correct } },
    ],
    success: correct === 1,
  };
}

it("one build per step, shared by the step's models; a newer step pushes out the oldest", async () => {
  const config = parseRunConfig({ team: 'math' });
  await createRun(db.sql, { runId: 'r', team: 'math', config });
  for (const step of [0, 1, 2])
    await saveEpisodes(
      db.sql,
      [0, 1, 2, 3].map((i) => episode(step, i, i % 2)),
    );
  const settings = checkAgainstTeam(config, mathTeam());
  const batches = stepBatches(db.sql, { keep: 2 });

  // two models' updates of step 0 at the same time: one promise, one build
  const [a, b] = [batches.get('r', 0, settings), batches.get('r', 0, settings)];
  assert.equal(a, b, "the second update of the step shares the first one's build");
  const built = await a;
  // what each update built on its own before
  assert.deepEqual(built, buildStepBatch(await loadStepEpisodes(db.sql, 'r', 0, 'train'), settings));
  assert.equal(built.counts.episodes, 4);

  // other optimizer settings (a resume may change them) make another batch
  const lr = { ...settings, models: { policy: { ...settings.models.policy!, lr: settings.models.policy!.lr * 2 } } };
  assert.notEqual(batches.get('r', 0, lr), a);

  // kept: the last 2; step 0 was pushed out by (step 0, lr) and step 1
  await batches.get('r', 1, settings);
  const again = batches.get('r', 0, settings);
  assert.notEqual(again, a, 'step 0 is built again once pushed out');
  assert.deepEqual(await again, built);
});

it('a failed build is forgotten: the retry builds again', async () => {
  const settings = checkAgainstTeam(parseRunConfig({ team: 'math' }), mathTeam());
  // nothing listens on port 1: every load fails
  const down = connect('postgres://troupe@127.0.0.1:1/none', { max: 1, connectTimeout: 2 });
  try {
    const batches = stepBatches(down);
    const first = batches.get('r', 0, settings);
    await assert.rejects(first);
    const second = batches.get('r', 0, settings);
    assert.notEqual(second, first);
    await assert.rejects(second);
  } finally {
    await down.end({ timeout: 1 });
  }
});

it("a step stored whole by this worker's rollouts is read ahead with the run's last settings", async () => {
  const settings = checkAgainstTeam(parseRunConfig({ team: 'math' }), mathTeam());
  const told: Array<[string, number, Promise<unknown>]> = [];
  const batches = stepBatches(db.sql, { onReadAhead: (runId, step, batch) => told.push([runId, step, batch]) });
  {
    await batches.get('r', 0, settings); // the run's last update here: its settings are the read ahead's
    await saveEpisodes(
      db.sql,
      [0, 1, 2, 3].map((i) => episode(5, i, i % 2)),
    );
    // two parts of the step: the first alone reads nothing, the second completes it and reads
    assert.equal(batches.stored('r', 5, 2, 4, 4), undefined);
    await saveEpisodes(db.sql, [episode(5, 4, 1)]); // stored before the step is covered: the read sees it
    await batches.stored('r', 5, 0, 2, 4);
    await saveEpisodes(db.sql, [episode(5, 5, 1)]); // stored after: the read ahead does not
    // the batch read ahead is announced (scores-ahead.ts), and is the one the update gets
    assert.deepEqual(
      told.map(([r, st]) => [r, st]),
      [['r', 5]],
    );
    assert.equal(batches.get('r', 5, settings), told[0]?.[2]);
    const ahead = await batches.get('r', 5, settings);
    assert.equal(ahead.counts.episodes, 5);
    const now = await loadStepEpisodes(db.sql, 'r', 5, 'train');
    assert.equal(now.length, 6);
    assert.deepEqual(ahead, buildStepBatch(now.slice(0, 5), settings), 'the read ahead is the batch of the step as stored then');
    // another run's step, with no update seen here: its episodes are read ahead, the batch built when asked
    await createRun(db.sql, { runId: 'q', team: 'math', config: parseRunConfig({ team: 'math' }) });
    await saveEpisodes(
      db.sql,
      [0, 1].map((i) => ({ ...episode(0, i, 1), meta: { ...episode(0, i, 1).meta, runId: 'q', episodeId: `q/${i}` } })),
    );
    await batches.stored('q', 0, 0, 2, 2);
    assert.equal(told.length, 1, "a step read ahead before the run's first update here has no batch to announce");
    await saveEpisodes(db.sql, [{ ...episode(0, 2, 1), meta: { ...episode(0, 2, 1).meta, runId: 'q', episodeId: 'q/2' } }]);
    assert.equal((await batches.get('q', 0, settings)).counts.episodes, 2);
    // the episodes read ahead served one build: a second settings reads the step again (3 episodes now)
    const lr = { ...settings, models: { policy: { ...settings.models.policy!, lr: settings.models.policy!.lr * 2 } } };
    assert.equal((await batches.get('q', 0, lr)).counts.episodes, 3);
  }
});

it('readStepRewards gives back the rewards the committed updates wrote', async () => {
  const settings = checkAgainstTeam(parseRunConfig({ team: 'math' }), mathTeam());
  const batch = buildStepBatch(await loadStepEpisodes(db.sql, 'r', 2, 'train'), settings);
  await writeMetrics(
    db.sql,
    'r',
    agentRows(batch, ['solver', 'verifier']).map((r) => ({ ...r, step: 2 })),
  );
  const rewards = await readStepRewards(db.sql, 'r', 2);
  // two episodes of four correct: the solver's mean `correct` and the verifier's mean `judged` are 0.5
  assert.deepEqual(rewards, { solver: { correct: 0.5 }, verifier: { judged: 0.5 } });
  assert.deepEqual(rewards, batch.rewards);
});
