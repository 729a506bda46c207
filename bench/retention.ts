/**
 * Troupe's store bytes per 1,000 episodes with and without episode retention (issue #49), on the
 * real stack (Temporal dev server, PostgreSQL, CPU engine): trains one batched math run, measures
 * the episode tables (episodes, turns, tool_calls, rewards, gateway_calls; pg_total_relation_size
 * after VACUUM FULL, so both numbers count live rows only), prunes with a policy and measures
 * again. Prints a table; not a test.
 *
 *   node --import tsx bench/retention.ts [steps, default 8] [episodes per step, default 128] [keep steps, default 2] [sample, default 0.05]
 */
import type { Sql } from '../infra/db';
import { describeEpisodePolicy, planEpisodePrune, pruneEpisodes, type EpisodeRetentionPolicy } from '../activities/store/episode-retention';
import type { trainingRun } from '../workflows';
import { startHarness } from '../testing/stack';

const TABLES = ['episodes', 'turns', 'tool_calls', 'rewards', 'gateway_calls'];

async function storeBytes(sql: Sql): Promise<number> {
  for (const t of TABLES) await sql.unsafe(`VACUUM FULL ANALYZE ${t}`);
  const [r] = await sql`SELECT sum(pg_total_relation_size(t::regclass))::bigint AS bytes FROM unnest(${sql.array(TABLES)}::text[]) t`;
  return Number(r?.bytes ?? 0);
}

async function counts(sql: Sql, runId: string) {
  const [r] = await sql`
    SELECT count(*) FILTER (WHERE split = 'train')::int AS train, count(*) FILTER (WHERE split = 'eval')::int AS eval,
      (SELECT count(*)::int FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${runId}) AS turns
    FROM episodes WHERE run_id = ${runId}`;
  return { train: r?.train as number, eval: r?.eval as number, turns: r?.turns as number };
}

async function main() {
  const steps = Number(process.argv[2] ?? 8);
  const perStep = Number(process.argv[3] ?? 128);
  const policy: EpisodeRetentionPolicy = { keepSteps: Number(process.argv[4] ?? 2), sample: Number(process.argv[5] ?? 0.05) };
  console.log(`command: node --import tsx bench/retention.ts ${steps} ${perStep} ${policy.keepSteps} ${policy.sample}`);
  const h = await startHarness();
  try {
    const runId = 'bench-retention';
    const config = { team: 'math', steps, groupsPerStep: perStep / 8, groupSize: 8, evalEvery: 4, evalTasks: 16, seed: 49 };
    const t0 = performance.now();
    await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [config] });
    console.log(`trained ${steps} steps in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    const before = await counts(h.db.sql, runId);
    const bytesBefore = await storeBytes(h.db.sql);
    const t1 = performance.now();
    let pruned = 0;
    for (const plan of await planEpisodePrune(h.db.sql, policy)) pruned += (await pruneEpisodes(h.db.sql, plan, policy)).episodes;
    const pruneMs = performance.now() - t1;
    const after = await counts(h.db.sql, runId);
    const bytesAfter = await storeBytes(h.db.sql);
    const all = before.train + before.eval;
    const kb = (b: number) => `${(b / 1e6).toFixed(2)} MB`;
    console.log(
      `\npolicy: ${describeEpisodePolicy(policy)}; pruned ${pruned} training episodes in ${pruneMs.toFixed(0)} ms (${((pruneMs / pruned) * 1000).toFixed(0)} ms per 1,000)`,
    );
    console.log('\n| store | train episodes | eval episodes | turns | bytes (episode tables) | per 1,000 episodes trained |');
    console.log('|---|---|---|---|---|---|');
    console.log(`| no retention | ${before.train} | ${before.eval} | ${before.turns} | ${kb(bytesBefore)} | ${kb((bytesBefore / all) * 1000)} |`);
    console.log(`| after the policy | ${after.train} | ${after.eval} | ${after.turns} | ${kb(bytesAfter)} | ${kb((bytesAfter / all) * 1000)} |`);
    const kept = after.train + after.eval;
    console.log(`\nbytes per stored episode: ${(bytesBefore / all).toFixed(0)} before, ${(bytesAfter / kept).toFixed(0)} after (${kept} kept)`);
  } finally {
    await h.shutdown();
  }
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
