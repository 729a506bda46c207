/**
 * The pure parts of the gateway's team tools, with hand-computed values: the journal's hash of a
 * tool call (gateway/journal.ts) and a call's answer as an MCP `tools/call` result (gateway/mcp.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { requestHash, toolCallHash } from '../../../gateway/journal';
import { callResult } from '../../../gateway/mcp';
import { parseChatRequest } from '../../../gateway/request';

describe('toolCallHash', () => {
  it("is sha256 of ['tools/call', agent, tool, input] in canonical JSON (sorted keys)", () => {
    // printf '%s' '["tools/call","solver","add",{"a":2,"b":3}]' | sha256sum
    const expected = '73904b0cd02e1e085a3e76686fe99b6752e7c71b52f2dafa98596a10f18869ad';
    assert.equal(toolCallHash('solver', 'add', { a: 2, b: 3 }), expected);
    assert.equal(toolCallHash('solver', 'add', { b: 3, a: 2 }), expected, 'however the client orders the arguments');
    assert.equal(toolCallHash('solver', 'add', { b: 3, a: 2, c: undefined }), expected, 'an undefined field is left out');
  });

  it('differs by agent, tool and input, and from any turn', () => {
    const base = toolCallHash('solver', 'add', { a: 2, b: 3 });
    assert.notEqual(toolCallHash('helper', 'add', { a: 2, b: 3 }), base);
    assert.notEqual(toolCallHash('solver', 'mul', { a: 2, b: 3 }), base);
    assert.notEqual(toolCallHash('solver', 'add', { a: 2, b: 4 }), base);
    const turn = requestHash('solver', parseChatRequest({ model: 'policy', messages: [{ role: 'user', content: 'add' }] }));
    assert.notEqual(turn, base);
  });
});

describe('callResult', () => {
  it("passes an MCP tool's content and structuredContent on as its server gave them", () => {
    const output = { content: [{ type: 'image', data: 'AAA=', mimeType: 'image/png' }], structuredContent: { t: 21 } };
    assert.deepEqual(callResult({ reply: { ok: true, output, rendered: '[image image/png]', durationMs: 3 }, mcpResult: true }), output);
    const plain = { content: [{ type: 'text', text: 'Echo: hi' }] };
    assert.deepEqual(callResult({ reply: { ok: true, output: plain, rendered: 'Echo: hi', durationMs: 1 }, mcpResult: true }), plain);
  });

  it("gives another tool's rendered output as text, and a tool error as isError", () => {
    assert.deepEqual(callResult({ reply: { ok: true, output: { sum: 5 }, rendered: 'sum 5', durationMs: 0 }, mcpResult: false }), {
      content: [{ type: 'text', text: 'sum 5' }],
    });
    assert.deepEqual(callResult({ reply: { ok: false, error: 'add: timed out after 50 ms', durationMs: 50 }, mcpResult: true }), {
      content: [{ type: 'text', text: 'add: timed out after 50 ms' }],
      isError: true,
    });
  });
});
