/**
 * Durable episodes' tools and scoring in user code threads: a tool or reward in a synchronous
 * loop is stopped after its limit (the tool's timeoutMs, the team's cpuMs) and answered as
 * stopped, naming it, while this thread's event loop keeps running; calls after it (and at the
 * same time on other threads) are answered as usual.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, it } from 'node:test';
import { UserCodeThreads } from '../../../activities/training/user-code-threads';
import { runEpisode, type EpisodeIO, type ToolCallReply, type ToolCallRequest } from '../../../agents/episode';
import { chainTeam } from '../../../examples/teams/chain';
import { userCodeTeam } from './fixtures/user-code-team';

const threads = new UserCodeThreads(path.join(__dirname, 'fixtures', 'user-code-thread.ts'), 2);
after(() => threads.close());
const ref = { team: 'user-code', teamOptions: {} };
const call = (tool: string, expr = '2+3'): ToolCallRequest => ({ tool, input: { expr }, episodeId: 'e', turn: 0, call: 0, seed: 1 });

it('a tool in a synchronous loop is stopped after its timeout and answered as a fault naming it; other calls are answered', async () => {
  const lag = monitorEventLoopDelay({ resolution: 10 });
  lag.enable();
  const t0 = performance.now();
  const [spun, added] = await Promise.all([threads.callTool(userCodeTeam, ref, call('spin')), threads.callTool(userCodeTeam, ref, call('add'))]);
  lag.disable();
  assert.equal(spun.ok, false);
  assert.ok(!spun.ok && spun.fault !== undefined);
  assert.match(spun.error, /^tool spin: its code ran \d+\.\d s without returning \(a synchronous loop\? tool timeoutMs: 300 ms\); it was stopped$/);
  assert.deepEqual(added.ok && added.output, { value: 5 });
  const ms = performance.now() - t0;
  assert.ok(ms >= 2300, `not stopped before its timeout + grace (2.3 s): ${ms.toFixed(0)} ms`);
  assert.ok(Number(/ran (\d+\.\d) s/.exec(spun.error)![1]) >= 2.3, spun.error);
  // the loop never ends by itself: a lag well under the 2.3 s it ran shows it ran elsewhere
  assert.ok(lag.max / 1e6 < 2000, `this thread's event loop kept running (max delay ${(lag.max / 1e6).toFixed(0)} ms)`);
  // the stopped thread is replaced: later calls are answered
  const again = await threads.callTool(userCodeTeam, ref, call('add', '4+4'));
  assert.deepEqual(again.ok && again.output, { value: 8 });
});

it('a tool fault fails the episode naming the tool (a tool error would not), even if the episode function catches it', async () => {
  const team = chainTeam();
  const input = { episodeId: 'e', seed: 1, versions: { policy: 0 }, task: { start: 3, steps: [4, 2, 9, 1] } };
  // every turn writes '=' (a calculator call), then EOS
  const io = (reply: ToolCallReply): EpisodeIO => ({
    async generate(c) {
      const tokens = team.tokenizer.encode('=');
      return { tokens, logprobs: tokens.map(() => -1), stopReason: c.stopTokens.includes(tokens[0]!) ? 'stop_token' : 'max_tokens' };
    },
    callTool: async () => reply,
    now: () => 0,
  });
  const fault = 'tool calculator: its code ran 2.3 s without returning; it was stopped';
  const faulted = await runEpisode(team, input, io({ ok: false, error: fault, fault, durationMs: 2300 }));
  assert.equal(faulted.status, 'failed');
  assert.equal(faulted.error, `episode: ${fault}`);
  const caught = await runEpisode(
    { ...team, episode: async (ctx: Parameters<typeof team.episode>[0]) => team.episode(ctx).catch(() => ({ values: [] })) } as typeof team,
    input,
    io({ ok: false, error: fault, fault, durationMs: 2300 }),
  );
  assert.equal(caught.error, `episode: ${fault}`, 'caught by the episode function, it still fails the episode');
  const toolError = await runEpisode(team, input, io({ ok: false, error: 'calculator: bad', durationMs: 1 }));
  assert.notEqual(toolError.error, `episode: calculator: bad`, 'a plain tool error is data for the agent, not a failed episode');
});

it('rewards in a synchronous loop are stopped after the team’s cpuMs: the episode is stored failed, naming the rewards', async () => {
  // a real one-turn trajectory: rewards are scored per turn
  const trajectory = await runEpisode(
    userCodeTeam,
    { episodeId: 'e1', seed: 1, task: {}, versions: { policy: 0 } },
    {
      generate: async () => ({ tokens: [1], logprobs: [-1], stopReason: 'max_tokens' }),
      callTool: () => Promise.reject(new Error('no tool calls here')),
      now: () => 0,
    },
  );
  assert.equal(trajectory.status, 'completed');
  const meta = (kind: string) =>
    ({
      episodeId: `e-${kind}`,
      runId: 'r',
      step: 0,
      split: 'train',
      mode: 'durable',
      groupIndex: 0,
      episodeIndex: 0,
      seed: 1,
      task: { kind },
      taskId: kind,
    }) as never;
  const [looped, ok] = await Promise.all([
    threads.score(userCodeTeam, ref, meta('reward-loop'), trajectory),
    threads.score(userCodeTeam, ref, meta('ok'), trajectory),
  ]);
  assert.equal(looped.trajectory.status, 'failed');
  assert.match(
    looped.trajectory.error!,
    /^rewards: its code ran \d+\.\d s without returning \(a synchronous loop\? scoring counts against team limits\.cpuMs: 1000 ms\); it was stopped$/,
  );
  assert.deepEqual(looped.rewards, []);
  assert.equal(looped.success, null);
  assert.equal(ok.trajectory.status, 'completed');
  assert.equal(ok.success, true);
});
