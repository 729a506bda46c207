/**
 * TensorBoard's event format as infra/tensorboard-events.ts writes it: CRC32C's check value,
 * records that read back, a record cut short found, the (step, tag) of each point decoded;
 * where the control worker puts each run's files (TROUPE_TENSORBOARD_DIR). TensorBoard's own
 * reader reads a real run's files in test/integration/observability/tensorboard.test.ts.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { it } from 'node:test';
import { crc32c, decodeEvent, encodeEvent, frameRecord, maskedCrc32c, readRecords } from '../../../infra/tensorboard-events';
import { loadConfig } from '../../../infra/config';
import { tensorboardDirsOf } from '../../../processes/control-worker';

it('CRC32C has its check value, masked as TFRecord masks it', () => {
  assert.equal(crc32c(Buffer.from('123456789')), 0xe3069283);
  const c = 0xe3069283;
  assert.equal(maskedCrc32c(Buffer.from('123456789')), (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0);
});

it('records read back in order; a record cut short or corrupted ends what is valid', () => {
  const a = encodeEvent({ step: 3, wallTime: 1.5, tag: 'train/solver/loss', value: 0.25 });
  const b = encodeEvent({ step: 300000, wallTime: 2, tag: 'config', text: 'héllo' });
  const file = Buffer.concat([frameRecord(encodeEvent({ fileVersion: 'brain.Event:2', wallTime: 1 })), frameRecord(a), frameRecord(b)]);
  const all = readRecords(file);
  assert.equal(all.validBytes, file.length);
  assert.deepEqual(
    all.records.map((r) => decodeEvent(r)),
    [[], [{ step: 3, tag: 'train/solver/loss' }], [{ step: 300000, tag: 'config' }]],
  );
  const cut = readRecords(file.subarray(0, file.length - 3));
  assert.equal(cut.records.length, 2);
  assert.equal(cut.validBytes, file.length - frameRecord(b).length);
  const bad = Buffer.from(file);
  bad[bad.length - 10] = bad[bad.length - 10]! ^ 1;
  assert.equal(readRecords(bad).records.length, 2);
});

it('each run gets <state>/runs/<run>/tensorboard, or <TROUPE_TENSORBOARD_DIR>/<run>, or none with off', () => {
  const at = (env: NodeJS.ProcessEnv) => tensorboardDirsOf(loadConfig({ TROUPE_STATE_DIR: '/s', ...env }))?.('r1');
  assert.equal(at({}), path.join('/s', 'runs', 'r1', 'tensorboard'));
  assert.equal(at({ TROUPE_TENSORBOARD_DIR: '/logs/tb' }), path.join('/logs/tb', 'r1'));
  assert.equal(at({ TROUPE_TENSORBOARD_DIR: 'off' }), undefined);
});
