/**
 * A step whose update is skipped (here: every episode failed, so nothing is
 * trainable) still records each agent's rewards and truncated/failed shares,
 * so `troupe status` and the plot show why nothing was learned. Real
 * PostgreSQL; the engine is never reached on this path.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { createRun } from '../../../activities/store/runs';
import { episodeProblems, saveEpisodes, type StoredEpisode } from '../../../activities/store/trajectories';
import { createTrainingPoolActivities } from '../../../activities/training/pool';
import { mathTeam } from '../../../examples/teams/math';
import { checkAgainstTeam, parseRunConfig } from '../../../schema/run-config';
import { createTestDatabase, type TestDatabase } from '../../helpers';

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
});
after(async () => {
  await db?.drop();
});

function failedEpisode(i: number, agents: string[]): StoredEpisode {
  const turns = agents.map((agent, index) => ({
    index,
    agent,
    model: 'policy',
    version: 0,
    parents: index === 0 ? [] : [0],
    contextTokens: [1, 5],
    responseTokens: [14, 2],
    logprobs: [-1, -2],
    lossMask: [1, 1] as Array<0 | 1>,
    stopReason: 'max_tokens' as const,
    toolCalls: [],
    durationMs: 1,
  }));
  return {
    meta: {
      episodeId: `r/s0/e${i}`,
      runId: 'r',
      step: 0,
      split: 'train',
      taskId: `t${i}`,
      task: { a: 1, b: 2 },
      groupIndex: i,
      episodeIndex: 0,
      seed: i,
      mode: 'batched',
    },
    trajectory: { episodeId: `r/s0/e${i}`, status: 'failed', error: 'rewards.solver: boom', turns },
    rewards: [],
    success: null,
  };
}

it("a skipped update keeps the step's per-agent endings and episode lengths", async () => {
  const config = parseRunConfig({ team: 'math' });
  await createRun(db.sql, { runId: 'r', team: 'math', config });
  // The solver acted in all 4 episodes, the verifier in 3; every one failed (a reward threw).
  await saveEpisodes(db.sql, [
    failedEpisode(0, ['solver', 'verifier']),
    failedEpisode(1, ['solver', 'verifier']),
    failedEpisode(2, ['solver', 'verifier']),
    failedEpisode(3, ['solver']),
  ]);
  const pool = createTrainingPoolActivities({
    sql: db.sql,
    engine: () => assert.fail('the engine is not needed for a skipped update'),
    checkpoints: db.checkpoints,
  });
  const res = await pool.updateModel({
    team: 'math',
    teamOptions: {},
    runId: 'r',
    step: 0,
    model: 'policy',
    baseVersion: 0,
    settings: checkAgainstTeam(config, mathTeam()),
    nonFinite: 'skip',
    rollout: { seconds: 1, episodes: 4, failed: 4 },
  });
  assert.equal(res.skipped, 'no trainable tokens');
  const rows = await db.sql`SELECT scope, name, value FROM metrics WHERE run_id = 'r' AND step = 0 AND kind = 'train' ORDER BY scope, name`;
  // Each agent took one turn of two tokens per episode it acted in.
  assert.deepEqual(
    rows.map((r) => ({ ...r })),
    [
      { scope: 'solver', name: 'episodeTokens', value: 2 },
      { scope: 'solver', name: 'episodeTurns', value: 1 },
      { scope: 'solver', name: 'failedShare', value: 1 },
      { scope: 'solver', name: 'truncatedShare', value: 0 },
      { scope: 'verifier', name: 'episodeTokens', value: 2 },
      { scope: 'verifier', name: 'episodeTurns', value: 1 },
      { scope: 'verifier', name: 'failedShare', value: 1 },
      { scope: 'verifier', name: 'truncatedShare', value: 0 },
    ],
  );
  const [event] = await db.sql`SELECT kind FROM run_events WHERE run_id = 'r'`;
  assert.equal(event!.kind, 'update-skipped');
});

it('episodeProblems: what `troupe train`/`status` show for such a run: failed and empty episodes, the most common errors, skipped updates', async () => {
  // One more step: an episode that ended without any agent turn, and one that failed with another error.
  const empty = failedEpisode(4, []);
  const other = failedEpisode(5, ['solver']);
  await saveEpisodes(db.sql, [
    { ...empty, meta: { ...empty.meta, episodeId: 'r/s1/e4', step: 1 }, trajectory: { episodeId: 'r/s1/e4', status: 'completed', turns: [] } },
    {
      ...other,
      meta: { ...other.meta, episodeId: 'r/s1/e5', step: 1 },
      trajectory: { ...other.trajectory, episodeId: 'r/s1/e5', error: 'episode: tokenizer: character "{" is not in the vocabulary' },
    },
  ]);
  assert.deepEqual(await episodeProblems(db.sql, 'r', 3), {
    episodes: 6,
    failed: 5,
    empty: 1,
    errors: [
      { error: 'rewards.solver: boom', count: 4 },
      { error: 'episode: tokenizer: character "{" is not in the vocabulary', count: 1 },
    ],
    skippedUpdates: [{ model: 'policy', reason: 'no trainable tokens', steps: 1 }],
    stalledAgents: [],
  });
  assert.deepEqual(await episodeProblems(db.sql, 'no-such-run'), { episodes: 0, failed: 0, empty: 0, errors: [], skippedUpdates: [], stalledAgents: [] });
});
