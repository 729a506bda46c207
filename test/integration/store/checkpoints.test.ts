// The checkpoint store against real PostgreSQL and a real child process killed
// with SIGKILL mid-write; then retention and `troupe gc` (the CLI as a user runs it).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { orphanFiles } from '../../../activities/store/retention';
import { getVersion, listVersions, locateVersion } from '../../../activities/store/versions';
import { CheckpointStore, sha256Hex } from '../../../infra/checkpoint-store';
import { repoRoot } from '../../../infra/paths';
import { createTestDatabase, type TestDatabase } from '../../helpers';
import { versionBytes } from './version-bytes';

const SIZE = 16 << 20;
const RUN = 'durable';
let db: TestDatabase;
let store: CheckpointStore;

before(async () => {
  db = await createTestDatabase();
  store = new CheckpointStore({ dir: db.checkpoints.dir, inlineMaxBytes: 0 });
});
after(async () => db?.drop());

/**
 * Starts the writer and kills it while it writes its second version, at
 * `fraction` of the time its first version took (hashing, files, fsyncs, commit):
 * the kill lands in a phase of the write that does not depend on the machine's speed.
 */
function writeAndKill(fraction: number): Promise<{ announced: number; lastCommitted: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(__dirname, 'checkpoint-writer.ts')], {
    cwd: repoRoot,
    env: { ...process.env, DATABASE_URL: db.url, CKPT_DIR: store.dir, RUN_ID: RUN, WEIGHT_BYTES: String(SIZE) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let announced = 0;
  let lastCommitted = 0;
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  return new Promise((resolve, reject) => {
    let seen = 0;
    let started = 0;
    let took = 0;
    child.stdout.on('data', (d: Buffer) => {
      for (const line of d.toString().split('\n')) {
        const [what, n] = line.split(' ');
        if (what === 'committed') {
          lastCommitted = Number(n);
          took ||= performance.now() - started;
        }
        if (what === 'writing' && ++seen === 1) started = performance.now();
        if (what === 'writing' && seen === 2) {
          announced = Number(n);
          setTimeout(() => child.kill('SIGKILL'), fraction * took);
        }
      }
    });
    child.on('exit', (code, signal) => (signal === 'SIGKILL' ? resolve({ announced, lastCommitted }) : reject(new Error(`writer exited ${code}: ${err}`))));
  });
}

describe('checkpoint store durability', () => {
  it('kill -9 during checkpoint writes leaves each version whole or absent, never torn', async () => {
    const leftovers: string[] = [];
    for (const fraction of [0.2, 0.4, 0.6, 0.75, 0.9, 0.97]) {
      const { announced, lastCommitted } = await writeAndKill(fraction);
      const latest = (await listVersions(db.sql, RUN)).at(-1)!.version;
      // The version being written when killed is either committed whole or not at all.
      assert.ok(latest === announced || latest === announced - 1, `after kill at ${fraction} of a write: latest v${latest}, was writing v${announced}`);
      assert.ok(latest >= lastCommitted);
      // Every file that got its final name is complete: its bytes hash to the name's prefix.
      for (const f of await store.list()) {
        if (f.temp) continue;
        const prefix = /-([0-9a-f]{16})\.bin$/.exec(f.file)![1];
        assert.equal(sha256Hex(new Uint8Array(fs.readFileSync(store.absolute(f.file)))).slice(0, 16), prefix, `${f.file} complete`);
      }
      // What this kill left behind: temp files, or a file whose row never committed (both unnamed).
      const orphans = await orphanFiles(db.sql, store, 0);
      leftovers.push(...orphans);
      for (const f of orphans) await store.remove(f);
    }
    assert.ok(leftovers.length > 0, 'at least one kill landed between a file write and its commit');
    // Every committed version reads back bit-identical, checked against its sha256.
    const all = await listVersions(db.sql, RUN);
    assert.deepEqual(
      all.map((v) => v.version),
      Array.from({ length: all.length }, (_, i) => i),
      'contiguous versions',
    );
    for (const v of all) {
      const read = (await getVersion(db.sql, store, RUN, 'policy', v.version))!;
      const want = versionBytes(v.version, SIZE);
      assert.ok(Buffer.from(read.weights).equals(want.weights) && Buffer.from(read.optimizerState).equals(want.optimizer), `v${v.version} bit-identical`);
    }
  });

  it('a corrupted file is reported with its path, not loaded', async () => {
    const v = (await locateVersion(db.sql, RUN, 'policy', 1))!;
    assert.equal(v.bytes.kind, 'files');
    const file = store.absolute((v.bytes as { weights: { file: string } }).weights.file);
    const saved = new Uint8Array(fs.readFileSync(file));
    const damaged = new Uint8Array(saved);
    damaged[12345]! ^= 0xff;
    fs.writeFileSync(file, damaged);
    try {
      await assert.rejects(
        getVersion(db.sql, store, RUN, 'policy', 1),
        (e: Error) => e.message.includes(file) && /sha256 is .* the store recorded/.test(e.message),
      );
    } finally {
      fs.writeFileSync(file, saved);
    }
  });
});

describe('troupe gc', () => {
  const gc = (...args: string[]) =>
    new Promise<{ code: number; out: string; err: string }>((resolve) => {
      const child = spawn(process.execPath, [path.join(repoRoot, 'cli', 'bin.js'), 'gc', '--run', RUN, ...args], {
        env: { ...process.env, DATABASE_URL: db.url, TROUPE_CHECKPOINT_DIR: store.dir },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (err += d));
      child.on('exit', (code) => resolve({ code: code ?? 1, out, err }));
    });

  it('--dry-run lists what the policy prunes and removes nothing; a real run prunes exactly that', async () => {
    const all = await listVersions(db.sql, RUN);
    const newest = all.at(-1)!.version;
    assert.ok(newest >= 5, `the durability test committed v${newest}`);
    // Kept: v0, multiples of 4, the newest (it is also the resume point: the run resumes after its step).
    const expected = all.map((v) => v.version).filter((v) => v !== 0 && v % 4 !== 0 && v !== newest);
    const filesBefore = (await store.list()).length;
    const dry = await gc('--keep-every', '4', '--keep-last', '1', '--dry-run');
    assert.equal(dry.code, 0, dry.err);
    assert.deepEqual(
      dry.out
        .trim()
        .split('\n')
        .map((l) => Number(/ v(\d+) /.exec(l)![1])),
      expected,
    );
    assert.equal((await store.list()).length, filesBefore, 'dry run removed nothing');

    const real = await gc('--keep-every', '4', '--keep-last', '1');
    assert.equal(real.code, 0, real.err);
    assert.equal((await store.list()).length, filesBefore - 2 * expected.length, 'two files per pruned version');
    for (const v of all) {
      if (expected.includes(v.version)) await assert.rejects(getVersion(db.sql, store, RUN, 'policy', v.version), /pruned by troupe gc/);
      else assert.ok(Buffer.from((await getVersion(db.sql, store, RUN, 'policy', v.version))!.weights).equals(versionBytes(v.version, SIZE).weights));
    }
    // History stays: every row with its step and sha256.
    assert.deepEqual(
      (await listVersions(db.sql, RUN)).map((v) => v.sha256),
      all.map((v) => v.sha256),
    );
    const again = await gc('--keep-every', '4', '--keep-last', '1');
    assert.equal(again.out.trim(), '', 'nothing left to prune');
  });

  it('bad flags are refused naming the flag', async () => {
    const r = await gc('--keep-every', '0');
    assert.notEqual(r.code, 0);
    assert.match(r.err, /keepEvery: must be a whole number >= 1/);
  });
});
