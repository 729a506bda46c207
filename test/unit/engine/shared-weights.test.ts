/**
 * engines/onnx/shared-weights.ts: one array per key while something holds it (a LoRA base shared by the
 * adapters over it and the plain model's version 0), made again once nothing does.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { seededKey, SharedWeights } from '../../../engines/onnx/shared-weights';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
const nextJob = () => new Promise((resolve) => setImmediate(resolve));

test('the same key gives the same array while it is held, and a new one after it is dropped', async () => {
  const shared = new SharedWeights();
  let made = 0;
  const make = () => (made++, Float32Array.of(1, 2, 3));
  let held: Float32Array | undefined = shared.get(seededKey('spec', [1, 0]), make);
  assert.equal(shared.get(seededKey('spec', [1, 0]), make), held);
  assert.notEqual(shared.get(seededKey('spec', [2, 0]), make), held);
  assert.equal(made, 2);
  await nextJob();
  gc();
  assert.deepEqual(shared.keys(), [seededKey('spec', [1, 0])], 'the unheld array went, the held one stays');
  held = undefined;
  await nextJob();
  gc();
  assert.deepEqual(shared.keys(), []);
  shared.get(seededKey('spec', [1, 0]), make);
  assert.equal(made, 3);
});
