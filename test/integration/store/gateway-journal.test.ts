/**
 * The gateway journal in PostgreSQL (activities/store/gateway-journal.ts, migration 011): a tool
 * call's answer (a result or a tool error) is journaled next to the turns of its episode and read
 * back as it was written; a row is a turn or a tool call, never both (the table's CHECK).
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import type { JournaledCall } from '../../../agents/episode';
import { gatewayJournal } from '../../../activities/store/gateway-journal';
import { createTestDatabase, type TestDatabase } from '../../helpers';

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
});
after(async () => db?.drop());

it('journals tool calls between turns and loads them back; a row is a turn or a tool call', async () => {
  const journal = gatewayJournal(db.sql, 'r1');
  const calls: JournaledCall[] = [
    {
      kind: 'tool',
      index: 0,
      agent: 'solver',
      requestHash: 'h0',
      reply: { ok: true, output: { content: [{ type: 'text', text: '42' }] }, rendered: '42', durationMs: 12.5 },
    },
    { index: 1, agent: 'solver', requestHash: 'h1', tokens: [3, 4], logprobs: [-0.5, -0.25], stopReason: 'eos', durationMs: 2 },
    { kind: 'tool', index: 2, agent: 'solver', requestHash: 'h2', reply: { ok: false, error: 'refuse: refused: no', durationMs: 1 } },
  ];
  for (const c of calls) await journal.record('e1', c);
  // a second write of an index keeps the first (a retry answers from it)
  await journal.record('e1', { kind: 'tool', index: 0, agent: 'solver', requestHash: 'other', reply: { ok: false, error: 'x', durationMs: 0 } });
  assert.deepEqual(await journal.load('e1'), calls);
  await assert.rejects(
    db.sql`INSERT INTO gateway_calls (episode_id, call_index, run_id, agent, request_sha256, tokens, logprobs, stop_reason, duration_ms, tool_reply)
           VALUES ('e1', 9, 'r1', 'solver', 'h9', '{1}', '{-1}', 'eos', 1, '{}')`,
    /gateway_calls_turn_or_tool/,
  );
  await journal.clear('e1');
  assert.deepEqual(await journal.load('e1'), []);
});
