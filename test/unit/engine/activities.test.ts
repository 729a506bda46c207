/**
 * Pool activities in a mocked activity context: they heartbeat while the
 * engine works, abort the engine call when cancelled, and map engine errors to
 * ApplicationFailures typed by reason.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createPoolActivities } from '../../../gpu-workers/activities';
import { EngineClient, NonFiniteUpdateError, EngineUnavailableError } from '../../../gpu-workers/client';
import type { GenerateResponse } from '../../../gpu-workers/types';

/** A stand-in engine client whose generate takes `ms` and honours the abort signal. */
function slowClient(ms: number, seen: { aborted: boolean }) {
  return {
    generate: (_req: unknown, opts?: { signal?: AbortSignal }) =>
      new Promise<GenerateResponse>((resolve, reject) => {
        const t = setTimeout(() => resolve({ version: 0, sequences: [] }), ms);
        opts?.signal?.addEventListener('abort', () => {
          seen.aborted = true;
          clearTimeout(t);
          reject(new Error('call cancelled'));
        });
      }),
  } as unknown as EngineClient;
}

const input = { modelKey: 'm', version: 0, sequences: [{ context: [1], seed: 1 }], sampling: { maxTokens: 1 } };

test('engineGenerate heartbeats every few ms while the engine works', async () => {
  const env = new MockActivityEnvironment();
  let beats = 0;
  env.on('heartbeat', () => beats++);
  const acts = createPoolActivities(() => slowClient(260, { aborted: false }), { heartbeatEveryMs: 50 });
  const out = await env.run(acts.engineGenerate, input);
  assert.deepEqual(out, { version: 0, sequences: [] });
  assert.ok(beats >= 4, `heartbeats: ${beats}`);
});

test('cancelling the activity aborts the engine call', async () => {
  const env = new MockActivityEnvironment();
  const seen = { aborted: false };
  const acts = createPoolActivities(() => slowClient(10_000, seen), { heartbeatEveryMs: 20 });
  const running = env.run(acts.engineGenerate, input);
  setTimeout(() => env.cancel('CANCELLED'), 60);
  await assert.rejects(running, (e) => e instanceof CancelledFailure);
  assert.equal(seen.aborted, true);
});

test('engine errors become ApplicationFailures typed by reason (retryable only when transient)', async () => {
  const env = new MockActivityEnvironment();
  const failing = (err: Error) => ({ update: async () => Promise.reject(err) }) as unknown as EngineClient;
  const nonFinite = new NonFiniteUpdateError('engine Update: non-finite', 10, 'NON_FINITE_UPDATE', 'Update');
  const acts = createPoolActivities(() => failing(nonFinite));
  const req = { modelKey: 'm', baseVersion: 0, requestId: 'r', samples: [] };
  await assert.rejects(env.run(acts.engineUpdate, req), (e) => {
    assert.ok(e instanceof ApplicationFailure);
    assert.equal(e.type, 'NON_FINITE_UPDATE');
    assert.equal(e.nonRetryable, true);
    return true;
  });
  const down = new EngineUnavailableError('engine Update: connection refused', 14, 'UNAVAILABLE', 'Update');
  const acts2 = createPoolActivities(() => failing(down));
  await assert.rejects(new MockActivityEnvironment().run(acts2.engineUpdate, req), (e) => {
    assert.ok(e instanceof ApplicationFailure);
    assert.equal(e.type, 'UNAVAILABLE');
    assert.equal(e.nonRetryable, false);
    return true;
  });
});
