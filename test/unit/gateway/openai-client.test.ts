/**
 * The gateway with the real `openai` client, the episode's replies scripted
 * (so the sampled text can hold well-formed and broken tool calls; the same
 * path against the real engine: engine-episode.test.ts). Checked: the
 * contexts recorded are the template's rendering continued token in / token
 * out from the sampled ids, tool calls come back as OpenAI `tool_calls`,
 * stream and non-stream give the same reply, and edited history is counted;
 * the same for the Responses API (output items, input items sent back).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import type { EpisodeIO, GenerateCall } from '../../../agents/episode';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { openGatewaySessions } from '../../../gateway';
import { gatewayTeam, tokenizer, TEMPLATE } from './team';
import { chatTemplate } from '../../../agents';

const EOS = tokenizer.eosId;
const chat = chatTemplate(TEMPLATE, {}, '');
const tools = [
  {
    type: 'function' as const,
    function: {
      name: 'add',
      description: 'adds',
      parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
    },
  },
];

/** An EpisodeIO whose generations are the given texts (each closed by EOS unless it ends with '…'), with made-up log-probs. */
function scripted(texts: string[]) {
  const calls: GenerateCall[] = [];
  const io: EpisodeIO = {
    async generate(call) {
      calls.push(call);
      const text = texts.shift()!;
      const cut = text.endsWith('…');
      const tokens = [...tokenizer.encode(cut ? text.slice(0, -1) : text), ...(cut ? [] : [EOS])].slice(0, call.maxTokens);
      return { tokens, logprobs: tokens.map((_, i) => -0.1 * (i + 1)), stopReason: tokens.at(-1) === EOS ? 'stop_token' : 'max_tokens' };
    },
    callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
    now: () => 0,
    openSessions: openGatewaySessions,
  };
  return { io, calls };
}

const input = { episodeId: 'e1', seed: 5, task: 0, versions: { policy: 0, other: 0 } };

