/**
 * Batched episodes on episode threads: a synchronous loop in an episode or its reward fails
 * that episode (naming its turn and the limit) while this thread keeps running, the thread's
 * other episodes come out as they would have, and an episode that yields but uses more than
 * its CPU budget fails at its next turn.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, it } from 'node:test';
import { EpisodeThreads, type ThreadEpisode } from '../../../activities/training/episode-threads';
import { scoredEpisode } from '../../../activities/training/control';
import type { GenerateCall, GenerateReply } from '../../../agents/episode';
import { runawayTeam, tokenizer } from './fixtures/runaway-team';

const threads = new EpisodeThreads(path.join(__dirname, 'fixtures', 'runaway-thread.ts'), 2);
after(() => threads.close());

/** Replies after a short real delay, so that episodes on one thread interleave. */
const generate = async (_call: GenerateCall): Promise<GenerateReply> => {
  await new Promise((r) => setTimeout(r, 5));
  return { tokens: [tokenizer.eosId], logprobs: [-1], stopReason: 'stop_token' };
};

const episode = (i: number, kind: string): ThreadEpisode => {
  const task = { id: `t${i}`, kind };
  return {
    team: { team: 'runaway', teamOptions: {} },
    input: { episodeId: `e${i}`, seed: 100 + i, task, versions: { policy: 0 } },
    meta: {
      episodeId: `e${i}`,
      runId: 'r',
      step: 0,
      split: 'train',
      mode: 'batched',
      groupIndex: 0,
      episodeIndex: i,
      seed: 100 + i,
      task,
      taskId: `t${i}`,
    } as never,
  };
};

const runAll = (kinds: string[]) =>
  Promise.all(
    kinds.map((kind, i) => {
      const e = episode(i, kind);
      return threads.run(e, { cpuMs: runawayTeam.limits.cpuMs, generate, stopped: (t) => scoredEpisode(runawayTeam, e.meta, t) });
    }),
  );

const summary = (e: Awaited<ReturnType<typeof runAll>>[number]) => ({
  status: e.trajectory.status,
  turns: e.trajectory.turns.length,
  outcome: e.trajectory.outcome,
  rewards: e.rewards,
});

it('a synchronous loop in an episode or a reward fails that episode; the others, on its thread too, come out the same', async () => {
  const kinds = ['ok', 'loop', 'ok', 'reward-loop', 'ok', 'ok'];
  const lag = monitorEventLoopDelay({ resolution: 10 });
  lag.enable();
  const t0 = Date.now();
  const got = await runAll(kinds);
  lag.disable();
  const loop = got[1]!.trajectory;
  assert.equal(loop.status, 'failed');
  assert.match(
    loop.error!,
    /^episode: its code ran \d+\.\d s without awaiting a turn or tool call, after its turn 1 \(model policy\) \(a synchronous loop\? team limits\.cpuMs: 1500 ms\); it was stopped$/,
  );
  assert.equal(got[3]!.trajectory.status, 'failed');
  assert.match(got[3]!.trajectory.error!, /after its turn 2 \(model policy\)/, 'the reward runs after the second turn');
  assert.ok(Date.now() - t0 < 20_000, 'stopped after about cpuMs, not never');
  // This thread was never blocked: the loops ran elsewhere.
  assert.ok(lag.max / 1e6 < 5000, `event loop delay ${lag.max / 1e6} ms`);
  // Episodes that shared a thread with a runaway ran again on a fresh one: the same as alone.
  const alone = await runAll(['ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
  for (const i of [0, 2, 4, 5]) {
    assert.deepEqual(summary(got[i]!), summary(alone[i]!), `episode ${i}`);
    assert.equal(got[i]!.trajectory.status, 'completed');
    assert.equal(got[i]!.trajectory.turns.length, 2);
  }
});

it('an episode that yields but uses more CPU than its limit fails at its next turn, naming the limit', async () => {
  const [greedy, ok] = await runAll(['greedy', 'ok']);
  assert.equal(greedy!.trajectory.status, 'failed');
  assert.match(greedy!.trajectory.error!, /^episode: its code ran \d+ ms in all, over its limit \(team limits\.cpuMs: 1500 ms\); it was stopped$/);
  // Stopped at the first turn past 1.5 s of its own time (≥ 400 ms between turns): its fifth at the latest.
  const turns = greedy!.trajectory.turns.length;
  assert.ok(turns >= 2 && turns <= 4, `${turns} turns`);
  assert.equal(ok!.trajectory.status, 'completed');
});

it('a generation that fails reaches the caller as the same error (its retry semantics intact)', async () => {
  class EngineDown extends Error {}
  const down = new EngineDown('engine unavailable');
  const e = episode(0, 'ok');
  await assert.rejects(
    threads.run(e, { cpuMs: 1500, generate: () => Promise.reject(down), stopped: (t) => scoredEpisode(runawayTeam, e.meta, t) }),
    (err) => err === down,
  );
});
