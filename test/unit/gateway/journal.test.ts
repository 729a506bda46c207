/**
 * Durable replay of gateway calls (gateway/journal.ts), with agent code on the
 * real `openai` client, the real gateway and the real ONNX CPU engine. The
 * journal here is a map in the test (the logic under test is the gateway's and
 * the runner's; the PostgreSQL journal is exercised by
 * test/integration/training/gateway-journal.test.ts): a full journal answers
 * every call without sampling; a partial one (an attempt that died after k
 * calls) answers those k and samples the rest live, and the episode equals an
 * uninterrupted one; code that sends another request than the journaled one
 * restarts the episode clean and counts it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import type { CallJournal, EpisodeIO, GenerateCall, JournaledTurn } from '../../../agents/episode';
import { engineSpec } from '../../../agents/model';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { generateOne } from '../../../activities/training/pool';
import { modelKey } from '../../../activities/training/update-step';
import { EngineClient } from '../../../engines/protocol/client';
import { startEngineServer } from '../../../engines/onnx/server';
import { openGatewaySessions } from '../../../gateway';
import { cpuEngine } from '../engine/helpers';
import { gatewayTeam, MapJournal } from './team';
import type { Trajectory } from '../../../schema/trajectory';

/** Three calls of the solver, each continuing the conversation; `variant` changes the third request. */
const conversation =
  (variant = '') =>
  async ({ agents }: { agents: Record<'solver' | 'helper', { openai: { baseURL: string; apiKey: string } }> }) => {
    const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Count.' }];
    const replies: string[] = [];
    for (const next of ['More.', `Again${variant}.`, undefined]) {
      const reply = (await client.chat.completions.create({ model: 'policy', messages, max_tokens: 6, temperature: 1 })).choices[0]!.message;
      replies.push(reply.content ?? '');
      messages.push({ role: 'assistant', content: reply.content });
      if (next) messages.push({ role: 'user', content: next });
    }
    return replies;
  };

const sampled = (t: Trajectory) => t.turns.map((x) => [x.contextTokens, x.responseTokens, x.logprobs, x.parents, x.stopReason]);

describe('gateway journal: durable replay', () => {
  let server: Awaited<ReturnType<typeof startEngineServer>>;
  let client: EngineClient;
  const runId = 'gwj';
  before(async () => {
    server = await startEngineServer(cpuEngine({ batchWindowMs: 5 }), '127.0.0.1', 0);
    client = new EngineClient(server.address);
    const team = gatewayTeam(async () => undefined);
    for (const model of ['policy', 'other']) await client.initModel({ modelKey: modelKey(runId, model), spec: engineSpec(team.models[model]!), seed: 4 });
  });
  after(async () => {
    client?.close();
    await server?.shutdown();
  });

  const io = (generated: GenerateCall[], journal?: CallJournal): EpisodeIO => ({
    async generate(call) {
      generated.push(call);
      return generateOne(client, runId, call);
    },
    callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
    now: () => 0,
    openSessions: openGatewaySessions,
    ...(journal ? { journal } : {}),
  });
  const input = (episodeId: string) => ({ episodeId, seed: 21, task: 0, versions: { policy: 0, other: 0 } });

  it('answers journaled calls without sampling; a partial journal replays, then goes on live', async () => {
    const plainCalls: GenerateCall[] = [];
    const plain = await runBatchedEpisode(gatewayTeam(conversation()), input('e'), io(plainCalls));
    assert.equal(plain.status, 'completed', plain.error);
    assert.equal(plain.turns.length, 3);

    const journal = new MapJournal();
    const first: GenerateCall[] = [];
    const journaled = await runBatchedEpisode(gatewayTeam(conversation()), input('e'), io(first, journal));
    assert.deepEqual(sampled(journaled), sampled(plain));
    const entries = journal.calls.get('e')! as JournaledTurn[];
    assert.deepEqual(
      entries.map((c) => [c.index, c.agent, c.tokens, c.logprobs]),
      plain.turns.map((t, i) => [i, 'solver', t.responseTokens, t.logprobs]),
    );
    assert.equal(journaled.counters!.solver!.journalReplayedCalls, undefined);

    // all three journaled: a retry samples nothing
    const again: GenerateCall[] = [];
    const replayed = await runBatchedEpisode(gatewayTeam(conversation()), input('e'), io(again, journal));
    assert.equal(again.length, 0, 'no call sampled twice');
    assert.deepEqual(replayed.outcome, plain.outcome);
    assert.deepEqual(sampled(replayed), sampled(plain));
    assert.equal(replayed.counters!.solver!.journalReplayedCalls, 3);

    // an attempt that died after its first call: the retry replays it and samples the other two
    const partial = new MapJournal();
    partial.calls.set('e', entries.slice(0, 1));
    const rest: GenerateCall[] = [];
    const resumed = await runBatchedEpisode(gatewayTeam(conversation()), input('e'), io(rest, partial));
    assert.deepEqual(
      rest.map((c) => c.context),
      plainCalls.slice(plainCalls.length - rest.length).map((c) => c.context),
    );
    assert.deepEqual(
      rest.map((c) => c.context),
      plain.turns.slice(1).map((t) => t.contextTokens),
      'only calls 1 and 2 are sampled',
    );
    assert.deepEqual(resumed.outcome, plain.outcome);
    assert.deepEqual(sampled(resumed), sampled(plain));
    assert.equal(resumed.counters!.solver!.journalReplayedCalls, 1);
    assert.equal(partial.calls.get('e')!.length, 3);
  });

  it('code that sends another request than the journaled one restarts the episode clean, counted', async () => {
    const journal = new MapJournal();
    await runBatchedEpisode(gatewayTeam(conversation()), input('d'), io([], journal));
    const other = await runBatchedEpisode(gatewayTeam(conversation(' now')), input('fresh'), io([]));

    const calls: GenerateCall[] = [];
    const diverged = await runBatchedEpisode(gatewayTeam(conversation(' now')), input('d'), io(calls, journal));
    assert.equal(diverged.status, 'completed', diverged.error);
    assert.equal(journal.cleared, 1);
    assert.equal(diverged.counters!.solver!.journalRestarts, 1);
    // the restarted attempt is all live (never a mix): the same as the changed code run fresh with the same seed
    assert.deepEqual(sampled(diverged), sampled(other));
    assert.deepEqual(diverged.outcome, other.outcome);
    assert.equal(diverged.counters!.solver!.journalReplayedCalls, undefined);
    assert.equal(calls.length >= 3, true, 'the restart sampled every call');
    assert.deepEqual(
      (journal.calls.get('d')! as JournaledTurn[]).map((c) => c.tokens),
      other.turns.map((t) => t.responseTokens),
      'the journal holds the restarted attempt',
    );
  });
});
