/**
 * Half a character in stored JSON: a model's reply cut by UTF-16 unit (`reply.slice(0, 1)` of '𐀀…') holds
 * a lone surrogate, which JSON.stringify writes as `\ud800` and PostgreSQL refuses in jsonb (22P02), so the
 * write and every retry of it failed (issue #50, found with the math team). Troupe's connections
 * (infra/db.ts) store it as U+FFFD, as Node's UTF-8 does in text columns. Against a real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../../../testing/database';

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase({ migrate: false });
});
after(async () => {
  await db?.drop();
});

test('PostgreSQL refuses a lone surrogate escape in jsonb', async () => {
  await assert.rejects(db.sql.unsafe(`SELECT '${JSON.stringify({ reply: '\ud800' })}'::jsonb`), (e: { code?: string }) => e.code === '22P02');
});

test('json and jsonb values keep whole characters and store half ones as U+FFFD', async () => {
  const value = { reply: '\ud800x', tail: 'y\udfff', nested: [{ ok: '😀 ∑ é' }], n: 3 };
  await db.sql`CREATE TABLE t (j jsonb, k json)`;
  await db.sql`INSERT INTO t ${db.sql({ j: db.sql.json(value as never), k: db.sql.json(value as never) })}`;
  const [row] = await db.sql<{ j: unknown; k: unknown }[]>`SELECT j, k FROM t`;
  const expected = { reply: '\ufffdx', tail: 'y\ufffd', nested: [{ ok: '😀 ∑ é' }], n: 3 };
  assert.deepEqual(row!.j, expected);
  assert.deepEqual(row!.k, expected);
});
