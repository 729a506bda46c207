/**
 * The gateway journal across a pool worker crash, on a stack of separate
 * processes (testing/chaos/stack.ts: real Temporal, real PostgreSQL, the real
 * pool worker and ONNX engine): a run of `chat-digits` (agent code on the real
 * `openai` client, two calls per episode) has its pool worker SIGKILLed while
 * the rollout is in flight, at a moment when some episodes have journaled
 * their first call and not their second. The retried rollout answers every
 * journaled call of the episodes not yet stored from the journal (counted in
 * `journalReplayedCalls`), never rewrites a journal row (so no completed call
 * was sampled again), and the run equals its uninterrupted twin on the same
 * stack: the same episodes, token for token, and the same weights.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { trainingRun } from '../../../workflows/training-run';
import { compareRuns, loadStoredRun } from '../../../testing/chaos/compare';
import { startChaosStack, type ChaosStack } from '../../../testing/chaos/stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const config = (runId: string) => ({
  team: 'chat-digits',
  runId,
  steps: 1,
  groupsPerStep: 16,
  groupSize: 8,
  rollout: 'batched' as const,
  evalEvery: 0,
  evalTasks: 4,
  seed: 9,
});

interface JournalRow {
  episode_id: string;
  call_index: number;
  tokens: number[];
  at: Date;
}

describe('gateway journal: pool worker killed mid-episode', () => {
  let stack: ChaosStack;
  before(async () => {
    stack = await startChaosStack();
  });
  after(async () => stack?.shutdown());

  const start = (runId: string) =>
    stack.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: stack.config.taskQueue, workflowId: runId, args: [config(runId)] });
  const journal = async (runId: string) =>
    (await stack.sql`SELECT episode_id, call_index, tokens, at FROM gateway_calls WHERE run_id = ${runId} ORDER BY episode_id, call_index`) as unknown as JournalRow[];

  it('replays journaled calls after the crash, samples none twice, and ends equal to the uninterrupted run', async () => {
    const twin = await (await start('gwj-twin')).result();
    assert.equal(twin.status, 'completed');

    const runId = 'gwj-chaos';
    const handle = await start(runId);
    // kill once an episode is mid-way: its first call journaled, its second not, nothing of it stored
    let partial = 0;
    const deadline = Date.now() + 120_000;
    for (;;) {
      assert.ok(Date.now() < deadline, 'no episode was seen mid-way within 2 minutes');
      const [row] = await stack.sql`
        SELECT count(*) FILTER (WHERE n = 1) AS partial FROM (
          SELECT g.episode_id, count(*) AS n FROM gateway_calls g
          WHERE g.run_id = ${runId} AND NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = g.episode_id)
          GROUP BY g.episode_id) x`;
      partial = Number(row!.partial);
      if (partial > 0) break;
      await sleep(5);
    }
    const killed = await stack.kill('pool-worker');
    assert.ok(killed !== undefined, 'the pool worker was running');
    await sleep(500); // writes the dead worker had in flight land or not, before the snapshot
    const atKill = await journal(runId);
    const storedAtKill = new Set((await stack.sql`SELECT episode_id FROM episodes WHERE run_id = ${runId}`).map((r) => r.episode_id as string));
    const pendingAtKill = atKill.filter((r) => !storedAtKill.has(r.episode_id));
    const midWay =
      new Set(pendingAtKill.map((r) => r.episode_id)).size - new Set(pendingAtKill.filter((r) => r.call_index === 1).map((r) => r.episode_id)).size;
    assert.ok(midWay > 0, 'at least one episode had its first call journaled and not its second');
    await stack.restart();

    const summary = await handle.result();
    assert.equal(summary.status, 'completed');

    // no journal row was written twice: each row of the kill's snapshot is still there, unchanged
    const final = await journal(runId);
    const byKey = new Map(final.map((r) => [`${r.episode_id}/${r.call_index}`, r]));
    for (const r of atKill) {
      const now = byKey.get(`${r.episode_id}/${r.call_index}`);
      assert.ok(now, `${r.episode_id} call ${r.call_index} is still journaled`);
      assert.deepEqual(now.tokens, r.tokens);
      assert.equal(now.at.getTime(), r.at.getTime(), `${r.episode_id} call ${r.call_index} was journaled once`);
    }
    // every call of the episodes left unstored at the kill was answered from the journal on the retry
    const [replayed] = await stack.sql`
      SELECT coalesce(sum(value), 0) AS n FROM metrics
      WHERE run_id = ${runId} AND step = 0 AND kind = 'train' AND scope = 'reader' AND name = 'journalReplayedCalls'`;
    const pendingIds = [...new Set(pendingAtKill.map((r) => r.episode_id))];
    const stored = await stack.sql`SELECT episode_id, split, counters FROM episodes WHERE episode_id IN ${stack.sql(pendingIds)}`;
    const perEpisode = stored.map((e) => [e.episode_id, (e.counters as Record<string, Record<string, number>> | null)?.reader?.journalReplayedCalls ?? 0]);
    const journaledOf = (id: string) => pendingAtKill.filter((r) => r.episode_id === id).length;
    assert.deepEqual(
      perEpisode.sort(),
      pendingIds.sort().map((id) => [id, journaledOf(id)]),
      'each unfinished episode replayed its journaled calls, sampling none of them again',
    );
    // the training step reports them (counters are stored with the episode and summed into the step's metrics)
    const train = stored.filter((e) => e.split === 'train').reduce((n, e) => n + journaledOf(e.episode_id as string), 0);
    assert.equal(Number(replayed!.n), train, 'the step reports the replayed calls of its train episodes');
    // the stored turns are the journaled samples
    const turns = await stack.sql`
      SELECT t.episode_id, t.turn_index, t.response_tokens FROM turns t JOIN episodes e USING (episode_id)
      WHERE e.run_id = ${runId}`;
    for (const t of turns) assert.deepEqual(byKey.get(`${t.episode_id}/${t.turn_index}`)?.tokens, t.response_tokens);
    assert.equal(final.length, turns.length, 'one journal row per gateway call');

    const cmp = compareRuns(await loadStoredRun(stack.sql, 'gwj-twin'), await loadStoredRun(stack.sql, runId), 1, ['policy']);
    assert.deepEqual(cmp.problems, []);
    const [count] = await stack.sql`SELECT count(*) AS n FROM episodes WHERE run_id = 'gwj-twin'`;
    assert.equal(cmp.episodesCompared, Number(count!.n), 'every episode (128 train, the final eval) compared');
    console.log(
      `gateway journal chaos: ${atKill.length} calls journaled at the kill, ${pendingAtKill.length} of episodes not yet stored (${midWay} episodes mid-way, ${stored.filter((e) => e.split === 'train').length} of them train); replayed ${Number(replayed!.n)} in step 0's train metrics`,
    );
  });
});
