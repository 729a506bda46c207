import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { z } from 'zod';
import { agent, defineTeam, defineTool, generatedTasks, keySyntax, tinyLM, charTokenizer } from '../../../agents';
import { runEpisode, type EpisodeIO, type GenerateCall } from '../../../agents/episode';
import { scoreEpisode } from '../../../agents/rewards';
import { mathTeam } from '../../../examples/teams/math';
import { executeTool } from '../../../activities/tools';

/** A scripted policy: each generate call pops the next text and returns it as tokens. */
function scripted(
  team: { tokenizer: { encode(s: string): number[]; eosId: number } },
  replies: string[],
  executeWith: (req: any) => Promise<any>,
): EpisodeIO & { calls: GenerateCall[] } {
  const calls: GenerateCall[] = [];
  return {
    calls,
    async generate(call) {
      calls.push(call);
      const text = replies.shift();
      if (text === undefined) throw new Error('script exhausted');
      const eos = text.endsWith('$');
      const tokens = team.tokenizer.encode(eos ? text.slice(0, -1) : text);
      if (eos) tokens.push(team.tokenizer.eosId);
      const last = tokens[tokens.length - 1];
      return {
        tokens,
        logprobs: tokens.map((_, i) => -0.5 - i),
        stopReason: last !== undefined && call.stopTokens.includes(last) ? 'stop_token' : 'max_tokens',
      };
    },
    callTool: executeWith,
    now: () => 0,
  };
}

const base = { episodeId: 'e1', seed: 42, versions: { policy: 3 } };

describe('runEpisode on the math team', () => {
  const team = mathTeam();

  it('records the graph, tool output as mask-0 tokens, and scores both roles', async () => {
    const io = scripted(team, ['=', '$', 'Y$'], (req) => executeTool(team, req));
    const traj = await runEpisode(team, { ...base, task: { a: 12, b: 7 } }, io);
    assert.equal(traj.status, 'completed');
    assert.deepEqual(traj.outcome, { answer: 19, verdict: 'Y' });
    const [solver, verifier] = traj.turns;
    const tok = team.tokenizer;
    assert.deepEqual(solver!.contextTokens, [tok.bosId, ...tok.encode('12+7')]);
    // '=' sampled, '19' from the calculator, then EOS sampled.
    assert.deepEqual(solver!.responseTokens, [...tok.encode('=19'), tok.eosId]);
    assert.deepEqual(solver!.lossMask, [1, 0, 0, 1]);
    assert.deepEqual(solver!.logprobs, [-0.5, 0, 0, -0.5]);
    assert.equal(solver!.stopReason, 'eos');
    assert.deepEqual(
      solver!.toolCalls.map((c) => ({ tool: c.tool, input: c.input, output: c.output })),
      [{ tool: 'calculator', input: { expr: '12+7' }, output: { value: 19 } }],
    );
    assert.deepEqual(verifier!.parents, [0]);
    assert.deepEqual(verifier!.contextTokens, [tok.bosId, ...tok.encode('12+7=19?')]);
    assert.equal(verifier!.version, 3);
    // Seeds differ per turn and segment, and are reproducible.
    assert.equal(new Set(io.calls.map((c) => c.seed)).size, 3);
    const again = scripted(team, ['=', '$', 'Y$'], (req) => executeTool(team, req));
    await runEpisode(team, { ...base, task: { a: 12, b: 7 } }, again);
    assert.deepEqual(
      again.calls.map((c) => c.seed),
      io.calls.map((c) => c.seed),
    );

    const scored = scoreEpisode(team, { a: 12, b: 7 }, traj);
    assert.deepEqual(scored.rewards, [
      { turn: 0, agent: 'solver', components: { correct: 1 } },
      { turn: 1, agent: 'verifier', components: { judged: 10 } },
    ]);
    assert.equal(team.success({ task: { a: 12, b: 7 }, outcome: traj.outcome as any, status: 'completed' }), true);
  });

  it("the verdict is the reply's first character, never half of one (a large vocabulary samples astral characters)", async () => {
    // math's characters plus one outside the BMP (two UTF-16 units): a lone half is not storable JSON (PostgreSQL jsonb
    // refused "\ud800" and the rollout was retried for ever)
    const wide = { ...team, tokenizer: charTokenizer('0123456789+=?YNE\u{10000}') };
    const io = scripted(wide, ['=', '$', '\u{10000}Y$'], (req) => executeTool(team, req));
    const traj = await runEpisode(wide, { ...base, task: { a: 12, b: 7 } }, io);
    assert.deepEqual(traj.outcome, { answer: 19, verdict: '\u{10000}' });
  });

  it('turns a schema-invalid tool call into a recorded tool error appended as context', async () => {
    // '5=' makes the display "12+75" which still parses; '55=' makes "12+755": three digits, invalid.
    const io = scripted(team, ['55=', 'N$'], (req) => executeTool(team, req));
    const traj = await runEpisode(team, { ...base, task: { a: 12, b: 7 } }, io);
    const solver = traj.turns[0]!;
    assert.equal(solver.toolCalls.length, 1);
    assert.match(solver.toolCalls[0]!.error!, /^calculator: invalid input: input\.expr: expected two numbers/);
    assert.equal(solver.toolCalls[0]!.output, undefined);
    // The error marker 'E' is context (mask 0); the budget of 3 sampled tokens is then spent.
    assert.deepEqual(solver.responseTokens, team.tokenizer.encode('55=E'));
    assert.deepEqual(solver.lossMask, [1, 1, 1, 0]);
    assert.equal(solver.stopReason, 'max_tokens');
    assert.equal(traj.status, 'completed');
    assert.deepEqual(traj.outcome, { answer: null, verdict: 'N' });
  });
});

