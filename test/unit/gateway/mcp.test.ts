/**
 * The agent's team tools through the gateway's MCP server (gateway/mcp.ts, team-tools.ts), with
 * agent code on the real MCP SDK client (and the OpenAI Agents SDK's MCPServerStreamableHttp) at
 * `session.mcpURL`, the real gateway and the real tool runtime (executeTool): a TypeScript tool
 * and the tools of an MCP server written with the SDK (counting-mcp-server.mjs, which logs each
 * call it answers to a file). Generations are scripted; the journal is a map in the test (the
 * PostgreSQL journal: test/integration/tools/gateway-mcp.test.ts). Checked: listing (names,
 * schemas), results, tool errors, refused calls, the calls numbered and journaled with the
 * turns, a retry answered from the journal without calling a tool again, and a diverging call
 * restarting the episode clean.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { MCPServerStreamableHttp } from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';
import { defineTool, mcpServer, type AgentHandle } from '../../../agents';
import type { EpisodeIO, GenerateCall, JournaledToolCall, OpenAISession } from '../../../agents/episode';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { executeTool } from '../../../activities/tools';
import { openGatewaySessions } from '../../../gateway';
import { toolCallHash } from '../../../gateway/journal';
import { gatewayTeam, MapJournal, tokenizer } from './team';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gateway-mcp-'));
const callLog = path.join(dir, 'calls');
const serverCalls = () => (fs.existsSync(callLog) ? fs.readFileSync(callLog, 'utf8').split('\n').filter(Boolean) : []);
const MUL_SCHEMA = { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] };
const counting = mcpServer({
  name: 'counting',
  command: process.execPath,
  args: [path.join(__dirname, '..', '..', 'integration', 'tools', 'fixtures', 'counting-mcp-server.mjs')],
  env: { MCP_CALL_LOG: callLog },
  tools: { mul: { tool: 'mul', description: 'Multiplies two numbers.', inputSchema: MUL_SCHEMA }, refuse: 'refuse' },
});
const added: unknown[] = [];
const add = defineTool({
  name: 'add',
  description: 'Adds two numbers.',
  input: z.object({ a: z.number(), b: z.number() }),
  output: z.object({ sum: z.number() }),
  execute: async ({ a, b }) => {
    added.push({ a, b });
    return { sum: a + b };
  },
  render: ({ sum }) => `sum ${sum}`,
});

after(async () => {
  await counting.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function mcpClient(session: OpenAISession): Promise<Client> {
  const client = new Client({ name: 'agent-code', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(session.mcpURL), { requestInit: { headers: { Authorization: `Bearer ${session.apiKey}` } } }));
  return client;
}

/** The agent's code: lists its tools, calls them around one chat turn; `b` changes the first call. */
const agentCode =
  (b = 3) =>
  async ({ agents }: { agents: Record<'solver' | 'helper', AgentHandle> }) => {
    const client = await mcpClient(agents.solver.openai);
    try {
      const listed = (await client.listTools()).tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema }));
      const sum = await client.callTool({ name: 'add', arguments: { a: 2, b } });
      const bad = await client.callTool({ name: 'add', arguments: { a: 'two', b: 3 } });
      const unknown = await client.callTool({ name: 'nope', arguments: {} }).then(
        () => 'answered',
        (e: { code?: number; message?: string }) => `${e.code} ${e.message}`,
      );
      const shouted = await client.callTool({ name: 'shout', arguments: { text: 'hi' } });
      const openai = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
      const reply = (await openai.chat.completions.create({ model: 'policy', messages: [{ role: 'user', content: 'Go.' }] })).choices[0]?.message.content;
      const product = await client.callTool({ name: 'mul', arguments: { a: 6, b: 7 } });
      const refused = await client.callTool({ name: 'refuse', arguments: { why: 'no' } });
      return { listed, sum, bad, unknown, shouted, reply, product, refused };
    } finally {
      await client.close();
    }
  };

