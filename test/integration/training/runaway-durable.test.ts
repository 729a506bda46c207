// Durable episodes whose tools, rewards or episode function hang in a synchronous loop (a user's
// bug), as a user runs them (`troupe train --rollout durable` on a project): those episodes fail
// naming the tool, the rewards or the episode's last turn, the run completes, and a second run on
// the same stack trains as usual. With two episodes to a workflow (episodesPerWorkflow), the
// hung episode stops its whole workflow: the episodes it had stored keep their record, the others
// fail naming it, and the run completes.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { cliStack, troupe } from '../../helpers/cli';

const project = path.join(__dirname, 'fixtures', 'runaway-project');
const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

test(
  'a durable episode whose tool, reward or episode function hangs fails naming it; the run and the next one complete; so does a run of two episodes to a workflow',
  { timeout: 15 * 60_000 },
  async () => {
    const stack = await cliStack({ TROUPE_PROJECT: project });
    cleanups.push(stack.cleanup);
    const args = ['train', 'runaway', '--rollout', 'durable', '--steps', '1', '--groups', '8', '--group-size', '1', '--seed', '1', '--eval-every', '0'];
    const first = await troupe(args, stack.env);
    const out = first.stdout + first.stderr;
    assert.equal(first.code, 0, out);
    assert.match(out, /run runaway-\S+ \(runaway\) completed after 1 steps/);
    const runId = /run (runaway-\S+) \(runaway\) completed/.exec(out)![1]!;

    const episodes = await stack.db.sql<{ kind: string; status: string; error: string | null }[]>`
    SELECT task->>'kind' AS kind, status, error FROM episodes WHERE run_id = ${runId} ORDER BY episode_id`;
    assert.equal(episodes.length, 8, JSON.stringify(episodes));
    const of = (kind: string) => episodes.filter((e) => e.kind === kind);
    for (const e of of('reward-loop')) {
      assert.equal(e.status, 'failed');
      assert.match(
        e.error ?? '',
        /^rewards: its code ran \d+\.\d s without returning \(a synchronous loop\? scoring counts against team limits\.cpuMs: 1500 ms\); it was stopped$/,
      );
    }
    const toolFailed = of('tool-loop').filter((e) => e.status === 'failed');
    assert.ok(toolFailed.length > 0, `some tool-loop episode called its tool: ${JSON.stringify(of('tool-loop'))}`);
    for (const e of toolFailed)
      assert.match(
        e.error ?? '',
        /^episode: tool spin: its code ran \d+\.\d s without returning \(a synchronous loop\? tool timeoutMs: 500 ms\); it was stopped$/,
      );
    // the control worker's episode watch stops them (processes/episode-watch.ts); the run stores them as failed
    assert.ok(of('episode-loop').length > 0, JSON.stringify(episodes));
    for (const e of of('episode-loop')) {
      assert.equal(e.status, 'failed');
      assert.match(
        e.error ?? '',
        /^episode: its code ran 5 s without yielding after 1 agent turn \(a synchronous loop\? durable episode code may not block for more than 5 s\); it was stopped$/,
      );
    }
    for (const e of of('ok')) assert.equal(e.status, 'completed', JSON.stringify(e));

    const second = await troupe([...args, '--team-options', '{"calm":true}'], stack.env);
    const out2 = second.stdout + second.stderr;
    assert.equal(second.code, 0, out2);
    const runId2 = /run (runaway-\S+) \(runaway\) completed after 1 steps/.exec(out2)?.[1];
    assert.ok(runId2, out2);
    const statuses = await stack.db.sql<{ status: string; n: number }[]>`
    SELECT status, count(*)::int AS n FROM episodes WHERE run_id = ${runId2} GROUP BY status`;
    assert.deepEqual(
      statuses.filter((s) => s.status === 'failed'),
      [],
      `the second run's episodes: ${JSON.stringify(statuses)}`,
    );

    // Two episodes to a workflow: ok + tool-loop, reward-loop + episode-loop, twice; the ok episodes train.
    const configFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-runaway-')), 'grouped.json');
    fs.writeFileSync(configFile, JSON.stringify({ episodesPerWorkflow: 2 }));
    const third = await troupe([...args, '--config', configFile], stack.env);
    const out3 = third.stdout + third.stderr;
    assert.equal(third.code, 0, out3);
    const runId3 = /run (runaway-\S+) \(runaway\) completed after 1 steps/.exec(out3)?.[1];
    assert.ok(runId3, out3);
    const grouped = await stack.db.sql<{ kind: string; status: string; error: string | null; turns: number }[]>`
    SELECT task->>'kind' AS kind, status, error, (SELECT count(*)::int FROM turns t WHERE t.episode_id = e.episode_id) AS turns
    FROM episodes e WHERE run_id = ${runId3} ORDER BY episode_id`;
    assert.equal(grouped.length, 8, JSON.stringify(grouped));
    const stoppedWith =
      /^episode: its code ran 5 s without yielding (after \d+ agent turns? of the episodes in its workflow|before their first agent turns) \(a synchronous loop\? durable episode code may not block for more than 5 s\); it was stopped$/;
    const loops = grouped.filter((e) => e.kind === 'episode-loop');
    assert.ok(loops.length > 0, JSON.stringify(grouped));
    for (const e of loops) {
      assert.equal(e.status, 'failed');
      assert.match(e.error ?? '', stoppedWith);
    }
    // the others of its workflow: stored before it hung (their record kept, turns and all), or failed with it
    for (const e of grouped.filter((g) => g.kind !== 'episode-loop'))
      if (e.error === null || !stoppedWith.test(e.error)) assert.ok(e.turns > 0 && (e.kind !== 'ok' || e.status === 'completed'), JSON.stringify(e));
      else assert.equal(e.turns, 0, JSON.stringify(e));
  },
);
