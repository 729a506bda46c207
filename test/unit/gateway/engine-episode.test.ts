/**
 * Agent code on the real `openai` client against the gateway and a real
 * engine (the ONNX CPU engine over gRPC): every turn recorded holds exactly
 * the context the engine was given and the ids and log-probs it sampled,
 * over a multi-turn conversation with tools and tool messages; a streamed
 * episode samples the same tokens as a non-streamed one with the same seed;
 * concurrent episodes' calls are each recorded in their own episode.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import type { EpisodeIO, GenerateCall, GenerateReply } from '../../../agents/episode';
import { engineSpec } from '../../../agents/model';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { generateOne } from '../../../activities/training/pool';
import { modelKey } from '../../../activities/training/update-step';
import { EngineClient } from '../../../engines/protocol/client';
import { startEngineServer } from '../../../engines/onnx/server';
import { openGatewaySessions } from '../../../gateway';
import { cpuEngine } from '../engine/helpers';
import { gatewayTeam, tokenizer } from './team';

const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'lookup', description: 'looks up', parameters: { type: 'object', properties: { q: { type: 'string' } } } } },
];

/** Three calls: the opening (with tools), a tool result after the reply, a follow-up user message. */
const conversation =
  (stream: boolean) =>
  async ({ agents }: { agents: Record<'solver' | 'helper', { openai: { baseURL: string; apiKey: string } }> }) => {
    const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: 'system', content: 'Answer.' },
      { role: 'user', content: 'What is x?' },
    ];
    const ask = async () => {
      const req = { model: 'policy', messages, tools, max_tokens: 12, temperature: 1 };
      if (!stream) return (await client.chat.completions.create(req)).choices[0]!.message;
      let content = '';
      for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) content += chunk.choices[0]?.delta.content ?? '';
      return { role: 'assistant' as const, content, refusal: null };
    };
    const replies: string[] = [];
    for (const next of [{ role: 'tool' as const, tool_call_id: 'c1', content: 'x=7' }, { role: 'user' as const, content: 'So?' }, undefined]) {
      const reply = await ask();
      replies.push(reply.content ?? '');
      messages.push({ role: 'assistant', content: reply.content, ...(reply.tool_calls ? { tool_calls: reply.tool_calls } : {}) });
      if (next) messages.push(next);
    }
    return replies;
  };

describe('gateway against the real engine', () => {
  let server: Awaited<ReturnType<typeof startEngineServer>>;
  let client: EngineClient;
  const runId = 'gw';
  before(async () => {
    server = await startEngineServer(cpuEngine({ batchWindowMs: 20 }), '127.0.0.1', 0);
    client = new EngineClient(server.address);
    const team = gatewayTeam(async () => undefined);
    for (const model of ['policy', 'other']) await client.initModel({ modelKey: modelKey(runId, model), spec: engineSpec(team.models[model]!), seed: 3 });
  });
  after(async () => {
    client?.close();
    await server?.shutdown();
  });

  const io = (log: Array<{ call: GenerateCall; reply: GenerateReply }>): EpisodeIO => ({
    async generate(call) {
      const reply = await generateOne(client, runId, call);
      log.push({ call, reply });
      return reply;
    },
    callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
    now: () => 0,
    openSessions: openGatewaySessions,
  });
  const input = (episodeId: string, seed: number) => ({ episodeId, seed, task: 0, versions: { policy: 0, other: 0 } });

  it('records exactly what the engine was given and sampled; stream and non-stream sample the same tokens', async () => {
    const plainLog: Array<{ call: GenerateCall; reply: GenerateReply }> = [];
    const plain = await runBatchedEpisode(gatewayTeam(conversation(false)), input('p', 11), io(plainLog));
    assert.equal(plain.status, 'completed', plain.error);
    assert.equal(plain.turns.length, 3);
    for (const [i, t] of plain.turns.entries()) {
      const { call, reply } = plainLog[i]!;
      assert.deepEqual(t.contextTokens, call.context, `turn ${i}: context`);
      assert.deepEqual(t.responseTokens, reply.tokens, `turn ${i}: sampled ids`);
      assert.deepEqual(t.logprobs, reply.logprobs, `turn ${i}: behaviour log-probs`);
    }
    // each later turn continues the previous one's ids (the replies were matched, never re-tokenized)
    for (const i of [1, 2]) {
      const prev = plain.turns[i - 1]!;
      assert.deepEqual(plain.turns[i]!.contextTokens.slice(0, prev.contextTokens.length + prev.responseTokens.length), [
        ...prev.contextTokens,
        ...prev.responseTokens,
      ]);
      assert.deepEqual(plain.turns[i]!.parents, [i - 1]);
    }
    assert.equal(plain.counters!.solver!.retokenizedTurns, 0);
    assert.equal(tokenizer.decode(plain.turns[0]!.contextTokens).includes('"lookup"'), true, 'the tools are in the context');

    const streamedLog: typeof plainLog = [];
    const streamed = await runBatchedEpisode(gatewayTeam(conversation(true)), input('s', 11), io(streamedLog));
    assert.equal(streamed.status, 'completed', streamed.error);
    assert.deepEqual(streamed.outcome, plain.outcome);
    assert.deepEqual(
      streamed.turns.map((t) => [t.contextTokens, t.responseTokens, t.logprobs]),
      plain.turns.map((t) => [t.contextTokens, t.responseTokens, t.logprobs]),
    );
  });

  it('concurrent episodes: every call is a turn of its own episode', async () => {
    const logs = Array.from({ length: 8 }, () => [] as Array<{ call: GenerateCall; reply: GenerateReply }>);
    const runs = await Promise.all(logs.map((log, k) => runBatchedEpisode(gatewayTeam(conversation(k % 2 === 1)), input(`c${k}`, 100 + k), io(log))));
    runs.forEach((r, k) => {
      assert.equal(r.status, 'completed', r.error);
      // the engine calls made through episode k's runtime are exactly episode k's turns
      assert.deepEqual(
        r.turns.map((t) => [t.contextTokens, t.responseTokens, t.logprobs]),
        logs[k]!.map((l) => [l.call.context, l.reply.tokens, l.reply.logprobs]),
      );
    });
    // the same seed alone gives the same episode as among others
    const alone = await runBatchedEpisode(gatewayTeam(conversation(false)), input('c0', 100), io([]));
    assert.deepEqual(
      alone.turns.map((t) => t.responseTokens),
      runs[0]!.turns.map((t) => t.responseTokens),
    );
  });
});
