/**
 * Durable replay of an episode's gateway calls. Every call the gateway answers
 * is journaled in the store under its index in the episode and the hash of its
 * request; when the episode runs again (its rollout retried after a pool
 * worker died), a call whose index and request match the journal is answered
 * with the journaled sample at once, so deterministic agent code replays to
 * where the earlier attempt stopped and goes on live, and nothing completed is
 * sampled twice. The agent's tool calls through the gateway's MCP server (gateway/mcp.ts) are
 * numbered and journaled in the same sequence, with the tool's answer, so no completed tool call
 * is made twice either. A request that differs from the journaled one at its index
 * ends the attempt (`JournalDiverged`): the runner forgets the journal and runs
 * the episode again from the start, never a mix of two attempts.
 */
import { createHash } from 'node:crypto';
import type { EpisodeTurns, JournaledCall, JournaledToolCall, JournaledTurn } from '../agents/episode';
import { GatewayError } from './errors';
import type { ChatRequest } from './request';

/** Per agent: calls answered from the journal, and episodes restarted because the code diverged from it. */
export const JOURNAL_COUNTERS = { replayed: 'journalReplayedCalls', restarts: 'journalRestarts' } as const;

/** Sorted keys, undefined fields left out: the same text (and hash) however a client orders an object. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}

/**
 * The request as it decides the turn: the agent and every parsed field but the
 * transport's (stream, usage, log-probs in the reply change no token).
 */
export function requestHash(agent: string, req: ChatRequest): string {
  const { stream: _s, includeUsage: _u, logprobs: _l, params: _p, ...decides } = req;
  return createHash('sha256')
    .update(canonical([agent, decides]))
    .digest('hex');
}

/**
 * A call of one of the agent's tools as it decides the answer: the agent, the tool and its input.
 * Its first element, which no agent's name is, keeps it from ever equalling a turn's hash.
 */
export function toolCallHash(agent: string, tool: string, input: unknown): string {
  return createHash('sha256')
    .update(canonical(['tools/call', agent, tool, input]))
    .digest('hex');
}

/** One episode's calls as the gateway numbers them, against the journal of earlier attempts. */
export class EpisodeCalls {
  private next = 0;
  private earlier: Promise<Map<number, JournaledCall>> | undefined;

  constructor(private readonly episode: EpisodeTurns) {}

  /**
   * Numbers the next call, a turn (calls of an episode come one at a time), and gives the
   * journaled reply for it, if an earlier attempt completed the same request at that index.
   */
  async takeTurn(agent: string, hash: string): Promise<{ index: number; answered?: JournaledTurn }> {
    const { index, answered } = await this.take(agent, hash, 'turn');
    return answered && answered.kind !== 'tool' ? { index, answered } : { index };
  }

  /** takeTurn for a call of one of the agent's tools: its index, and the journaled answer to it. */
  async takeTool(agent: string, hash: string): Promise<{ index: number; answered?: JournaledToolCall }> {
    const { index, answered } = await this.take(agent, hash, 'tool');
    return answered?.kind === 'tool' ? { index, answered } : { index };
  }

  private async take(agent: string, hash: string, kind: 'turn' | 'tool'): Promise<{ index: number; answered?: JournaledCall }> {
    const index = this.next++;
    const journal = this.episode.journal;
    if (!journal) return { index };
    this.earlier ??= journal.load().then((calls) => new Map(calls.map((c) => [c.index, c])));
    const answered = (await this.earlier).get(index);
    if (!answered) return { index };
    if (answered.agent !== agent || answered.requestHash !== hash || (answered.kind ?? 'turn') !== kind) {
      const e = this.episode.diverged(agent, index);
      throw new GatewayError(409, e.message, null, 'journal_diverged', 'server_error');
    }
    return { index, answered };
  }

  /** Journals a call sampled live (a replayed one is in the journal already). */
  async record(call: JournaledCall): Promise<void> {
    await this.episode.journal?.record(call);
  }
}
