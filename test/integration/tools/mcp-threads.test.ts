/**
 * MCP tools where durable episodes run their tools: in the worker's user code threads
 * (activities/training/user-code-threads.ts). Each thread starts its own server; a server that
 * dies is restarted by the next call; closing the threads leaves no server process behind.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { it } from 'node:test';
import { UserCodeThreads } from '../../../activities/training/user-code-threads';
import type { ToolCallRequest } from '../../../agents/episode';
import { gone, mcpTeam } from './fixtures/mcp-team';

const ref = { team: 'mcp', teamOptions: {} };
let n = 0;
const req = (tool: string, input: unknown = {}): ToolCallRequest => ({ tool, input, episodeId: 'e', turn: 0, call: n++, seed: 1 });

it('a tool thread runs the server, restarts it after a crash, and closing the threads ends it', async () => {
  const threads = new UserCodeThreads(path.join(__dirname, 'fixtures', 'mcp-thread.ts'), 1);
  try {
    const echo = await threads.callTool(mcpTeam, ref, req('echo', { text: 'from a thread' }));
    assert.equal(echo.ok && echo.rendered, 'echo: from a thread');
    const pidOf = async () => {
      const r = await threads.callTool(mcpTeam, ref, req('pid'));
      assert.ok(r.ok, JSON.stringify(r));
      return Number(r.rendered);
    };
    const first = await pidOf();
    assert.notEqual(first, process.pid);
    assert.equal(await pidOf(), first, 'one server per thread, kept between calls');
    const crashed = await threads.callTool(mcpTeam, ref, req('crash'));
    assert.ok(!crashed.ok && crashed.fault === undefined, 'a tool error, not a fault: the episode goes on');
    assert.ok(await gone(first));
    const second = await pidOf();
    assert.notEqual(second, first);
    // past its stdin closing, a server would outlive its thread: the thread's owner ends it
    const lingering = await threads.callTool(mcpTeam, ref, req('linger'));
    assert.equal(lingering.ok && lingering.rendered, 'lingering');
    await threads.close();
    assert.ok(await gone(second), 'no server process left once its thread is ended');
  } finally {
    await threads.close();
  }
});
