/**
 * mcpServer's scope 'episode' and onError 'fail-run' (agents/mcp.ts), against the real stdio
 * fixture server (fixtures/mcp-server.mjs, whose `pid` tool says which process answers): each
 * episode gets its own server process, kept for its calls, which exits when the episode ends,
 * in process, on a durable episode's tool threads and on a batched episode's thread; and a server
 * that crashes, hangs, answers out of schema or does not start fails the run (a non-retryable
 * failure naming the server, the tool and what went wrong) only when the team says so.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { mcpServer, type McpServerOptions } from '../../../agents';
import type { GenerateCall, GenerateReply, ToolCallReply, ToolCallRequest } from '../../../agents/episode';
import { episodeEnded } from '../../../agents/tool';
import { executeTool, failRunOn, TOOL_FAILS_RUN } from '../../../activities/tools';
import { scoredEpisode } from '../../../activities/training/control';
import { EpisodeThreads, type ThreadEpisode } from '../../../activities/training/episode-threads';
import { UserCodeThreads } from '../../../activities/training/user-code-threads';
import { fixtureTeam, gone, teamWith, tokenizer } from './fixtures/mcp-team';

const fixtures = path.join(__dirname, 'fixtures');
const base: Omit<McpServerOptions, 'name'> = {
  command: process.execPath,
  args: [path.join(fixtures, 'mcp-server.mjs')],
  tools: ['echo', 'pid', 'crash', 'hang', 'garbage', 'fail'],
  timeoutMs: 3_000,
};

let n = 0;
const req = (tool: string, episodeId: string, input: unknown = {}): ToolCallRequest => ({ tool, input, episodeId, turn: 0, call: n++, seed: 1 });
const call = (team: ReturnType<typeof teamWith>, tool: string, episodeId = 'e', input: unknown = {}): Promise<ToolCallReply> =>
  executeTool(team, req(tool, episodeId, input));
const pidOf = (r: ToolCallReply): number => {
  assert.ok(r.ok, JSON.stringify(r));
  return Number(r.rendered);
};
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** A policy that writes `<call TOOL>{}</call>` `calls` times, then ends its turn. */
function writes(tool: string, calls: number) {
  let made = 0;
  return async (c: GenerateCall): Promise<GenerateReply> => {
    await new Promise((r) => setTimeout(r, 5)); // episodes on one thread interleave
    const tokens = tokenizer.encode(made++ < calls ? `<call ${tool}>{}</call>` : 'done');
    const last = tokens.at(-1);
    return { tokens, logprobs: tokens.map(() => -1), stopReason: last !== undefined && c.stopTokens.includes(last) ? 'stop_token' : 'max_tokens' };
  };
}

const threadEpisode = (team: string, episodeId: string): ThreadEpisode => ({
  team: { team, teamOptions: {} },
  input: { episodeId, seed: 1, task: 0, versions: { policy: 0 } },
  meta: { episodeId, runId: 'r', step: 0, split: 'train', mode: 'batched', groupIndex: 0, episodeIndex: 0, seed: 1, task: 0, taskId: 't0' } as never,
});

describe('mcpServer options', () => {
  it('refuses a bad scope or onError, naming the field', () => {
    assert.throws(() => mcpServer({ ...base, name: 'x', scope: 'run' as never }), /mcpServer\(x\)\.scope: must be 'worker' .* or 'episode' .*got "run"/);
    assert.throws(
      () => mcpServer({ ...base, name: 'x', onError: 'ignore' as never }),
      /mcpServer\(x\)\.onError: must be 'tool-error' .* or 'fail-run' .*got "ignore"/,
    );
  });
});

describe("scope 'episode'", () => {
  it("each episode gets its own server, kept for its calls; an ended episode's server exits", async () => {
    const server = mcpServer({ ...base, name: 'per-episode', scope: 'episode' });
    const team = teamWith(server);
    try {
      const a = pidOf(await call(team, 'pid', 'a'));
      const b = pidOf(await call(team, 'pid', 'b'));
      assert.notEqual(a, b, 'two episodes, two server processes');
      assert.notEqual(a, process.pid);
      assert.equal(pidOf(await call(team, 'pid', 'a')), a, "an episode's calls reach its server");
      await episodeEnded('a');
      assert.ok(await gone(a), "the ended episode's server has exited");
      assert.equal(pidOf(await call(team, 'pid', 'b')), b, 'the other episode keeps its server');
      // a crash restarts the episode's server (its state is lost, as at scope 'worker')
      assert.ok(!(await call(team, 'crash', 'b')).ok);
      assert.ok(await gone(b));
      const b2 = pidOf(await call(team, 'pid', 'b'));
      assert.notEqual(b2, b);
      // list() starts a server of no episode and ends it
      assert.ok((await server.list()).some((t) => t.name === 'pid'));
      await server.close();
      assert.ok(await gone(b2), 'close ends every episode server');
    } finally {
      await server.close();
    }
  });

  it("a durable episode's calls reach one server across the tool threads; scoring it ends that server", async () => {
    const threads = new UserCodeThreads(path.join(fixtures, 'mcp-thread.ts'), 2);
    const ref = { team: 'mcp-episode', teamOptions: {} };
    const team = fixtureTeam('mcp-episode');
    const pid = async (episodeId: string) => pidOf(await threads.callTool(team, ref, req('pid', episodeId)));
    try {
      const seen: Record<string, Set<number>> = { a: new Set(), b: new Set() };
      for (let round = 0; round < 4; round++) {
        // both at once, in both orders: two threads, each free for either episode but for its server
        const order = round % 2 ? ['a', 'b', 'a'] : ['b', 'a', 'b'];
        const pids = await Promise.all(order.map(pid));
        order.forEach((e, i) => seen[e]!.add(pids[i]!));
      }
      assert.equal(seen.a!.size, 1, `episode a reached one server: ${[...seen.a!]}`);
      assert.equal(seen.b!.size, 1, `episode b reached one server: ${[...seen.b!]}`);
      const [a] = [...seen.a!];
      const [b] = [...seen.b!];
      assert.notEqual(a, b);
      threads.endEpisode('a');
      assert.ok(await gone(a!), "the scored episode's server has exited");
      assert.ok(alive(b!));
      assert.equal(await pid('b'), b);
      await threads.close();
      assert.ok(await gone(b!), 'closing the threads ends the servers of episodes not ended');
    } finally {
      await threads.close();
    }
  });

  it('batched episodes on an episode thread each get their own server, which exits when the episode ends', async () => {
    const threads = new EpisodeThreads(path.join(fixtures, 'mcp-episode-thread.ts'), 1);
    const team = fixtureTeam('mcp-episode');
    try {
      const run = (episodeId: string) => {
        const e = threadEpisode('mcp-episode', episodeId);
        return threads.run(e, { cpuMs: team.limits.cpuMs, generate: writes('pid', 2), stopped: (t) => scoredEpisode(team, e.meta, t) });
      };
      const done = await Promise.all([run('a'), run('b')]);
      const pids = done.map((e) => {
        assert.equal(e.trajectory.status, 'completed', e.trajectory.error);
        const answered = e.trajectory.outcome as string[];
        assert.equal(answered.length, 2, JSON.stringify(answered));
        assert.equal(answered[0], answered[1], 'both calls of the episode reached its server: one process');
        return Number(answered[0]);
      });
      assert.notEqual(pids[0], pids[1], 'two episodes on one thread, two server processes');
      for (const pid of pids) assert.ok(await gone(pid), `the server of a finished episode (${pid}) has exited`);
    } finally {
      await threads.close();
    }
  });
});

