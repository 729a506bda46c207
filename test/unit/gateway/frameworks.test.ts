/**
 * The bundled framework teams' agent code, on the real packages, against the
 * real gateway and the real ONNX CPU engine: `ai-sdk-lookup` (Vercel AI SDK,
 * generateText with a tool, multi-step), `agents-handoff` (OpenAI Agents
 * SDK on its default Responses API, streamed and not, and on Chat
 * Completions: a handoff, then a function tool) and
 * `python-lookup` (a Python process over plain HTTP). Every turn
 * recorded holds exactly the context the engine was given and the ids and
 * log-probs it sampled, over the multi-turn conversations the frameworks drive
 * with their tool calls.
 *
 * A policy from a random initialization would almost never sample a tool call,
 * so each test first teaches its model the team's moves with real engine
 * Updates (advantage 1 on the wanted reply after each kind of context, the
 * engine's own scores as old log-probs each round), until the engine scores
 * every wanted token above 0.9; the episodes then sample at temperature 1 from
 * the taught version.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { engineSpec } from '../../../agents/model';
import { scoreEpisode } from '../../../agents/rewards';
import type { AnyTeam } from '../../../agents/team';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { modelKey } from '../../../activities/training/update-step';
import { aiSdkLookupTeam, LOOKUP_CALL } from '../../../examples/teams/ai-sdk-lookup';
import { agentsHandoffTeam, HANDOFF_CALL } from '../../../examples/teams/agents-handoff';
import { pythonLookupTeam } from '../../../examples/teams/python-lookup';
import { assertExact, suiteEngine, type EngineLog } from './engine';

describe('framework teams against the real gateway and engine', () => {
  const engine = suiteEngine(5);

  /** Teaches `lesson` (context text -> wanted reply pieces) to a fresh `model` of the team; returns the version that knows it. */
  async function teach(team: AnyTeam, runId: string, lesson: Array<[string[], string[]]>, model = 'policy'): Promise<number> {
    const tok = team.tokenizer;
    const key = modelKey(runId, model);
    await engine.client.initModel({ modelKey: key, spec: engineSpec(team.models[model]!), seed: 1 });
    // the teams reply one token (max_tokens 1): a tool call's reply is that token, with no EOS after it
    const ids = (pieces: string[]) => pieces.flatMap((p) => tok.encode(p));
    const samples = lesson.map(([context, reply]) => ({ context: [tok.bosId, ...ids(context)], tokens: ids(reply) }));
    let version = 0;
    for (let round = 0; round < 300; round++) {
      const scored = await engine.client.score({ modelKey: key, version, sequences: samples });
      if (scored.sequences.every((s) => s.logprobs.every((l) => l > Math.log(0.9)))) return version;
      const res = await engine.client.update({
        modelKey: key,
        baseVersion: version,
        requestId: `teach-${runId}-${model}-${round}`,
        samples: samples.map((s, i) => ({
          ...s,
          lossMask: s.tokens.map(() => 1),
          advantages: s.tokens.map(() => 1),
          oldLogprobs: scored.sequences[i]!.logprobs,
          lossWeights: s.tokens.map(() => 1 / s.tokens.length),
        })),
        settings: { lr: 0.05, klCoef: 0 },
      });
      version = res.info.version;
    }
    throw new Error('the lesson was not learned in 300 updates');
  }

  it('Vercel AI SDK: generateText calls the tool, then answers; every turn is what the engine sampled', async () => {
    const team = aiSdkLookupTeam();
    const digits = [...'0123456789'];
    const version = await teach(team, 'ai', [
      [['[lookup]U?>'], [LOOKUP_CALL]],
      ...digits.map((d): [string[], string[]] => [['[lookup]U?>', LOOKUP_CALL, `T${d}>`], [d]]),
    ]);
    for (const secret of [3, 8]) {
      const log: EngineLog = [];
      const t = await runBatchedEpisode(
        team,
        { episodeId: `ai${secret}`, seed: secret, task: { secret }, versions: { policy: version } },
        engine.io('ai', log),
      );
      assert.equal(t.status, 'completed', t.error);
      assert.deepEqual(t.outcome, { answer: String(secret), looked: true });
      assert.equal(t.turns.length, 2, 'the tool call, then the answer');
      assertExact(t.turns, log);
      assert.equal(team.tokenizer.decode(t.turns[0]!.responseTokens), LOOKUP_CALL);
      // the second call continues the first one's ids: the framework's history was matched, not re-encoded
      const first = t.turns[0]!;
      assert.deepEqual(t.turns[1]!.contextTokens.slice(0, first.contextTokens.length + first.responseTokens.length), [
        ...first.contextTokens,
        ...first.responseTokens,
      ]);
      assert.equal(t.counters!.solver!.retokenizedTurns, 0);
    }
  });

  it('OpenAI Agents SDK (Responses by default, streamed, and Chat Completions): triage hands off, the solver calls its tool and answers; every turn is what the engine sampled', async () => {
    assert.throws(() => agentsHandoffTeam({ api: 'rest' as never }), /teamOptions\.api: must be "responses" or "chat-completions", got "rest"/);
    const digits = [...'0123456789'];
    const afterHandoff = ['[lookup]SAnswer.U?>', HANDOFF_CALL, 'T{"assistant":"solver"}>'];
    // one model per agent: each is taught its own moves
    const versions = {
      triage: await teach(agentsHandoffTeam(), 'sdk', [[['[transfer_to_solver]SRoute.U?>'], [HANDOFF_CALL]]], 'triage'),
      solver: await teach(
        agentsHandoffTeam(),
        'sdk',
        [[afterHandoff, [LOOKUP_CALL]], ...digits.map((d): [string[], string[]] => [[...afterHandoff, LOOKUP_CALL, `T${d}>`], [d]])],
        'solver',
      ),
    };
    const runs: Record<string, Awaited<ReturnType<typeof runBatchedEpisode>>> = {};
    for (const [name, options] of [
      ['responses', {}],
      ['responses streamed', { stream: true }],
      ['chat completions', { api: 'chat-completions' }],
    ] as const) {
      const team = agentsHandoffTeam(options);
      const log: EngineLog = [];
      const t = await runBatchedEpisode(team, { episodeId: 'sdk5', seed: 5, task: { secret: 5 }, versions }, engine.io('sdk', log));
      assert.equal(t.status, 'completed', `${name}: ${t.error}`);
      assert.deepEqual(t.outcome, { answer: '5', handedOff: true, looked: true, lookups: 1 }, name);
      assert.deepEqual(
        t.turns.map((x) => x.agent),
        ['triage', 'solver', 'solver'],
        name,
      );
      assertExact(t.turns, log);
      const [, lookup, answer] = t.turns;
      // the solver's second call continues its first one's ids: the SDK's history was matched, not re-encoded
      assert.deepEqual(answer!.contextTokens.slice(0, lookup!.contextTokens.length + lookup!.responseTokens.length), [
        ...lookup!.contextTokens,
        ...lookup!.responseTokens,
      ]);
      assert.deepEqual(answer!.parents, [lookup!.index], name);
      assert.equal(t.counters!.solver!.gatewayCalls, 2, name);
      runs[name] = t;
    }
    // the same seed gives the same turns whichever API or transport carried them
    const tokens = (t: (typeof runs)[string]) => t.turns.map((x) => [x.contextTokens, x.responseTokens, x.logprobs]);
    assert.deepEqual(tokens(runs['responses streamed']!), tokens(runs.responses!));
    assert.deepEqual(tokens(runs['chat completions']!), tokens(runs.responses!));
    // the solver's answer scores only after one lookup: a second lookup's context is the first's, which loops under greedy eval
    const solverRewards = (outcome: object) =>
      scoreEpisode(agentsHandoffTeam(), { secret: 5 }, { ...runs.responses!, outcome })
        .rewards.filter((r) => r.agent === 'solver')
        .map((r) => r.components);
    assert.deepEqual(solverRewards(runs.responses!.outcome as object), [
      { looked: 1, correct: 1 },
      { looked: 1, correct: 1 },
    ]);
    assert.deepEqual(solverRewards({ answer: '5', handedOff: true, looked: true, lookups: 2 }), [
      { looked: 1, correct: 0 },
      { looked: 1, correct: 0 },
    ]);
  });

  it('Python over plain HTTP: the agent service calls the tool, then answers; every turn is what the engine sampled; a failed episode leaves it serving', async () => {
    const team = pythonLookupTeam();
    const digits = [...'0123456789'];
    const version = await teach(team, 'py', [
      [['[lookup]U?>'], [LOOKUP_CALL]],
      ...digits.map((d): [string[], string[]] => [['[lookup]U?>', LOOKUP_CALL, `T${d}>`], [d]]),
    ]);
    // an episode whose calls fail gets the service's error; the service goes on serving the others
    const unreachable = { solver: { openai: { baseURL: 'http://127.0.0.1:9/v1', apiKey: 'k' } } } as unknown as Parameters<typeof team.episode>[0]['agents'];
    await assert.rejects(team.episode({ task: { secret: 1 }, agents: unreachable }), /python-lookup\.py: \w*(Connection|URL)Error/);
    for (const secret of [2, 9]) {
      const log: EngineLog = [];
      const t = await runBatchedEpisode(
        team,
        { episodeId: `py${secret}`, seed: secret, task: { secret }, versions: { policy: version } },
        engine.io('py', log),
      );
      assert.equal(t.status, 'completed', t.error);
      assert.deepEqual(t.outcome, { answer: String(secret), looked: true });
      assert.equal(t.turns.length, 2, 'the tool call, then the answer');
      assertExact(t.turns, log);
      assert.equal(team.tokenizer.decode(t.turns[0]!.responseTokens), LOOKUP_CALL);
      // the Python process sent back the reply's message (content null, tool_calls): matched to its ids, not re-encoded
      const first = t.turns[0]!;
      assert.deepEqual(t.turns[1]!.contextTokens.slice(0, first.contextTokens.length + first.responseTokens.length), [
        ...first.contextTokens,
        ...first.responseTokens,
      ]);
      assert.deepEqual(t.turns[1]!.parents, [first.index]);
      assert.equal(t.counters!.solver!.retokenizedTurns, 0);
      assert.equal(t.counters!.solver!.gatewayCalls, 2);
    }
  });
});
