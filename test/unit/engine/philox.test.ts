/** Philox4x32-10 against the Random123 known-answer vectors, and the uniform mapping. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fillUniforms, philox4x32, seedKey, STREAM_SAMPLING, toUnit } from '../../../engines/families/philox';

const hex = (a: Uint32Array) => Array.from(a, (x) => x.toString(16).padStart(8, '0')).join(' ');

test('Philox4x32-10 known-answer vectors', () => {
  assert.equal(hex(philox4x32(0, 0, 0, 0, 0, 0)), '6627e8d5 e169c58d bc57ac4c 9b00dbd8');
  const f = 0xffffffff;
  assert.equal(hex(philox4x32(f, f, f, f, f, f)), '408f276d 41c83b0e a20bc7c6 6d5451fd');
  assert.equal(hex(philox4x32(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0)), 'd16cfe09 94fdcceb 5001e420 24126ea1');
});

test('seeds are uint64 (number, bigint or decimal string) and keyed draws are independent of the count', () => {
  assert.deepEqual(seedKey(1), [1, 0]);
  assert.deepEqual(seedKey('18446744073709551615'), [0xffffffff, 0xffffffff]);
  assert.deepEqual(seedKey(2n ** 32n + 5n), [5, 1]);
  assert.throws(() => seedKey(-1), /unsigned 64-bit/);
  assert.throws(() => seedKey('2'.repeat(30)), /unsigned 64-bit/);
  assert.throws(() => seedKey('abc'), /unsigned 64-bit/);
  const a = new Float32Array(10);
  const b = new Float32Array(3);
  fillUniforms(seedKey(99), STREAM_SAMPLING, 10, a);
  fillUniforms(seedKey(99), STREAM_SAMPLING, 3, b);
  assert.deepEqual(Array.from(a.subarray(0, 3)), Array.from(b), 'draw i does not depend on how many are drawn');
  assert.equal(toUnit(0), 0);
  assert.ok(toUnit(0xffffffff) < 1 && Math.fround(toUnit(0xffffffff)) < 1);
  let sum = 0;
  const many = new Float64Array(40000);
  fillUniforms(seedKey(1234), STREAM_SAMPLING, many.length, many);
  for (const u of many) {
    assert.ok(u >= 0 && u < 1);
    sum += u;
  }
  assert.ok(Math.abs(sum / many.length - 0.5) < 0.01);
});
