/**
 * The gateway's pure parts, on hand-written inputs: tool calls in sampled text
 * (Hermes convention), request checking (each fault named by its field), and
 * the per-agent counters summed into a step's train rows.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { agentCounters } from '../../../activities/training/batch';
import { agentRows } from '../../../activities/training/update-step';
import { GatewayError } from '../../../gateway/errors';
import { parseChatRequest } from '../../../gateway/request';
import { parseToolCalls, renderToolCalls } from '../../../gateway/tool-calls';

const names = new Set(['add', 'look-up']);

describe('tool calls in sampled text', () => {
  it('parses every call; the text around them is the content', () => {
    const r = parseToolCalls(
      ' Sure. <tool_call>{"name":"add","arguments":{"b":2,"a":1}}</tool_call>\n<tool_call>{"name":"look-up"}</tool_call> ',
      names,
      'call_3',
    );
    assert.deepEqual(r, {
      content: 'Sure.',
      toolCalls: [
        { id: 'call_3_0', type: 'function', function: { name: 'add', arguments: '{"b":2,"a":1}' } },
        { id: 'call_3_1', type: 'function', function: { name: 'look-up', arguments: '{}' } },
      ],
      unparsed: false,
    });
    assert.deepEqual(parseToolCalls('<tool_call>{"name":"add","arguments":{}}</tool_call>', names, 'c').content, null);
    assert.deepEqual(parseToolCalls('no calls', names, 'c'), { content: 'no calls', toolCalls: [], unparsed: false });
  });

  it('returns the whole text when any call does not parse', () => {
    for (const text of [
      'a <tool_call>{"name":"add"</tool_call>', // bad JSON
      '<tool_call>{"name":"add"}</tool_call><tool_call>{"name":"mul"}</tool_call>', // a tool not offered
      '<tool_call>{"arguments":{}}</tool_call>', // no name
      '<tool_call>{"name":"add","arguments":[1]}</tool_call>', // arguments not an object
      '<tool_call>{"name":"add"}', // unclosed
    ])
      assert.deepEqual(parseToolCalls(text, names, 'c'), { content: text, toolCalls: [], unparsed: true }, text);
  });

  it('writes calls back in the convention', () => {
    assert.equal(
      renderToolCalls([{ id: 'x', type: 'function', function: { name: 'add', arguments: '{"a": 1}' } }]),
      '<tool_call>{"name":"add","arguments":{"a":1}}</tool_call>',
    );
  });
});

describe('request checking', () => {
  const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
  const fault = (body: unknown) => {
    try {
      parseChatRequest(body);
    } catch (e) {
      assert.ok(e instanceof GatewayError);
      return `${e.status} ${e.param}`;
    }
    return 'accepted';
  };

  it('reads what the gateway honours', () => {
    const r = parseChatRequest({
      ...base,
      messages: [
        {
          role: 'developer',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'add', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'c', content: '3' },
      ],
      max_completion_tokens: 5,
      max_tokens: 9,
      temperature: 0,
      stop: 'END',
      stream: true,
      stream_options: { include_usage: true },
      seed: 42,
      user: 'ignored',
    });
    assert.deepEqual(r.messages, [
      { role: 'system', content: 'ab' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'c', type: 'function', function: { name: 'add', arguments: '{}' } }] },
      { role: 'tool', content: '3', toolCallId: 'c' },
    ]);
    assert.equal(r.maxTokens, 5, 'max_completion_tokens first');
    assert.deepEqual([r.temperature, r.stop, r.stream, r.includeUsage, r.toolChoice], [0, ['END'], true, true, 'none']);
  });

  it('names the field of each fault', () => {
    assert.equal(fault([1]), '400 body');
    assert.equal(fault({ messages: base.messages }), '400 model');
    assert.equal(fault({ model: 'm', messages: [] }), '400 messages');
    assert.equal(fault({ ...base, messages: [{ role: 'user', content: [{ type: 'image_url' }] }] }), '400 messages[0].content[0]');
    assert.equal(fault({ ...base, messages: [{ role: 'tool', content: 'x' }] }), '400 messages[0].tool_call_id');
    assert.equal(fault({ ...base, tools: [{ type: 'function', function: { name: 'a b' } }] }), '400 tools[0].function.name');
    assert.equal(fault({ ...base, tools: [{ type: 'function', function: { name: 'a', parameters: 'object' } }] }), '400 tools[0].function.parameters');
    assert.equal(
      fault({
        ...base,
        tools: [{ type: 'function', function: { name: 'a', parameters: { type: 'object', properties: { x: { items: { type: 'float' } } } } } }],
      }),
      '400 tools[0].function.parameters.properties.x.items.type',
    );
    assert.equal(
      fault({ ...base, tools: [{ type: 'function', function: { name: 'a', parameters: { required: 'x' } } }] }),
      '400 tools[0].function.parameters.required',
    );
    assert.equal(fault({ ...base, tool_choice: { type: 'function', function: { name: 'b' } } }), '400 tool_choice.function.name');
    assert.equal(fault({ ...base, max_tokens: 0 }), '400 max_tokens');
    assert.equal(fault({ ...base, temperature: 3 }), '400 temperature');
    assert.equal(fault({ ...base, top_p: 0 }), '400 top_p');
    assert.equal(fault({ ...base, stop: ['a', 'b', 'c', 'd', 'e'] }), '400 stop');
    assert.equal(fault({ ...base, n: 2 }), '400 n');
    assert.equal(fault({ ...base, top_logprobs: 3 }), '400 top_logprobs');
    assert.equal(fault({ ...base, stream: 'yes' }), '400 stream');
    assert.equal(fault({ ...base, n: 1, top_logprobs: 0 }), 'accepted');
  });
});

it('counters are summed per agent over episodes and become train rows', () => {
  const episode = (counters?: Record<string, Record<string, number>>) => ({
    trajectory: { episodeId: 'e', status: 'completed' as const, turns: [], counters },
  });
  const sums = agentCounters([
    episode({ solver: { gatewayCalls: 2, retokenizedTurns: 1 } }),
    episode(),
    episode({ solver: { gatewayCalls: 3, retokenizedTurns: 0 }, helper: { gatewayCalls: 1 } }),
  ]);
  assert.deepEqual(sums, { solver: { gatewayCalls: 5, retokenizedTurns: 1 }, helper: { gatewayCalls: 1 } });
  assert.deepEqual(agentRows({ rewards: {}, endings: {}, lengths: {}, counters: sums }, ['solver']), [
    { kind: 'train', scope: 'solver', name: 'gatewayCalls', value: 5 },
    { kind: 'train', scope: 'solver', name: 'retokenizedTurns', value: 1 },
  ]);
});
