/**
 * How pool activities work with the engine: they heartbeat while they work, and
 * engine errors leave them as ApplicationFailures typed by reason, retryable
 * only when another attempt can succeed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { engineFailure, heartbeating, HEARTBEAT_EVERY_MS, withEngineFailures } from '../../../activities/training/engine-work';
import { type EngineError, InvalidRequestError, NonFiniteUpdateError, VersionNotLoadedError, EngineUnavailableError } from '../../../engines/protocol/client';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('heartbeating sends the current details while the work runs, and stops after', async () => {
  const env = new MockActivityEnvironment();
  const beats: unknown[] = [];
  env.on('heartbeat', (d: unknown) => beats.push(d));
  let progress = 0;
  const out = await env.run(() =>
    heartbeating(
      () => ({ finished: progress }),
      async () => {
        progress = 1;
        await sleep(HEARTBEAT_EVERY_MS * 2 + 300);
        progress = 2;
        return 'done';
      },
    ),
  );
  assert.equal(out, 'done');
  assert.deepEqual(beats, [{ finished: 1 }, { finished: 1 }]);
  await sleep(HEARTBEAT_EVERY_MS + 200);
  assert.equal(beats.length, 2, 'no heartbeat after the work ended');
});

test('engine errors become ApplicationFailures typed by reason, non-retryable only when a retry gets the same answer', () => {
  const cases: Array<[EngineError, boolean]> = [
    [new InvalidRequestError('engine Update: settings.lr: must be a finite number >= 0, got Infinity', 3, 'INVALID_REQUEST', 'Update'), true],
    [new NonFiniteUpdateError('engine Update: non-finite loss', 10, 'NON_FINITE_UPDATE', 'Update'), true],
    // The next attempt reloads the version from the store.
    [new VersionNotLoadedError('engine Generate: version 3 of m is not loaded', 5, 'VERSION_NOT_LOADED', 'Generate'), false],
    [new EngineUnavailableError('engine Update: connection refused', 14, 'UNAVAILABLE', 'Update'), false],
  ];
  for (const [err, nonRetryable] of cases) {
    const f = engineFailure(err);
    assert.ok(f instanceof ApplicationFailure);
    assert.equal(f.type, err.reason);
    assert.equal(f.nonRetryable, nonRetryable, err.reason);
    assert.equal(f.message, err.message);
  }
  assert.deepEqual((engineFailure(cases[0]![0]) as ApplicationFailure).details, [
    { reason: 'INVALID_REQUEST', code: 3, method: 'Update', field: 'settings.lr' },
  ]);
  const other = new Error('store down');
  assert.equal(engineFailure(other), other, 'other errors pass unchanged');
});

test('withEngineFailures maps what every activity throws, keeping names and results', async () => {
  const refused = new InvalidRequestError(
    'engine Generate: sequences[0].context[1]: token id 99 is outside the vocabulary [0, 18]',
    3,
    'INVALID_REQUEST',
    'Generate',
  );
  const acts = withEngineFailures({ ok: async (x: number) => x + 1, bad: async () => Promise.reject(refused) });
  assert.deepEqual(Object.keys(acts), ['ok', 'bad']);
  assert.equal(await acts.ok(1), 2);
  await assert.rejects(acts.bad(), (e) => e instanceof ApplicationFailure && e.nonRetryable && e.type === 'INVALID_REQUEST');
});