describe('gateway with the openai client', () => {
  it('multi-turn with tool calls: contexts continue from the sampled ids; tool_calls parsed', async () => {
    const call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>';
    const { io, calls } = scripted([`Let me add.${call}`, 'It is 5.']);
    const seen: unknown[] = [];
    const team = gatewayTeam(async ({ agents }) => {
      const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [
        { role: 'system', content: 'You add.' },
        { role: 'user', content: '2+3?' },
      ];
      const first = await client.chat.completions.create({ model: 'policy', messages, tools, logprobs: true });
      seen.push(first);
      const msg = first.choices[0]!.message;
      messages.push(msg, { role: 'tool', tool_call_id: msg.tool_calls![0]!.id, content: '5' });
      const second = await client.chat.completions.create({ model: 'policy', messages, tools });
      seen.push(second);
      return second.choices[0]!.message.content;
    });
    const traj = await runBatchedEpisode(team, input, io);
    assert.equal(traj.status, 'completed', traj.error);
    assert.equal(traj.outcome, 'It is 5.');
    const [first, second] = seen as OpenAI.ChatCompletion[];
    assert.equal(first!.choices[0]!.finish_reason, 'tool_calls');
    assert.equal(first!.choices[0]!.message.content, 'Let me add.');
    assert.deepEqual(first!.choices[0]!.message.tool_calls, [{ id: 'call_0_0', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":3}' } }]);
    assert.deepEqual(
      first!.choices[0]!.logprobs!.content!.map((t) => t.logprob),
      traj.turns[0]!.logprobs.slice(0, -1),
      'log-probs of the sampled tokens, EOS left out',
    );
    assert.equal(second!.choices[0]!.finish_reason, 'stop');

    // turn 0: the whole request rendered by the template, tools included
    const opening = chat.open(
      [
        { role: 'system', content: 'You add.' },
        { role: 'user', content: '2+3?' },
      ],
      tools,
    );
    assert.deepEqual(traj.turns[0]!.contextTokens, tokenizer.encode(opening));
    // turn 1: turn 0's context and sampled ids as they were (EOS included), then only the tool message
    assert.deepEqual(traj.turns[1]!.contextTokens, [
      ...traj.turns[0]!.contextTokens,
      ...traj.turns[0]!.responseTokens,
      ...tokenizer.encode('\n<tool>5\n<assistant>'),
    ]);
    assert.deepEqual(traj.turns[0]!.responseTokens, [...tokenizer.encode(`Let me add.${call}`), EOS]);
    assert.deepEqual(traj.turns[1]!.parents, [0]);
    // recorded == what the engine was asked and sampled
    assert.deepEqual(
      traj.turns.map((t) => t.contextTokens),
      calls.map((c) => c.context),
    );
    assert.deepEqual(
      traj.turns[1]!.lossMask,
      traj.turns[1]!.responseTokens.map(() => 1),
    );
    assert.deepEqual(traj.counters, { solver: { gatewayCalls: 2, retokenizedTurns: 0, unparsedToolCalls: 0 } });
  });

  it('stream and non-stream give the same reply and tokens', async () => {
    const replies = ['abc<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'];
    const run = async (stream: boolean) => {
      const { io } = scripted([...replies]);
      let out: { content: string; calls: unknown[]; finish: string | null; usage: unknown } | undefined;
      const team = gatewayTeam(async ({ agents }) => {
        const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
        const req = { model: 'policy', messages: [{ role: 'user' as const, content: 'x' }], tools };
        if (!stream) {
          const r = await client.chat.completions.create(req);
          out = { content: r.choices[0]!.message.content ?? '', calls: r.choices[0]!.message.tool_calls!, finish: r.choices[0]!.finish_reason, usage: r.usage };
          return;
        }
        const s = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
        out = { content: '', calls: [], finish: null, usage: undefined };
        for await (const chunk of s) {
          if (chunk.usage) out.usage = chunk.usage;
          const c = chunk.choices[0];
          if (!c) continue;
          out.content += c.delta.content ?? '';
          for (const t of c.delta.tool_calls ?? []) out.calls.push({ id: t.id, type: t.type, function: t.function });
          if (c.finish_reason) out.finish = c.finish_reason;
        }
      });
      const traj = await runBatchedEpisode(team, input, io);
      return { out, turns: traj.turns };
    };
    const plain = await run(false);
    const streamed = await run(true);
    assert.deepEqual(streamed.out, plain.out);
    assert.equal(plain.out!.content, 'abc');
    assert.equal(plain.out!.finish, 'tool_calls');
    assert.deepEqual(streamed.turns, plain.turns);
  });

  it('a tool call that does not parse comes back as text and is counted; edited history is retokenized and counted', async () => {
    const broken = '<tool_call>{"name": "add", "arguments": {"a": 1</tool_call>';
    const { io } = scripted([broken, 'ok', 'fine']);
    const replies: OpenAI.ChatCompletion[] = [];
    const team = gatewayTeam(async ({ agents }) => {
      const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'q' }];
      replies.push(await client.chat.completions.create({ model: 'policy', messages, tools }));
      messages.push(replies[0]!.choices[0]!.message, { role: 'user', content: 'again' });
      replies.push(await client.chat.completions.create({ model: 'policy', messages, tools }));
      // the agent's code rewrites the assistant's second reply ('ok'): that message cannot be matched to sampled ids
      messages.push({ role: 'assistant', content: 'edited' }, { role: 'user', content: 'and?' });
      replies.push(await client.chat.completions.create({ model: 'policy', messages, tools }));
    });
    const traj = await runBatchedEpisode(team, input, io);
    assert.equal(traj.status, 'completed', traj.error);
    assert.equal(replies[0]!.choices[0]!.message.content, broken);
    assert.equal(replies[0]!.choices[0]!.message.tool_calls, undefined);
    assert.equal(replies[0]!.choices[0]!.finish_reason, 'stop');
    assert.deepEqual(traj.turns[1]!.parents, [0], 'the broken call was returned as text and matched back');
    // turn 2: continued from the last assistant message the session returned (turn 0's); what follows, the
    // edited reply included, is rendered by the template
    assert.equal(replies[1]!.choices[0]!.message.content, 'ok');
    assert.deepEqual(traj.turns[2]!.parents, [0]);
    const rest = [
      { role: 'user' as const, content: 'again' },
      { role: 'assistant' as const, content: 'edited' },
      { role: 'user' as const, content: 'and?' },
    ];
    assert.deepEqual(traj.turns[2]!.contextTokens, [
      ...traj.turns[0]!.contextTokens,
      ...traj.turns[0]!.responseTokens,
      ...tokenizer.encode(chat.next(rest, true)),
    ]);
    assert.deepEqual(traj.counters, { solver: { gatewayCalls: 3, retokenizedTurns: 1, unparsedToolCalls: 1 } });
  });

  it('Responses API: output items, multi-turn input continued from the sampled ids, streamed events give the same response', async () => {
    const call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>';
    const texts = [`Let me add.${call}`, 'It is 5.', 'ok…'];
    const rTools = tools.map((t) => ({ type: 'function' as const, ...t.function, strict: false }));
    const run = async (stream: boolean) => {
      const { io, calls } = scripted([...texts]);
      const replies: OpenAI.Responses.Response[] = [];
      const events: string[] = [];
      const team = gatewayTeam(async ({ agents }) => {
        const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
        const input: OpenAI.Responses.ResponseInputItem[] = [{ role: 'user', content: '2+3?' }];
        const create = async (extra: { max_output_tokens?: number } = {}) => {
          const req = { model: 'policy', instructions: 'You add.', input, tools: rTools, include: ['message.output_text.logprobs' as const], ...extra };
          let r: OpenAI.Responses.Response | undefined;
          if (!stream) r = await client.responses.create(req);
          else
            for await (const e of await client.responses.create({ ...req, stream: true })) {
              events.push(e.type);
              if (e.type === 'response.completed' || e.type === 'response.incomplete') r = e.response;
            }
          replies.push(r!);
          return r!;
        };
        const first = await create();
        const fc = first.output.find((o) => o.type === 'function_call')!;
        // the SDKs send a reply's output items back as they came, then the tool's output
        input.push(...(first.output as OpenAI.Responses.ResponseInputItem[]), { type: 'function_call_output', call_id: fc.call_id, output: '5' });
        const second = await create();
        input.push(...(second.output as OpenAI.Responses.ResponseInputItem[]), { role: 'user', content: 'thanks' });
        await create({ max_output_tokens: 2 });
      });
      const traj = await runBatchedEpisode(team, input, io);
      assert.equal(traj.status, 'completed', traj.error);
      return { replies, events, traj, calls };
    };
    const plain = await run(false);
    const { traj } = plain;
    const [first, second, third] = plain.replies;
    assert.deepEqual(
      first!.output.map((o) => o.type),
      ['message', 'function_call'],
    );
    const message = first!.output[0] as OpenAI.Responses.ResponseOutputMessage;
    const text = message.content[0] as OpenAI.Responses.ResponseOutputText;
    assert.equal(text.text, 'Let me add.');
    assert.deepEqual(
      text.logprobs!.map((t) => t.logprob),
      traj.turns[0]!.logprobs.slice(0, -1),
      'log-probs of the sampled tokens, EOS left out',
    );
    const fc = first!.output[1] as OpenAI.Responses.ResponseFunctionToolCall;
    assert.deepEqual([fc.call_id, fc.name, fc.arguments], ['call_0_0', 'add', '{"a":2,"b":3}']);
    assert.equal(first!.status, 'completed');
    assert.deepEqual(first!.usage, {
      input_tokens: traj.turns[0]!.contextTokens.length,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: traj.turns[0]!.responseTokens.length,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: traj.turns[0]!.contextTokens.length + traj.turns[0]!.responseTokens.length,
    });
    assert.equal(second!.output_text, 'It is 5.');
    // the third call stops at max_output_tokens: 'ok' with no EOS after it
    assert.equal(third!.status, 'incomplete');
    assert.deepEqual(third!.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(third!.output_text, 'ok');

    // turn 0: instructions and input rendered by the template, tools included (as Chat Completions would)
    const opening = chat.open(
      [
        { role: 'system', content: 'You add.' },
        { role: 'user', content: '2+3?' },
      ],
      tools,
    );
    assert.deepEqual(traj.turns[0]!.contextTokens, tokenizer.encode(opening));
    // turns 1 and 2: the previous turn's context and sampled ids as they were, then only what followed
    assert.deepEqual(traj.turns[1]!.contextTokens, [
      ...traj.turns[0]!.contextTokens,
      ...traj.turns[0]!.responseTokens,
      ...tokenizer.encode('\n<tool>5\n<assistant>'),
    ]);
    assert.deepEqual(traj.turns[2]!.contextTokens, [
      ...traj.turns[1]!.contextTokens,
      ...traj.turns[1]!.responseTokens,
      ...tokenizer.encode('\n<user>thanks\n<assistant>'),
    ]);
    assert.deepEqual(
      traj.turns.map((t) => t.parents),
      [[], [0], [1]],
    );
    assert.deepEqual(
      traj.turns.map((t) => t.contextTokens),
      plain.calls.map((c) => c.context),
    );
    assert.deepEqual(traj.counters, { solver: { gatewayCalls: 3, retokenizedTurns: 0, unparsedToolCalls: 0 } });

    const streamed = await run(true);
    // the client adds the convenience output_text to a non-streamed response only
    const strip = ({ output_text: _, ...r }: OpenAI.Responses.Response) => ({ ...r, created_at: 0 });
    assert.deepEqual(streamed.replies.map(strip), plain.replies.map(strip));
    assert.deepEqual(streamed.traj.turns, traj.turns);
    assert.equal(streamed.events[0], 'response.created');
    assert.ok(streamed.events.includes('response.output_text.delta') && streamed.events.includes('response.function_call_arguments.delta'));
  });
  it('a call past maxTurns is refused; the episode ends truncated whether the agent code catches the error or rethrows it', async () => {
    for (const rethrow of [false, true]) {
      const { io } = scripted(['a', 'b', 'never sampled']);
      let refused: unknown;
      const team = gatewayTeam(async ({ agents }) => {
        const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
        const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'q' }];
        for (;;) {
          try {
            messages.push((await client.chat.completions.create({ model: 'policy', messages })).choices[0]!.message, { role: 'user', content: 'more' });
          } catch (e) {
            refused = e;
            if (rethrow) throw e;
            return 'caught';
          }
        }
      }, 2);
      const traj = await runBatchedEpisode(team, input, io);
      assert.ok(refused instanceof OpenAI.BadRequestError, String(refused));
      assert.match(refused.message, /agents\.solver\.maxTurns \(2\) exceeded: the episode ends truncated/);
      assert.equal(traj.status, 'truncated', `rethrow ${rethrow}: ${traj.error}`);
      assert.equal(traj.error, 'agents.solver.maxTurns (2) exceeded');
      assert.deepEqual(
        traj.turns.map((t) => tokenizer.decode(t.responseTokens)),
        ['a', 'b'],
        'both turns taken are kept for training',
      );
    }
  });
});
