import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { TroupeError } from '../../../infra/errors';
import { loadMigrations, migrate, schemaVersion } from '../../../schema/migrate';
import { createTestDatabase } from '../../helpers';

const newest = () => loadMigrations().at(-1)!.version;

test('migrations apply in order on an empty database, and a second run is a no-op', async () => {
  const db = await createTestDatabase({ migrate: false });
  try {
    assert.equal(await schemaVersion(db.sql), 0);
    const first = await migrate(db.sql);
    assert.equal(first.from, 0);
    assert.equal(first.to, newest());
    assert.deepEqual(
      first.applied,
      loadMigrations().map((m) => m.file),
    );
    const { n } = (await db.sql`select count(*) as n from pings`)[0]!;
    assert.equal(n, 0);

    const second = await migrate(db.sql);
    assert.deepEqual(second, { from: newest(), to: newest(), applied: [] });
    const rows = await db.sql`select version from schema_version order by version`;
    assert.deepEqual(
      rows.map((r) => r.version),
      loadMigrations().map((m) => m.version),
    );
  } finally {
    await db.drop();
  }
});

test('concurrent callers do not race: each migration is applied exactly once', async () => {
  const db = await createTestDatabase({ migrate: false });
  try {
    const results = await Promise.all([migrate(db.sql), migrate(db.sql), migrate(db.sql), migrate(db.sql)]);
    const appliedFiles = results.flatMap((r) => r.applied).sort();
    assert.deepEqual(
      appliedFiles,
      loadMigrations()
        .map((m) => m.file)
        .sort(),
    );
    for (const r of results) assert.equal(r.to, newest());
  } finally {
    await db.drop();
  }
});

test('a database at a newer schema version is refused', async () => {
  const db = await createTestDatabase();
  try {
    const future = newest() + 1;
    await db.sql`insert into schema_version (version, name) values (${future}, 'from_the_future')`;
    await assert.rejects(migrate(db.sql), (err: unknown) => {
      assert.ok(err instanceof TroupeError);
      assert.match(err.message, new RegExp(`schema is at version ${future}, newer than this code knows`));
      assert.ok(err.hint);
      return true;
    });
  } finally {
    await db.drop();
  }
});

test('a failing migration leaves nothing behind (its own transaction)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-mig-'));
  fs.writeFileSync(path.join(dir, '001_ok.sql'), 'create table a (x int);');
  fs.writeFileSync(path.join(dir, '002_broken.sql'), 'create table b (x int);\nselect * from no_such_table;');
  const db = await createTestDatabase({ migrate: false });
  try {
    await assert.rejects(migrate(db.sql, { dir }), /no_such_table/);
    assert.equal(await schemaVersion(db.sql), 1);
    const { b } = (await db.sql`select to_regclass('b') is not null as b`)[0]!;
    assert.equal(b, false);
  } finally {
    await db.drop();
  }
});