function io(generated: GenerateCall[], journal?: MapJournal): EpisodeIO {
  return {
    async generate(call) {
      generated.push(call);
      const tokens = [...tokenizer.encode('Done.'), tokenizer.eosId];
      return { tokens, logprobs: tokens.map(() => -0.5), stopReason: 'stop_token' };
    },
    callTool: (req) => executeTool(team(), req),
    now: () => 0,
    openSessions: openGatewaySessions,
    ...(journal ? { journal } : {}),
  };
}
// a tool whose input is no object: MCP's arguments are one, so it is not listed, and a call's arguments are refused
const shout = defineTool({ name: 'shout', description: 'Shouts.', input: z.string(), output: z.string(), execute: async (t) => t.toUpperCase() });
const team = (code: (ctx: { agents: Record<'solver' | 'helper', AgentHandle> }) => Promise<unknown> = agentCode()) =>
  gatewayTeam(code, 4, undefined, [add, ...counting.tools, shout]);
const input = (episodeId: string) => ({ episodeId, seed: 7, task: 0, versions: { policy: 0, other: 0 } });

describe("gateway MCP server: the agent's team tools", () => {
  it('lists the tools with their schemas, calls them, and journals each call with the turns', async () => {
    const journal = new MapJournal();
    const generated: GenerateCall[] = [];
    const traj = await runBatchedEpisode(team(), input('m'), io(generated, journal));
    assert.equal(traj.status, 'completed', traj.error);
    const out = traj.outcome as Awaited<ReturnType<ReturnType<typeof agentCode>>>;
    assert.deepEqual(out.listed, [
      {
        name: 'add',
        description: 'Adds two numbers.',
        inputSchema: {
          type: 'object',
          properties: { a: { type: 'number' }, b: { type: 'number' } },
          required: ['a', 'b'],
        },
      },
      { name: 'mul', description: 'Multiplies two numbers.', inputSchema: MUL_SCHEMA },
      { name: 'refuse', description: 'refuse (MCP server counting)', inputSchema: { type: 'object' } },
    ]);
    assert.deepEqual(out.sum, { content: [{ type: 'text', text: 'sum 5' }] });
    assert.equal(out.bad.isError, true);
    assert.match(JSON.stringify(out.bad.content), /add: invalid input: arguments\.a: /);
    assert.match(out.unknown, /^-32602 MCP error -32602: params\.name: agent solver has no tool "nope" \(its tools: add, mul, refuse, shout\)$/);
    assert.deepEqual(out.shouted, {
      content: [{ type: 'text', text: 'shout: invalid input: arguments: Invalid input: expected string, received object' }],
      isError: true,
    });
    assert.equal(out.reply, 'Done.');
    assert.deepEqual(out.product, { content: [{ type: 'text', text: '42' }] });
    assert.deepEqual(out.refused, { content: [{ type: 'text', text: 'refuse: refused: no' }], isError: true });
    assert.deepEqual(added, [{ a: 2, b: 3 }], 'bad arguments call nothing');
    assert.deepEqual(serverCalls(), ['{"name":"mul","args":{"a":6,"b":7}}', '{"name":"refuse","args":{"why":"no"}}']);

    // one sequence of calls: add (0), the turn (1), mul (2), refuse (3); the refused ones take no index
    const entries = journal.calls.get('m') ?? [];
    assert.deepEqual(
      entries.map((c) => [c.index, c.kind ?? 'turn', c.requestHash]),
      [
        [0, 'tool', toolCallHash('solver', 'add', { a: 2, b: 3 })],
        [1, 'turn', entries[1]?.requestHash],
        [2, 'tool', toolCallHash('solver', 'mul', { a: 6, b: 7 })],
        [3, 'tool', toolCallHash('solver', 'refuse', { why: 'no' })],
      ],
    );
    assert.deepEqual((entries[0] as JournaledToolCall).reply, {
      ok: true,
      output: { sum: 5 },
      rendered: 'sum 5',
      durationMs: (entries[0] as JournaledToolCall).reply.durationMs,
    });
    assert.equal(generated.length, 1);
    // the calls after the turn are recorded with it (the one before has no turn to go with)
    assert.deepEqual(
      traj.turns[0]?.toolCalls.map((c) => [c.index, c.tool, c.input, c.output, c.error]),
      [
        [0, 'mul', { a: 6, b: 7 }, { content: [{ type: 'text', text: '42' }] }, undefined],
        [1, 'refuse', { why: 'no' }, undefined, 'refuse: refused: no'],
      ],
    );
    assert.deepEqual(traj.counters?.solver, { gatewayToolCalls: 3, gatewayCalls: 1, retokenizedTurns: 0, unparsedToolCalls: 0 });

    // a retry of the whole episode: every call answered from the journal, no tool called, nothing sampled
    const again: GenerateCall[] = [];
    const replayed = await runBatchedEpisode(team(), input('m'), io(again, journal));
    assert.deepEqual(replayed.outcome, traj.outcome);
    assert.equal(again.length, 0);
    assert.equal(added.length, 1, 'the TypeScript tool was not called again');
    assert.equal(serverCalls().length, 2, 'the MCP server was not called again');
    assert.equal(replayed.counters?.solver?.journalReplayedCalls, 4);
    assert.deepEqual(replayed.turns, traj.turns);

    // an attempt that died after its turn: add and the turn replay, mul and refuse run live
    const partial = new MapJournal();
    partial.calls.set('m', entries.slice(0, 2));
    const resumed = await runBatchedEpisode(team(), input('m'), io([], partial));
    assert.deepEqual(resumed.outcome, traj.outcome);
    assert.equal(added.length, 1);
    assert.equal(serverCalls().length, 4, 'only the calls not journaled reach the server');
    assert.equal(resumed.counters?.solver?.journalReplayedCalls, 2);
    assert.equal(partial.calls.get('m')?.length, 4);
  });

  it('a tool call that differs from the journaled one restarts the episode clean, counted', async () => {
    const journal = new MapJournal();
    await runBatchedEpisode(team(), input('d'), io([], journal));
    const before = { added: added.length, server: serverCalls().length };
    const diverged = await runBatchedEpisode(team(agentCode(4)), input('d'), io([], journal));
    assert.equal(diverged.status, 'completed', diverged.error);
    assert.equal(journal.cleared, 1);
    assert.equal(diverged.counters?.solver?.journalRestarts, 1);
    assert.equal(diverged.counters?.solver?.journalReplayedCalls, undefined, 'the restart is all live');
    assert.deepEqual(added.slice(before.added), [{ a: 2, b: 4 }]);
    assert.equal(serverCalls().length, before.server + 2);
    assert.equal((journal.calls.get('d')?.[0] as JournaledToolCall).requestHash, toolCallHash('solver', 'add', { a: 2, b: 4 }));
  });

  it("serves the OpenAI Agents SDK's MCP client; refuses another episode's key", async () => {
    const traj = await runBatchedEpisode(
      team(async ({ agents }) => {
        const session = agents.solver.openai;
        const server = new MCPServerStreamableHttp({
          url: session.mcpURL,
          name: 'team',
          requestInit: { headers: { Authorization: `Bearer ${session.apiKey}` } },
        });
        await server.connect();
        try {
          const names = (await server.listTools()).map((t) => t.name);
          const result = await server.callTool('mul', { a: 3, b: 5 });
          const stranger = await fetch(session.mcpURL, {
            method: 'POST',
            headers: { authorization: 'Bearer sk-wrong', 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
            body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
          });
          const get = await fetch(session.mcpURL, { headers: { authorization: `Bearer ${session.apiKey}` } });
          return { names, result, stranger: stranger.status, get: get.status };
        } finally {
          await server.close();
        }
      }),
      input('a'),
      io([]),
    );
    assert.equal(traj.status, 'completed', traj.error);
    assert.deepEqual(traj.outcome, { names: ['add', 'mul', 'refuse'], result: [{ type: 'text', text: '15' }], stranger: 401, get: 405 });
  });
});