describe('bad behaviour is data', () => {
  const tokenizer = charTokenizer('abc=!E');
  const flaky = defineTool({
    name: 'flaky',
    description: 'throws on "b", hangs on "c"',
    input: z.object({ q: z.string().regex(/^[a-c]$/) }),
    output: z.object({ v: z.string() }),
    timeoutMs: 50,
    async execute({ q }, ctx) {
      if (q === 'b') throw new Error('backend down');
      if (q === 'c') await new Promise((r) => setTimeout(r, 10_000).unref());
      return { v: 'a' };
    },
    render: ({ v }) => v,
  });
  const make = (rewardThrows = false) =>
    defineTeam({
      name: 'bad',
      tokenizer,
      models: { m: tinyLM({ tokenizer }) },
      toolSyntax: keySyntax({ trigger: '=', tool: 'flaky', argument: 'q', separators: '!', error: 'E' }),
      agents: { a: agent({ model: 'm', tools: [flaky], maxTokens: 4, maxToolCalls: 1, maxTurns: 1 }) },
      tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: String(i), data: i }) }),
      async episode({ agents }) {
        const t = await agents.a.act('!');
        if (t.reply === 'a') await agents.a.act('!'); // a second turn exceeds maxTurns
        return t.text;
      },
      rewards: {
        a: () => {
          if (rewardThrows) throw new Error('reward bug');
          return { r: 1 };
        },
      },
      success: () => true,
    });

  it('a tool that throws or times out becomes a tool error', async () => {
    const team = make();
    for (const [script, err] of [
      [['b=', 'c$'], /flaky: backend down/],
      [['c=', 'c$'], /flaky: timed out after 50 ms/],
    ] as const) {
      const traj = await runEpisode(
        team,
        { ...base, versions: { m: 0 }, task: 0 },
        scripted(team, [...script], (req) => executeTool(team, req)),
      );
      assert.equal(traj.status, 'completed');
      assert.match(traj.turns[0]!.toolCalls[0]!.error!, err);
      assert.deepEqual(traj.turns[0]!.lossMask, [1, 1, 0, 1, 1]);
    }
  });

  it('exceeding a limit ends the episode truncated, keeping the turns taken', async () => {
    const team = make();
    const traj = await runEpisode(
      team,
      { ...base, versions: { m: 0 }, task: 0 },
      scripted(team, ['a$'], (req) => executeTool(team, req)),
    );
    assert.equal(traj.status, 'truncated');
    assert.equal(traj.error, 'agents.a.maxTurns (1) exceeded');
    assert.equal(traj.turns.length, 1);
    // A second tool call in one turn is over maxToolCalls.
    const t2 = await runEpisode(
      team,
      { ...base, versions: { m: 0 }, task: 0 },
      scripted(team, ['a=', '=', '$'], (req) => executeTool(team, req)),
    );
    assert.equal(t2.status, 'truncated');
    assert.equal(t2.error, 'agents.a.maxToolCalls (1) exceeded');
    assert.equal(t2.turns[0]!.stopReason, 'tool_limit');
  });

  it('a reward function that throws marks the episode failed with the error', async () => {
    const team = make(true);
    const traj = await runEpisode(
      team,
      { ...base, versions: { m: 0 }, task: 0 },
      scripted(team, ['b$'], (req) => executeTool(team, req)),
    );
    const scored = scoreEpisode(team, 0, traj);
    assert.equal(scored.status, 'failed');
    assert.equal(scored.error, 'rewards.a: reward bug');
    assert.deepEqual(scored.rewards, []);
  });
});

