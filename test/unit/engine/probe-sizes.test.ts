// The batch-invariance probe tests only run shapes the runtime makes: a runtime that splits batches
// by memory never runs more than its largest run (engines/onnx/invariance.ts probeSizes).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { probeSizes } from '../../../engines/onnx/invariance';
import { TransformerRuntime } from '../../../engines/onnx/transformer/runtime';
import { defaultMemoryPolicy, sessionFactory } from '../../../engines/onnx/device';
import { normalizeTransformerSpec } from '../../../engines/families/transformer/spec';

const SIZES = [2, 3, 5, 8, 17, 64, 255, 1024];

it('keeps the sizes up to the largest run and probes that run itself', () => {
  assert.deepEqual(probeSizes(SIZES, 40), [2, 3, 5, 8, 17, 40]);
  assert.deepEqual(probeSizes(SIZES, 64), [2, 3, 5, 8, 17, 64]);
  assert.deepEqual(probeSizes(SIZES, 2), [2]);
  assert.deepEqual(probeSizes(SIZES, Infinity), SIZES, 'a runtime without a bound is probed at every size');
  assert.deepEqual(probeSizes(SIZES, 5000), SIZES);
});

it("a transformer's largest run at Qwen3's vocabulary is far below --max-batch (so is its probe)", () => {
  const spec = normalizeTransformerSpec({ vocabSize: 151_669, width: 16, layers: 1, heads: 4, kvHeads: 1, mlpWidth: 32, maxSeq: 128 });
  const rt = new TransformerRuntime(spec, sessionFactory('cpu', { intraOpThreads: 1, memory: defaultMemoryPolicy() }));
  // By hand: a generate row of 67 positions holds 24 vocabulary-sized floats (24 * 4 * 151,669 B =
  // 13.9 MiB) plus its caches and prefill (0.3 MiB), so a 256 MiB run holds floor(256 / 14.2) = 18
  // rows; a score sequence of 67 positions is smaller, so generate sets the bound.
  assert.equal(rt.largestRun(67), 18);
  assert.deepEqual(probeSizes(SIZES, 18), [2, 3, 5, 8, 17, 18]);
});
