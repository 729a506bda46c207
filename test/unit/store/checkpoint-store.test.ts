import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { CheckpointFileError, CheckpointStore, pathOfUri } from '../../../infra/checkpoint-store';
import { readReference } from '../../../engines/protocol/version-bytes';
import { EngineFault } from '../../../engines/protocol/errors';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-ckpt-unit-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const store = new CheckpointStore({ dir, inlineMaxBytes: 16 });
const bytes = Uint8Array.from({ length: 1000 }, (_, i) => (i * 7) % 251);
// Independent reference: the digest computed here, not by the store.
const digest = createHash('sha256').update(bytes).digest('hex');

test('put writes a file named by run, model, version and content hash; read returns the same bytes', async () => {
  const ref = await store.put('run/1', 'policy', 3, 'weights', bytes);
  assert.deepEqual(ref, { file: `run%2F1/policy/v3-weights-${digest.slice(0, 16)}.bin`, size: 1000, sha256: digest });
  assert.deepEqual(await store.read(ref), bytes);
  assert.equal(pathOfUri(store.uri(ref.file), 'uri'), path.join(dir, 'run%2F1', 'policy', `v3-weights-${digest.slice(0, 16)}.bin`));
  // No temp file is left behind.
  assert.deepEqual(
    (await store.list()).map((f) => f.temp),
    [false],
  );
});

test('the inline limit decides what goes to files', () => {
  assert.equal(store.wantsFiles(16), false);
  assert.equal(store.wantsFiles(17), true);
});

test('a damaged, truncated or missing file is an error naming it, never other bytes', async () => {
  const ref = await store.put('r', 'm', 1, 'weights', bytes);
  const file = store.absolute(ref.file);
  const flipped = new Uint8Array(bytes);
  flipped[500]! ^= 1;
  fs.writeFileSync(file, flipped);
  await assert.rejects(
    store.read(ref),
    (e: Error) => e instanceof CheckpointFileError && e.message.includes(file) && /sha256 is [0-9a-f]{64}, the store recorded/.test(e.message),
  );
  fs.writeFileSync(file, bytes.subarray(0, 999));
  await assert.rejects(store.read(ref), (e: Error) => e.message.includes(file) && e.message.includes('holds 999 bytes, the store recorded 1000'));
  fs.rmSync(file);
  await assert.rejects(store.read(ref), (e: Error) => e.message.includes(file) && e.message.includes('ENOENT'));
});

test('the engine reads a reference and checks it; any failure is REFERENCE_UNREADABLE', async () => {
  const ref = await store.put('r', 'm', 2, 'optimizer', bytes);
  const uri = store.uri(ref.file);
  assert.deepEqual(await readReference({ uri, size: 1000, sha256: digest }, 'weights_ref'), bytes);
  for (const [bad, why] of [
    [{ uri, size: 1000, sha256: '0'.repeat(64) }, /weights_ref: checkpoint file .* sha256 is/],
    [{ uri: 's3://bucket/x', size: 1000, sha256: digest }, /weights_ref\.uri: only file:\/\/ references/],
    [{ uri: `${uri}.missing`, size: 1000, sha256: digest }, /cannot be read \(ENOENT\)/],
  ] as const) {
    await assert.rejects(
      readReference(bad, 'weights_ref'),
      (e: Error) => e instanceof EngineFault && e.reason === 'REFERENCE_UNREADABLE' && why.test(e.message),
    );
  }
});

test('a relative store folder is refused', () => {
  assert.throws(() => new CheckpointStore({ dir: 'relative/ckpt', inlineMaxBytes: 0 }), /dir must be absolute/);
});
