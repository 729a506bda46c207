import assert from 'node:assert/strict';
import { test } from 'node:test';
import { backoffDelay, untilAvailable } from '../../../infra/backoff';

test('backoff doubles from the initial delay and stops at the cap', () => {
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6, 7, 40].map((n) => backoffDelay(n)),
    [250, 500, 1000, 2000, 4000, 5000, 5000, 5000],
  );
  assert.deepEqual(
    [1, 2, 3].map((n) => backoffDelay(n, { initialMs: 10, maxMs: 25 })),
    [10, 20, 25],
  );
});

test('untilAvailable retries until the attempt succeeds, logging what it waits for', async () => {
  const lines: string[] = [];
  let calls = 0;
  const v = await untilAvailable(
    'the thing',
    async () => {
      if (++calls < 3) throw new Error(`refused ${calls}`);
      return 'up';
    },
    { initialMs: 1, log: (l) => lines.push(l) },
  );
  assert.equal(v, 'up');
  assert.equal(calls, 3);
  assert.deepEqual(
    lines.map((l) => l.replace(/next in .*$/, '')),
    ['waiting for the thing: refused 1 (attempt 1; ', 'waiting for the thing: refused 2 (attempt 2; '],
  );
});

test('untilAvailable rethrows once stopped', async () => {
  await assert.rejects(
    untilAvailable(
      'x',
      async () => {
        throw new Error('down');
      },
      { initialMs: 1, stopped: () => true },
    ),
    /down/,
  );
});

test('untilAvailable rethrows at once an error that waiting cannot fix', async () => {
  let calls = 0;
  await assert.rejects(
    untilAvailable(
      'x',
      async () => {
        calls++;
        throw new TypeError('bad flag');
      },
      { initialMs: 1, retryable: (e) => !(e instanceof TypeError) },
    ),
    /bad flag/,
  );
  assert.equal(calls, 1);
});
