/**
 * Durable replay of an episode's gateway calls. Every call the gateway answers
 * is journaled in the store under its index in the episode and the hash of its
 * request; when the episode runs again (its rollout retried after a pool
 * worker died), a call whose index and request match the journal is answered
 * with the journaled sample at once, so deterministic agent code replays to
 * where the earlier attempt stopped and goes on live, and nothing completed is
 * sampled twice. A request that differs from the journaled one at its index
 * ends the attempt (`JournalDiverged`): the runner forgets the journal and runs
 * the episode again from the start, never a mix of two attempts.
 */
import { createHash } from 'node:crypto';
import type { EpisodeTurns, JournaledCall } from '../agents/episode';
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

/** One episode's calls as the gateway numbers them, against the journal of earlier attempts. */
export class EpisodeCalls {
  private next = 0;
  private earlier: Promise<Map<number, JournaledCall>> | undefined;

  constructor(private readonly episode: EpisodeTurns) {}

  /**
   * Numbers the next call (calls of an episode come one at a time) and gives the journaled
   * reply for it, if an earlier attempt completed the same request at that index.
   */
  async take(agent: string, hash: string): Promise<{ index: number; answered?: JournaledCall }> {
    const index = this.next++;
    const journal = this.episode.journal;
    if (!journal) return { index };
    this.earlier ??= journal.load().then((calls) => new Map(calls.map((c) => [c.index, c])));
    const answered = (await this.earlier).get(index);
    if (!answered) return { index };
    if (answered.agent !== agent || answered.requestHash !== hash) {
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
