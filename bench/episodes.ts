/**
 * Episodes per second for each bundled team in each rollout mode, and Temporal
 * history events per durable episode, against the real stack (Temporal dev
 * server, Postgres, CPU engine). Prints a table; not a test.
 *
 *   node --import tsx bench/episodes.ts [episodes per measurement, default 64]
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { loadTeam } from '../agents/team-registry';
import { createRun } from '../activities/store/runs';
import { loadTasks } from '../activities/tasks';
import { planTrainEpisodes } from '../activities/training/plan';
import { createTrainingPoolActivities } from '../activities/training/pool';
import type { episodeWorkflow } from '../workflows';
import { startHarness } from '../testing/stack';

async function main() {
  const n = Number(process.argv[2] ?? 64);
  console.log(`command: node --import tsx bench/episodes.ts ${n}`);
  const h = await startHarness();
  const pool = createTrainingPoolActivities({ sql: h.db.sql, engine: () => h.pool.getClient(), checkpoints: h.db.checkpoints });
  const rows: string[] = [];
  try {
    for (const teamName of ['math', 'research']) {
      const team = loadTeam(teamName);
      const ref = { team: teamName, teamOptions: {} };
      const versions = Object.fromEntries(Object.keys(team.models).map((m) => [m, 0]));
      for (const mode of ['batched', 'durable'] as const) {
        const runId = `bench-${teamName}-${mode}`;
        await createRun(h.db.sql, { runId, team: teamName, config: {} });
        for (const m of Object.keys(team.models)) await new MockActivityEnvironment().run(pool.initModel, { ...ref, runId, model: m, seed: 1 });
        const specs = planTrainEpisodes(loadTasks(team), { runId, step: 0, seed: 1, groupsPerStep: n / 8, groupSize: 8 });
        const t0 = performance.now();
        let events = 0;
        if (mode === 'batched') {
          await new MockActivityEnvironment().run(pool.rolloutBatch, { ...ref, runId, step: 0, split: 'train' as const, specs, versions });
        } else {
          await Promise.all(
            specs.map((spec) =>
              h.env.client.workflow.execute<typeof episodeWorkflow>('episodeWorkflow', {
                taskQueue: h.taskQueue,
                workflowId: spec.episodeId,
                args: [{ ...ref, runId, step: 0, split: 'train', spec, versions }],
              }),
            ),
          );
        }
        const seconds = (performance.now() - t0) / 1000;
        if (mode === 'durable') {
          for (const spec of specs.slice(0, 8)) events += (await h.env.client.workflow.getHandle(spec.episodeId).fetchHistory()).events!.length;
          events /= 8;
        }
        const turns = await h.db.sql`SELECT count(*)::int AS n FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${runId}`;
        rows.push(
          `| ${teamName} | ${mode} | ${n} | ${seconds.toFixed(2)} | ${(n / seconds).toFixed(1)} | ${((seconds * 1000) / turns[0]!.n).toFixed(2)} | ${mode === 'durable' ? events.toFixed(1) : '-'} |`,
        );
      }
    }
  } finally {
    await h.shutdown();
  }
  console.log('\n| team | mode | episodes | seconds | episodes/s | ms per turn | history events per episode |');
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(r);
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