describe("onError 'fail-run'", () => {
  const server = mcpServer({ ...base, name: 'failing', onError: 'fail-run' });
  const team = teamWith(server);
  after(() => server.close());

  /** The reply's run failure, as failRunOn throws it: non-retryable, typed, with the reply's message. */
  const failure = (r: ToolCallReply): string => {
    assert.ok(!r.ok && r.failsRun !== undefined, `a reply that fails the run, got ${JSON.stringify(r)}`);
    let thrown: unknown;
    assert.throws(
      () => failRunOn(r),
      (e) => ((thrown = e), true),
    );
    assert.ok(thrown instanceof ApplicationFailure);
    assert.equal(thrown.nonRetryable, true);
    assert.equal(thrown.type, TOOL_FAILS_RUN);
    assert.equal(thrown.message, r.failsRun);
    return thrown.message;
  };

  it('a server that crashes, hangs or answers out of schema fails the run, naming the server, the tool and what went wrong', async () => {
    assert.match(
      failure(await call(team, 'crash')),
      /^MCP server failing, tool crash: the server exited mid-call \(.*Connection closed\) \(server stderr: fixture: crashing on purpose\) \(onError: 'fail-run'\)$/,
    );
    const hang = await call(team, 'hang');
    assert.equal(failure(hang), "MCP server failing, tool hang: no answer within 3000 ms (timeoutMs) (onError: 'fail-run')");
    assert.equal(!hang.ok && hang.error, 'hang: timed out after 3000 ms', 'the tool error is as before');
    assert.match(
      failure(await call(team, 'garbage')),
      /^MCP server failing, tool garbage: the server answered out of the protocol's schema \(.*content.*\); the server was killed \(onError: 'fail-run'\)$/s,
    );
    const broken = mcpServer({
      name: 'broken',
      command: process.execPath,
      args: ['-e', 'process.stderr.write("no such thing\\n"); process.exit(2)'],
      tools: ['echo'],
      onError: 'fail-run',
    });
    assert.match(
      failure(await call(teamWith(broken), 'echo')),
      /^MCP server broken, tool echo: the server \(.*\) did not start: .*no such thing.*\(onError: 'fail-run'\)$/s,
    );
  });

  it("the tool's own errors stay tool errors: an isError answer, input out of the server's schema", async () => {
    for (const [tool, input] of [
      ['fail', {}],
      ['echo', { text: 3 }],
    ] as const) {
      const r = await call(team, tool, 'e', input);
      assert.ok(!r.ok && r.failsRun === undefined, JSON.stringify(r));
      assert.equal(failRunOn(r), r);
    }
    const ok = await call(team, 'echo', 'e', { text: 'still here' });
    assert.equal(ok.ok && ok.rendered, 'echo: still here');
  });

  it('a batched episode on an episode thread whose server crashes rejects with the non-retryable failure', async () => {
    const threads = new EpisodeThreads(path.join(fixtures, 'mcp-episode-thread.ts'), 1);
    const failTeam = fixtureTeam('mcp-fail');
    try {
      const e = threadEpisode('mcp-fail', 'f');
      await assert.rejects(
        threads.run(e, { cpuMs: failTeam.limits.cpuMs, generate: writes('crash', 1), stopped: (t) => scoredEpisode(failTeam, e.meta, t) }),
        (err: unknown) => {
          assert.ok(err instanceof ApplicationFailure, String(err));
          assert.equal(err.nonRetryable, true);
          assert.equal(err.type, TOOL_FAILS_RUN);
          assert.match(err.message, /^MCP server failing, tool crash: the server exited mid-call .*\(onError: 'fail-run'\)$/);
          return true;
        },
      );
    } finally {
      await threads.close();
    }
  });
});
