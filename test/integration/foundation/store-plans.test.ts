/**
 * The store's hot reads do not depend on statistics: on tables with many rows
 * that were never ANALYZEd (autovacuum off), the queries that read a step's
 * episodes for its update probe indexes instead of scanning the child tables.
 * That the tables really lack statistics is checked (reltuples < 0). The old
 * query shape (`episode_id IN (ids)`) is only reported: its plan without
 * statistics varies with the server (a full scan of turns where it was slow).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { episodeQueries, loadStepEpisodes, stepEpisodes } from '../../../activities/store/trajectories';
import type { Sql } from '../../../infra/db';
import { createTestDatabase, type TestDatabase } from '../../helpers';

const EPISODES = 40_000; // 40 runs x 8 steps x 128 episodes
const TABLES = ['episodes', 'turns', 'tool_calls', 'rewards'];

let db: TestDatabase;

before(async () => {
  db = await createTestDatabase();
  const sql = db.sql;
  for (const t of TABLES) await sql.unsafe(`ALTER TABLE ${t} SET (autovacuum_enabled = false)`);
  await sql`INSERT INTO runs (run_id, team, config) SELECT 'r' || i, 'math', '{}' FROM generate_series(0, 39) i`;
  await sql`
    INSERT INTO episodes (episode_id, run_id, step, split, task_id, task, group_index, episode_index, seed, mode, status)
    SELECT 'r' || (i / 1024) || '/s' || ((i / 128) % 8) || '/e' || (i % 128), 'r' || (i / 1024), (i / 128) % 8, 'train',
           't' || (i % 16), '{}', (i % 128) / 8, i % 8, i, 'batched', 'completed'
    FROM generate_series(0, ${EPISODES - 1}) i`;
  await sql`
    INSERT INTO turns SELECT e.episode_id, k, 'solver', 'policy', 0, '{}', '{1,2,3,4,5,6,7,8}', '{1,2,3}', '{-0.1,-0.2,-0.3}', '{1,1,1}', 'max_tokens', 1
    FROM episodes e, generate_series(0, 1) k`;
  await sql`INSERT INTO tool_calls SELECT episode_id, 0, 0, 'calculator', '{}', '{}', NULL, 1 FROM episodes`;
  await sql`INSERT INTO rewards SELECT episode_id, k, 'solver', 'correct', 1 FROM episodes, generate_series(0, 1) k`;
});
after(async () => {
  await db?.drop();
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

/** Every node of the plan that `EXPLAIN (FORMAT JSON)` gives for a query, flattened. */
async function planOf(sql: Sql, query: { describe(): Promise<{ string: string }> }, params: unknown[]): Promise<PlanNode[]> {
  const { string } = await query.describe();
  const [row] = await sql.unsafe(`EXPLAIN (FORMAT JSON) ${string}`, params as never[]);
  const nodes: PlanNode[] = [];
  const walk = (n: PlanNode) => {
    nodes.push(n);
    for (const c of n.Plans ?? []) walk(c);
  };
  walk((row!['QUERY PLAN'] as Array<{ Plan: PlanNode }>)[0]!.Plan);
  return nodes;
}

const scans = (nodes: PlanNode[]) =>
  nodes.filter((n) => n['Relation Name']).map((n) => `${n['Node Type']} on ${n['Relation Name']}${n['Index Name'] ? ` using ${n['Index Name']}` : ''}`);

async function assertIndexedPlans(label: string) {
  const params = ['r7', 3, 'train'];
  const q = episodeQueries(db.sql, stepEpisodes(db.sql, 'r7', 3, 'train'));
  const expected: Record<string, string> = { episodes: 'episodes_run_step', turns: 'turns_pkey', calls: 'tool_calls_pkey', rewards: 'rewards_pkey' };
  for (const [name, build] of Object.entries(q)) {
    const nodes = await planOf(db.sql, build(), params);
    const seen = scans(nodes);
    assert.ok(!nodes.some((n) => n['Node Type'] === 'Seq Scan'), `${label}, ${name}: no sequential scan, got ${seen.join('; ')}`);
    assert.ok(
      nodes.some((n) => n['Index Name'] === expected[name]),
      `${label}, ${name}: uses ${expected[name]}, got ${seen.join('; ')}`,
    );
  }
}

test('without statistics, the reads of a step use the indexes', async (t) => {
  const stats = await db.sql`SELECT relname, reltuples FROM pg_class WHERE relname IN ${db.sql(TABLES)}`;
  for (const r of stats) assert.ok(Number(r.reltuples) < 0, `${r.relname} was never analyzed (reltuples ${r.reltuples})`);

  await assertIndexedPlans('no statistics');

  // The shape this replaced, on the same tables, for the record: without statistics its plan depends
  // on the table's size on disk and the server's version (a scan of all of turns where it was seen
  // slow, an index scan elsewhere), which is why the queries above no longer use it.
  const ids = (await db.sql`SELECT episode_id FROM episodes WHERE run_id = 'r7' AND step = 3`).map((r) => r.episode_id as string);
  assert.equal(ids.length, 128);
  const old = await planOf(db.sql, db.sql`SELECT * FROM turns WHERE episode_id IN ${db.sql(ids)} ORDER BY episode_id, turn_index`, ids);
  t.diagnostic(`old id-list shape: ${scans(old).join('; ')}`);

  // And what the queries return is the step, whole and in order.
  const episodes = await loadStepEpisodes(db.sql, 'r7', 3, 'train');
  assert.equal(episodes.length, 128);
  assert.deepEqual(
    episodes.map((e) => [e.meta.groupIndex, e.meta.episodeIndex]),
    Array.from({ length: 128 }, (_, i) => [Math.floor(i / 8), i % 8]),
  );
  for (const e of episodes) {
    assert.deepEqual(
      e.trajectory.turns.map((t) => [t.index, t.toolCalls.length]),
      [
        [0, 1],
        [1, 0],
      ],
    );
    assert.deepEqual(e.rewards, [
      { turn: 0, agent: 'solver', components: { correct: 1 } },
      { turn: 1, agent: 'solver', components: { correct: 1 } },
    ]);
  }
});
