/**
 * MCP servers as team tools (agents/mcp.ts), against a real stdio server written with the SDK
 * (fixtures/mcp-server.mjs): listing, calls, tool errors, a server that crashes, hangs or answers
 * out of schema (a tool error, then a fresh server), close with no process left, and a call
 * through `act()`.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import { agent, chatTemplate, defineTeam, generatedTasks, hermesSyntax, mcpServer, tinyLM, type McpServerOptions } from '../../../agents';
import { runEpisode, type ToolCallReply } from '../../../agents/episode';
import { executeTool } from '../../../activities/tools';
import { gone, teamWith, tokenizer } from './fixtures/mcp-team';

const fixture = path.join(__dirname, 'fixtures', 'mcp-server.mjs');
const options: McpServerOptions = {
  name: 'fixture',
  command: process.execPath,
  args: [fixture],
  tools: ['echo', 'add', 'fail', 'pid', 'crash', 'hang', 'garbage', 'missing'],
  timeoutMs: 3_000,
};

let n = 0;
const call = (team: ReturnType<typeof teamWith>, tool: string, input: unknown = {}): Promise<ToolCallReply> =>
  executeTool(team, { tool, input, episodeId: 'e1', turn: 0, call: n++, seed: 1 });

const pidOf = async (team: ReturnType<typeof teamWith>): Promise<number> => {
  const r = await call(team, 'pid');
  assert.ok(r.ok, JSON.stringify(r));
  return Number(r.rendered);
};

describe('mcpServer', () => {
  const server = mcpServer(options);
  const team = teamWith(server);
  after(() => server.close());

  it('refuses bad options, naming the field', () => {
    assert.throws(() => mcpServer({ ...options, command: undefined }), /mcpServer\(fixture\)\.command: give either command .* or url/);
    assert.throws(() => mcpServer({ ...options, url: 'ftp://x' }), /command: give either/);
    assert.throws(() => mcpServer({ name: 'x', url: 'ftp://x', tools: ['a'] }), /mcpServer\(x\)\.url: must be http: or https:/);
    assert.throws(() => mcpServer({ name: 'x', url: 'localhost:3000', tools: ['a'] }), /mcpServer\(x\)\.url: must be a URL, got/);
    assert.throws(() => mcpServer({ ...options, scope: 'process' as never }), /scope: must be 'worker' .* or 'episode'/);
    assert.throws(
      () => mcpServer({ ...options, tools: ['getTinyImage'] }),
      /tools\[0\]: "getTinyImage" is not a Troupe tool name .* tools: \{ my_name: "getTinyImage" \}/,
    );
    assert.throws(() => mcpServer({ ...options, tools: [] }), /tools: must name at least one tool/);
    assert.throws(() => mcpServer({ ...options, name: 'Bad Name' }), /mcpServer\.name: must match/);
    assert.throws(() => mcpServer({ ...options, timeoutMs: 0 }), /timeoutMs: must be a number > 0/);
  });

  it('refuses a declared inputSchema that is not an object schema', () => {
    assert.throws(
      () => mcpServer({ ...options, tools: { say: { tool: 'echo', inputSchema: { type: 'string' } } } }),
      /mcpServer\(fixture\)\.tools\.say\.inputSchema: must be a JSON Schema of an object/,
    );
  });

  it('names tools as the team says', () => {
    const s = mcpServer({ ...options, tools: { tiny: 'getTinyImage', say: { tool: 'echo', description: 'Says it.' } } });
    assert.deepEqual(
      s.tools.map((t) => [t.name, t.description]),
      [
        ['tiny', 'getTinyImage (MCP server fixture)'],
        ['say', 'Says it.'],
      ],
    );
  });

  it("lists the server's tools with their JSON schemas", async () => {
    const listed = await server.list();
    const echo = listed.find((t) => t.name === 'echo');
    assert.equal(echo?.description, 'Echoes its text.');
    assert.deepEqual((echo?.inputSchema as { properties: unknown }).properties, { text: { type: 'string' } });
    assert.deepEqual(listed.map((t) => t.name).sort(), ['add', 'crash', 'echo', 'fail', 'garbage', 'hang', 'linger', 'pid']);
  });

  it('calls a tool, and turns its errors into tool errors', async () => {
    const echo = await call(team, 'echo', { text: 'hi' });
    assert.ok(echo.ok);
    assert.deepEqual(echo.output, { content: [{ type: 'text', text: 'echo: hi' }] });
    assert.equal(echo.rendered, 'echo: hi');
    const add = await call(team, 'add', { a: 2, b: 3 });
    assert.equal(add.ok && add.rendered, '5');
    // isError: a tool error with the tool's text
    assert.deepEqual(await errorOf(team, 'fail'), 'fail: it failed on purpose');
    // input checked against the server's JSON schema before it is sent
    assert.match(await errorOf(team, 'add', { a: 'two', b: 3 }), /^add: invalid input: input\.a: Invalid input: expected number/);
    assert.match(await errorOf(team, 'echo', 'text'), /^echo: invalid input: /);
    // a declared tool the server does not have
    assert.match(
      await errorOf(team, 'missing'),
      /^missing: MCP server fixture has no tool "missing" \(it has: echo, add, fail, pid, linger, crash, hang, garbage\)/,
    );
  });

  it('a server that crashes mid-call gives a tool error; the next call starts another', async () => {
    const before = await pidOf(team);
    assert.match(await errorOf(team, 'crash'), /^crash: MCP server fixture: .*Connection closed.*fixture: crashing on purpose/);
    assert.ok(await gone(before));
    const now = await pidOf(team);
    assert.notEqual(now, before);
  });

  it('a server that hangs gives a tool error at the time limit, and is killed and replaced', async () => {
    const before = await pidOf(team);
    const started = performance.now();
    assert.equal(await errorOf(team, 'hang'), 'hang: timed out after 3000 ms');
    assert.ok(performance.now() - started < 5_000, "answered at the time limit, not at the SDK's 60 s");
    assert.ok(await gone(before), 'the hung server is killed');
    assert.notEqual(await pidOf(team), before);
  });

  it('a server that answers out of schema gives a tool error, and is replaced', async () => {
    const before = await pidOf(team);
    assert.match(await errorOf(team, 'garbage'), /^garbage: MCP server fixture: .*content/s);
    assert.ok(await gone(before));
    assert.notEqual(await pidOf(team), before);
  });

  it('close ends the server process; a later call starts another', async () => {
    const pid = await pidOf(team);
    await server.close();
    assert.ok(await gone(pid), 'no server left after close');
    const again = await pidOf(team);
    assert.notEqual(again, pid);
    await server.close();
    assert.ok(await gone(again));
  });

  it('a server that does not start is a tool error naming it', async () => {
    const broken = mcpServer({
      name: 'broken',
      command: process.execPath,
      args: ['-e', 'process.stderr.write("no such thing\\n"); process.exit(2)'],
      tools: ['echo'],
    });
    assert.match(await errorOf(teamWith(broken), 'echo', {}), /^echo: MCP server broken \(.*\) did not start: .*no such thing/);
  });

  it('an agent calls it through act()', async () => {
    const t = teamWith(server, {
      script: async (agents: { user: { act(m: string): Promise<{ text: string; toolCalls: readonly unknown[] }> } }) => {
        const turn = await agents.user.act('say hi');
        return { text: turn.text, calls: turn.toolCalls.length };
      },
    });
    const replies = ['<call echo>{"text":"hi"}</call>', 'done'];
    const traj = await runEpisode(
      t,
      { episodeId: 'e2', seed: 1, task: 0, versions: { policy: 0 } },
      {
        async generate(c) {
          const tokens = tokenizer.encode(replies.shift() ?? '');
          const last = tokens.at(-1);
          return { tokens, logprobs: tokens.map(() => -1), stopReason: last !== undefined && c.stopTokens.includes(last) ? 'stop_token' : 'max_tokens' };
        },
        callTool: (req) => executeTool(t, req),
        now: () => 0,
      },
    );
    assert.equal(traj.status, 'completed', traj.error);
    assert.deepEqual(traj.outcome, { text: '<call echo>{"text":"hi"}</call>echo: hidone', calls: 1 });
    await server.close();
  });

  it('an act() turn on a chat template shows the declared schema, and calls with hermesSyntax', async () => {
    // a small template that lists the tools as the Qwen/Hermes ones do (tojson of each definition)
    const template =
      '{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n{% endif %}' +
      '{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}';
    const declared = mcpServer({
      ...options,
      tools: {
        say: { tool: 'echo', description: 'Says it back.', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } },
        pid: 'pid',
      },
    });
    const t = defineTeam({
      name: 'mcp-chat',
      tokenizer,
      chatTemplate: chatTemplate(template, {}, ''),
      toolSyntax: hermesSyntax(),
      models: { policy: tinyLM({ tokenizer, contextWindow: 8, embedDim: 8, hiddenDim: 8 }) },
      agents: { user: agent({ model: 'policy', tools: declared.tools, maxTokens: 128, maxToolCalls: 2 }) },
      tasks: generatedTasks({ seed: 1, count: 2, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
      episode: async ({ agents }) => (await agents.user.act('say hi')).toolCalls.length,
      rewards: { user: () => ({ r: 0 }) },
      success: () => true,
    });
    const call = '<tool_call>{"name": "say", "arguments": {"text": "hi"}}</tool_call>';
    const replies = [call, 'done'];
    const contexts: string[] = [];
    try {
      const traj = await runEpisode(
        t,
        { episodeId: 'e3', seed: 1, task: 0, versions: { policy: 0 } },
        {
          async generate(c) {
            contexts.push(tokenizer.decode(c.context));
            const tokens = tokenizer.encode(replies.shift() ?? '');
            const last = tokens.at(-1);
            return { tokens, logprobs: tokens.map(() => -1), stopReason: last !== undefined && c.stopTokens.includes(last) ? 'stop_token' : 'max_tokens' };
          },
          callTool: (req) => executeTool(t, req),
          now: () => 0,
        },
      );
      assert.equal(traj.status, 'completed', traj.error);
      assert.equal(traj.outcome, 1);
      const first =
        '<tools>{"type": "function", "function": {"name": "say", "description": "Says it back.", "parameters": ' +
        '{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}\n' +
        '{"type": "function", "function": {"name": "pid", "description": "pid (MCP server fixture)", "parameters": {"type": "object"}}}\n' +
        '</tools>\nuser: say hi\nassistant: ';
      assert.equal(contexts[0], first);
      assert.equal(contexts[1], `${first}${call}\ntool: echo: hi\nassistant: `);
    } finally {
      await declared.close();
    }
  });
});

async function errorOf(team: ReturnType<typeof teamWith>, tool: string, input: unknown = {}): Promise<string> {
  const r = await call(team, tool, input);
  assert.ok(!r.ok, `expected a tool error, got ${JSON.stringify(r)}`);
  return r.error;
}
