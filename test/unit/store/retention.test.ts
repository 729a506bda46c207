import assert from 'node:assert/strict';
import { test } from 'node:test';
import { keptVersions, validatePolicy } from '../../../activities/store/retention';

// Versions 0..12 of one model: version v made by step v-1 (version 0: step -1).
const versions = Array.from({ length: 13 }, (_, v) => ({ version: v, step: v - 1 }));
const sorted = (s: Set<number>) => [...s].sort((a, b) => a - b);

test('keeps version 0, every Nth, the newest keepLast and everything from the resume point on', () => {
  // Resume at step 12 serves version 12 (made by step 11).
  assert.deepEqual(sorted(keptVersions(versions, 12, [], { keepEvery: 5, keepLast: 2 })), [0, 5, 10, 11, 12]);
  // A run that has to resume from version 7 (another model lags) keeps 7..12.
  assert.deepEqual(sorted(keptVersions(versions, 7, [], { keepEvery: 5, keepLast: 1 })), [0, 5, 7, 8, 9, 10, 11, 12]);
});

test('keeps the version each eval ran with: the newest made before its step', () => {
  // Evals at steps 3 and 8 ran with versions 3 (step 2) and 8 (step 7).
  assert.deepEqual(sorted(keptVersions(versions, 12, [3, 8], { keepEvery: 100, keepLast: 1 })), [0, 3, 8, 12]);
});

test('gaps (skipped steps) and a single version', () => {
  const gappy = [
    { version: 0, step: -1 },
    { version: 1, step: 0 },
    { version: 2, step: 4 },
  ];
  assert.deepEqual(sorted(keptVersions(gappy, 2, [3], { keepEvery: 100, keepLast: 1 })), [0, 1, 2]);
  assert.deepEqual(sorted(keptVersions([{ version: 0, step: -1 }], 0, [], { keepEvery: 3, keepLast: 1 })), [0]);
});

test('a policy that would keep nothing is refused, naming the field', () => {
  assert.throws(() => validatePolicy({ keepEvery: 0, keepLast: 1 }), /keepEvery: must be a whole number >= 1/);
  assert.throws(() => validatePolicy({ keepEvery: 1, keepLast: 0.5 }), /keepLast: must be a whole number >= 1/);
});
