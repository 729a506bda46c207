/**
 * The real engine the gateway tests sample from: the ONNX CPU engine over gRPC, started
 * around a suite (before / after), an EpisodeIO whose generations it serves with each
 * engine call logged, and the check that recorded turns are exactly those calls.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import type { EpisodeIO, GenerateCall, GenerateReply } from '../../../agents/episode';
import { engineSpec } from '../../../agents/model';
import type { Trajectory } from '../../../schema/trajectory';
import { generateOne } from '../../../activities/training/pool';
import { modelKey } from '../../../activities/training/update-step';
import { EngineClient } from '../../../engines/protocol/client';
import { startEngineServer } from '../../../engines/onnx/server';
import { openGatewaySessions } from '../../../gateway';
import { cpuEngine } from '../engine/helpers';
import { gatewayTeam } from './team';

/** The engine calls of an episode, in order. */
export type EngineLog = Array<{ call: GenerateCall; reply: GenerateReply }>;

/** For the enclosing suite: an engine batching over `batchWindowMs`; `init`: gatewayTeam's two models made at version 0 of run `runId`. */
export function suiteEngine(batchWindowMs: number, init?: { runId: string; seed: number }) {
  let server: Awaited<ReturnType<typeof startEngineServer>> | undefined;
  let client: EngineClient | undefined;
  before(async () => {
    server = await startEngineServer(cpuEngine({ batchWindowMs }), '127.0.0.1', 0);
    client = new EngineClient(server.address);
    if (!init) return;
    const team = gatewayTeam(async () => undefined);
    for (const model of ['policy', 'other'])
      await client.initModel({ modelKey: modelKey(init.runId, model), spec: engineSpec(team.models[model]!), seed: init.seed });
  });
  after(async () => {
    client?.close();
    await server?.shutdown();
  });
  return {
    get client(): EngineClient {
      return client!;
    },
    /** Generations of run `runId` on the engine, each logged; sessions on this thread's gateway unless given. */
    io(runId: string, log: EngineLog = [], openSessions: EpisodeIO['openSessions'] = openGatewaySessions): EpisodeIO {
      return {
        async generate(call) {
          const reply = await generateOne(client!, runId, call);
          log.push({ call, reply });
          return reply;
        },
        callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
        now: () => 0,
        openSessions,
      };
    },
  };
}

/** Each recorded turn is exactly one engine call's context, ids and log-probs. */
export function assertExact(turns: Trajectory['turns'], log: EngineLog) {
  assert.equal(turns.length, log.length);
  for (const [i, t] of turns.entries()) {
    assert.deepEqual(t.contextTokens, log[i]!.call.context, `turn ${i}: context`);
    assert.deepEqual(t.responseTokens, log[i]!.reply.tokens, `turn ${i}: sampled ids`);
    assert.deepEqual(t.logprobs, log[i]!.reply.logprobs, `turn ${i}: behaviour log-probs`);
  }
}

/** What a trajectory's turns sampled: context, ids, log-probs. */
export const sampledTurns = (t: Pick<Trajectory, 'turns'>) => t.turns.map((x) => [x.contextTokens, x.responseTokens, x.logprobs]);
