import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { TroupeError } from '../../../infra/errors';
import { loadMigrations } from '../../../schema/migrate';

function dirWith(files: Record<string, string>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-migrations-'));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  return dir;
}

test('the shipped migrations load, 001 first, numbers unique', () => {
  const ms = loadMigrations();
  assert.ok(ms.length >= 1);
  assert.equal(ms[0]!.version, 1);
  assert.equal(ms[0]!.file, '001_init.sql');
  assert.equal(new Set(ms.map((m) => m.version)).size, ms.length);
});

test('migrations sort by number, not by name', () => {
  const ms = loadMigrations(dirWith({ '010_b.sql': 'select 1', '002_a.sql': 'select 1', '001_z.sql': 'select 1' }));
  assert.deepEqual(
    ms.map((m) => m.version),
    [1, 2, 10],
  );
  assert.equal(ms[0]!.checksum.length, 64);
});

test('duplicate numbers and misnamed files are refused with what to do', () => {
  assert.throws(
    () => loadMigrations(dirWith({ '002_a.sql': '', '002_b.sql': '' })),
    (err: unknown) => err instanceof TroupeError && /two migrations have version 2/.test(err.message) && !!err.hint,
  );
  assert.throws(
    () => loadMigrations(dirWith({ '2-init.sql': '' })),
    (err: unknown) => err instanceof TroupeError && /misnamed/.test(err.message),
  );
});