describe('a tool output the tokenizer cannot write', () => {
  it('fails the episode naming the tool and its render', async () => {
    const tokenizer = charTokenizer('abc=!E');
    // a render the team load cannot check (it is the team's own): it writes a character outside the vocabulary
    const shout = defineTool({
      name: 'shout',
      description: 'echoes with a bang',
      input: z.object({ q: z.string() }),
      output: z.object({ v: z.string() }),
      execute: async ({ q }) => ({ v: q }),
      render: ({ v }) => `${v}?`,
    });
    const team = defineTeam({
      name: 'loud',
      tokenizer,
      models: { m: tinyLM({ tokenizer }) },
      toolSyntax: keySyntax({ trigger: '=', tool: 'shout', argument: 'q', separators: '!', error: 'E' }),
      agents: { a: agent({ model: 'm', tools: [shout], maxTokens: 4, maxToolCalls: 1 }) },
      tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: String(i), data: i }) }),
      episode: async ({ agents }) => (await agents.a.act('!')).text,
      rewards: { a: () => ({ r: 1 }) },
      success: () => true,
    });
    const traj = await runEpisode(
      team,
      { ...base, versions: { m: 0 }, task: 0 },
      scripted(team, ['a=', 'b$'], (req) => executeTool(team, req)),
    );
    assert.equal(traj.status, 'failed');
    assert.equal(traj.error, 'episode: agents.a.tools[0] (shout).render wrote "a?": tokenizer: character "?" is not in the vocabulary "abc=!E"');
  });
});

describe('defineTeam validation', () => {
  it('reports every problem by path', () => {
    const tokenizer = charTokenizer('ab');
    assert.throws(
      () =>
        defineTeam({
          name: 'broken',
          tokenizer,
          models: { m: tinyLM({ tokenizer }) },
          agents: { x: agent({ model: 'nope', maxTokens: 0 }), y: agent({ model: 'm', maxTokens: 2 }) } as any,
          tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: String(i), data: i }) }),
          episode: async () => null,
          rewards: { x: () => ({}) } as any,
          success: () => true,
        }),
      (e: Error) => {
        assert.match(e.message, /agents\.x\.model: unknown model "nope" \(models: m\)/);
        assert.match(e.message, /agents\.x\.maxTokens: must be a positive integer, got 0/);
        assert.match(e.message, /rewards\.y: every agent needs a reward function/);
        return true;
      },
    );
  });
});
