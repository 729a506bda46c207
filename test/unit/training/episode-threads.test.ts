/**
 * Batched episodes on episode threads: a synchronous loop in an episode or its reward fails
 * that episode (naming its turn and the limit) while this thread keeps running, the thread's
 * other episodes come out as they would have, and an episode that yields but uses more than
 * its CPU budget fails at its next turn. A cancelled episode (its activity cancelled, its run
 * terminated) is rejected at once, its thread freed even from a synchronous loop, and one queued
 * behind a blocked episode never starts.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
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

it('a cancelled episode is rejected at once; a looping one loses its thread, a queued one never starts', async () => {
  const one = new EpisodeThreads(path.join(__dirname, 'fixtures', 'runaway-thread.ts'), 1);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-cancel-'));
  try {
    const ac = new AbortController();
    const marked = (i: number, kind: string) => {
      const e = episode(i, kind);
      const task = { ...(e.input.task as object), marker: path.join(dir, `started-${i}`) };
      return { ...e, input: { ...e.input, task } };
    };
    // a limit far above the test's time: only the cancellation can stop the loop
    const run = (e: ThreadEpisode, signal?: AbortSignal) =>
      one.run(e, { cpuMs: 600_000, generate, stopped: (t) => scoredEpisode(runawayTeam, e.meta, t), ...(signal ? { signal } : {}) });
    const looping = run(marked(0, 'loop'), ac.signal);
    looping.catch(() => undefined);
    // the new thread loads the team (seconds under tsx), then the episode plays a turn and loops, holding the only thread
    for (let i = 0; i < 300 && !fs.existsSync(path.join(dir, 'started-0')); i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(fs.existsSync(path.join(dir, 'started-0')), 'the looping episode started');
    await new Promise((r) => setTimeout(r, 300));
    const queued = run(marked(1, 'ok'), ac.signal);
    queued.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 200));

    const t0 = performance.now();
    ac.abort(new Error('activity cancelled'));
    await assert.rejects(looping, /activity cancelled/);
    await assert.rejects(queued, /activity cancelled/);
    const rejectedMs = performance.now() - t0;
    assert.ok(rejectedMs < 1000, `rejected after ${rejectedMs.toFixed(0)} ms`);

    // the loop is ended with its thread (after the grace and a check): this process's CPU falls to ~0
    await new Promise((r) => setTimeout(r, 1000));
    const cpu0 = process.cpuUsage();
    const w0 = performance.now();
    await new Promise((r) => setTimeout(r, 1000));
    const used = process.cpuUsage(cpu0);
    const share = (used.user + used.system) / 1000 / (performance.now() - w0);
    assert.ok(share < 0.2, `CPU share after the cancel: ${share.toFixed(2)} (a live loop would be ~1)`);
    assert.ok(!fs.existsSync(path.join(dir, 'started-1')), 'the queued episode of the cancelled activity never started');

    // the threads serve the next episodes as usual; an already-cancelled caller starts nothing
    const e = episode(2, 'ok');
    const next = await run(e);
    assert.equal(next.trajectory.status, 'completed');
    await assert.rejects(run(marked(3, 'ok'), AbortSignal.abort(new Error('gone'))), /gone/);
    assert.ok(!fs.existsSync(path.join(dir, 'started-3')));
  } finally {
    await one.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
