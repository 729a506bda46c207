/**
 * A turn the gateway takes for an agent's OpenAI-compatible client: the context
 * is the gateway's rendering of the request; the limits, seeds and record are
 * the episode's. A journaled reply (an earlier attempt's) is recorded as the
 * turn's sample instead of generating. A limit the gateway hits ends the
 * episode truncated, even if the agent's code caught the HTTP error.
 */
import type { StopReason, TurnRecord } from '../schema/trajectory';
import type { JournaledTurn, SessionTurnRequest } from './episode';
import { deriveSeed } from './seed';
import { LimitExceeded, type RunningEpisode, TokenVersions, turnLimit } from './turn';

export async function sessionTurn(ep: RunningEpisode, role: string, req: SessionTurnRequest, answered?: JournaledTurn): Promise<TurnRecord> {
  const { team, input, io, turns, lastTurnOf } = ep;
  const tok = team.tokenizer;
  const spec = team.agents[role]!;
  const limit = turnLimit(ep, role, spec);
  if (limit) throw (ep.sessionLimit ??= new LimitExceeded(limit));
  const index = turns.length;
  const started = io.now();
  const sampling = { ...spec.sampling, ...req.sampling, ...input.sampling };
  const response: number[] = [];
  const logprobs: number[] = [];
  const versions = new TokenVersions();
  let budget = Math.min(req.maxTokens, spec.maxTokens);
  let stop: StopReason = answered?.stopReason ?? 'max_tokens';
  if (answered) {
    response.push(...answered.tokens);
    logprobs.push(...answered.logprobs);
    budget = 0;
  }
  for (let segment = 0; budget > 0; segment++) {
    const reply = await io.generate({
      model: spec.model,
      version: input.versions[spec.model]!,
      context: [...req.context, ...response],
      maxTokens: budget,
      stopTokens: [tok.eosId, ...req.stopTokens],
      sampling,
      seed: deriveSeed(input.seed, 'turn', index, 'segment', segment),
    });
    response.push(...reply.tokens);
    logprobs.push(...reply.logprobs);
    versions.add(reply.tokens.length, reply.version ?? input.versions[spec.model]!);
    budget -= reply.tokens.length;
    if (reply.stopReason !== 'stop_token') break;
    if (reply.tokens.at(-1) === tok.eosId || req.stopped(tok.decode(response))) {
      stop = 'eos';
      break;
    }
  }
  const version = versions.first ?? input.versions[spec.model]!;
  const tokenVersions = versions.perToken(version);
  const turn: TurnRecord = {
    index,
    agent: role,
    model: spec.model,
    version,
    ...(tokenVersions ? { tokenVersions } : {}),
    parents: [...new Set(req.parents)].sort((a, b) => a - b),
    contextTokens: req.context,
    responseTokens: response,
    logprobs,
    lossMask: response.map(() => 1 as const),
    stopReason: stop,
    toolCalls: [],
    durationMs: answered ? answered.durationMs : Math.max(0, io.now() - started),
  };
  turns.push(turn);
  lastTurnOf.set(role, index);
  return turn;
}
