// Which folder keeps the embedded PostgreSQL's `postgres` user out (stack/postgres.ts blockingFolder),
// checked on real folders with real modes and owners.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { blockingFolder } from '../../../stack/postgres';

test('blockingFolder names the first folder a user can neither enter as owner, group nor other', (t) => {
  if (process.getuid?.() !== 0) return t.skip('needs root (chown)');
  const top = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-folders-')); // 700, root's
  try {
    const inner = path.join(top, 'a', 'b');
    fs.mkdirSync(inner, { recursive: true, mode: 0o755 });
    const who = { uid: 54321, gid: 54321 };
    assert.equal(blockingFolder(inner, who), top);
    assert.equal(blockingFolder(path.join(inner, 'not-yet'), who), top);
    fs.chmodSync(top, 0o701);
    assert.equal(blockingFolder(inner, who), undefined);
    fs.chmodSync(path.join(top, 'a'), 0o750); // group may enter, others not
    assert.equal(blockingFolder(inner, who), path.join(top, 'a'));
    fs.chownSync(path.join(top, 'a'), 0, who.gid);
    assert.equal(blockingFolder(inner, who), undefined);
    fs.chmodSync(path.join(top, 'a'), 0o700);
    fs.chownSync(path.join(top, 'a'), who.uid, 0); // the owner may enter
    assert.equal(blockingFolder(inner, who), undefined);
    assert.equal(blockingFolder(inner), path.join(top, 'a'), 'a user not created yet counts as "other"');
  } finally {
    fs.rmSync(top, { recursive: true, force: true });
  }
});
