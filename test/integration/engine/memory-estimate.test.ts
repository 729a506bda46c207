/**
 * transformer/memory.ts's estimate of the engine's peak RSS against the measured peak
 * (VmHWM of a real engine process, bench/memory.ts: InitModel, Generate, Score, 2 Updates on
 * the issue's qwen2 layout), within 25%. Small vocabularies here; TROUPE_MEMORY_SWEEP=1 adds
 * the 152k vocabulary of Qwen3's tokenizer at 32–2,048 tokens (each case capped at 3 GB RSS).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatCase, measureCase, QWEN3_VOCAB } from '../../../bench/memory';

const CAP = 3000 * 2 ** 20;
const cases: [number, number][] = [
  [100, 32],
  [1000, 128],
];
if (process.env.TROUPE_MEMORY_SWEEP === '1') for (const seq of [32, 128, 512, 2048]) cases.push([QWEN3_VOCAB, seq]);

for (const [vocab, seq] of cases) {
  test(`engine peak RSS within 25% of the estimate: vocab ${vocab}, ${seq} tokens`, async () => {
    const c = await measureCase(vocab, seq, CAP);
    console.log(`# ${formatCase(c)}`);
    assert.equal(c.hitCap, false, 'the engine passed the 3 GB cap');
    assert.equal(c.error, undefined);
    assert.equal(c.updates, 2);
    const ratio = c.peakRss / c.estimate;
    assert.ok(ratio > 0.75 && ratio < 1.25, `measured ${c.peakRss} vs estimate ${c.estimate} (ratio ${ratio.toFixed(2)})`);
  });
}
