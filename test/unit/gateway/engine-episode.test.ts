/**
 * Agent code on the real `openai` client against the gateway and a real
 * engine (the ONNX CPU engine over gRPC): every turn recorded holds exactly
 * the context the engine was given and the ids and log-probs it sampled,
 * over a multi-turn conversation with tools and tool messages; a streamed
 * episode samples the same tokens as a non-streamed one with the same seed;
 * concurrent episodes' calls are each recorded in their own episode.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { assertExact, sampledTurns, suiteEngine, type EngineLog } from './engine';
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
  const engine = suiteEngine(20, { runId: 'gw', seed: 3 });
  const io = (log: EngineLog) => engine.io('gw', log);
  const input = (episodeId: string, seed: number) => ({ episodeId, seed, task: 0, versions: { policy: 0, other: 0 } });

  it('records exactly what the engine was given and sampled; stream and non-stream sample the same tokens', async () => {
    const plainLog: EngineLog = [];
    const plain = await runBatchedEpisode(gatewayTeam(conversation(false)), input('p', 11), io(plainLog));
    assert.equal(plain.status, 'completed', plain.error);
    assert.equal(plain.turns.length, 3);
    assertExact(plain.turns, plainLog);
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
    assert.deepEqual(sampledTurns(streamed), sampledTurns(plain));
  });

  it('concurrent episodes: every call is a turn of its own episode', async () => {
    const logs = Array.from({ length: 8 }, () => [] as EngineLog);
    const runs = await Promise.all(logs.map((log, k) => runBatchedEpisode(gatewayTeam(conversation(k % 2 === 1)), input(`c${k}`, 100 + k), io(log))));
    runs.forEach((r, k) => {
      assert.equal(r.status, 'completed', r.error);
      // the engine calls made through episode k's runtime are exactly episode k's turns
      assertExact(r.turns, logs[k]!);
    });
    // the same seed alone gives the same episode as among others
    const alone = await runBatchedEpisode(gatewayTeam(conversation(false)), input('c0', 100), io([]));
    assert.deepEqual(
      alone.turns.map((t) => t.responseTokens),
      runs[0]!.turns.map((t) => t.responseTokens),
    );
  });
});
