/**
 * The gateway's journal in Postgres (table gateway_calls, gateway/journal.ts):
 * the calls a batched episode of a run completed, read back when the episode
 * runs again: a turn's sampled tokens, or a tool call's answer (tool_reply). Writing a call twice
 * keeps the first (a retry answers from it).
 */
import type { CallJournal, JournaledCall, ToolCallReply } from '../../agents/episode';
import type { StopReason } from '../../schema/trajectory';
import type { Sql } from '../../infra/db';

export function gatewayJournal(sql: Sql, runId: string): CallJournal {
  return {
    async load(episodeId) {
      const rows = await sql`
        SELECT call_index, agent, request_sha256, tokens, logprobs, stop_reason, duration_ms, tool_reply
        FROM gateway_calls WHERE episode_id = ${episodeId} AND run_id = ${runId} ORDER BY call_index`;
      return rows.map((r): JournaledCall => {
        const call = { index: r.call_index as number, agent: r.agent as string, requestHash: r.request_sha256 as string };
        if (r.tool_reply !== null) return { ...call, kind: 'tool', reply: r.tool_reply as ToolCallReply };
        return {
          ...call,
          tokens: r.tokens as number[],
          logprobs: r.logprobs as number[],
          stopReason: r.stop_reason as StopReason,
          durationMs: r.duration_ms as number,
        };
      });
    },
    async record(episodeId, c) {
      if (c.kind === 'tool')
        await sql`
          INSERT INTO gateway_calls (episode_id, call_index, run_id, agent, request_sha256, duration_ms, tool_reply)
          VALUES (${episodeId}, ${c.index}, ${runId}, ${c.agent}, ${c.requestHash}, ${c.reply.durationMs}, ${sql.json(c.reply as never)})
          ON CONFLICT (episode_id, call_index) DO NOTHING`;
      else
        await sql`
          INSERT INTO gateway_calls (episode_id, call_index, run_id, agent, request_sha256, tokens, logprobs, stop_reason, duration_ms)
          VALUES (${episodeId}, ${c.index}, ${runId}, ${c.agent}, ${c.requestHash}, ${sql.array(c.tokens, 23)}, ${sql.array(c.logprobs, 701)},
                  ${c.stopReason}, ${c.durationMs})
          ON CONFLICT (episode_id, call_index) DO NOTHING`;
    },
    async clear(episodeId) {
      await sql`DELETE FROM gateway_calls WHERE episode_id = ${episodeId} AND run_id = ${runId}`;
    },
  };
}
