/**
 * How pool activities work with the engine: they heartbeat while they work (so
 * a dead or frozen worker is noticed by the heartbeat timeout,
 * workflows/timeouts.ts), and an engine error leaves them as an
 * ApplicationFailure typed by the engine's reason, non-retryable when a retry
 * cannot fix it. The one place for both.
 */
import { heartbeat } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { EngineError } from '../../engines/protocol/client';
import { ErrorReason } from '../../engines/protocol/errors';

/** Heartbeat period of pool activities (their heartbeat timeout is 10 s). */
export const HEARTBEAT_EVERY_MS = 2000;

/**
 * Engine errors that a retry of the activity cannot fix: the same request gets
 * the same answer. Not among them: MODEL_NOT_LOADED / VERSION_NOT_LOADED (the
 * next attempt reloads the version from the store) and UNAVAILABLE /
 * DEADLINE_EXCEEDED / INTERNAL / CANCELLED (the engine is restarting).
 */
const NON_RETRYABLE = new Set<string>([
  ErrorReason.INVALID_REQUEST,
  ErrorReason.STALE_BASE,
  ErrorReason.VERSION_CONFLICT,
  ErrorReason.REQUEST_ID_REUSED,
  ErrorReason.NON_FINITE_UPDATE,
]);

/**
 * An engine error as an ApplicationFailure: type = the engine's reason,
 * message = the engine's (which names the request field it refused, e.g.
 * `engine Update: settings.lr: must be a finite number >= 0, got Infinity`),
 * details = [{ reason, code, method, field? }]. Other errors pass unchanged.
 */
export function engineFailure(err: unknown): unknown {
  if (!(err instanceof EngineError)) return err;
  const field = err.reason === ErrorReason.INVALID_REQUEST ? /^engine \w+: ([\w.[\]]+): /.exec(err.message)?.[1] : undefined;
  return ApplicationFailure.create({
    message: err.message,
    type: err.reason,
    nonRetryable: NON_RETRYABLE.has(err.reason),
    details: [{ reason: err.reason, code: err.code, method: err.method, ...(field ? { field } : {}) }],
  });
}

/** Activities whose engine errors leave them through engineFailure. */
export function withEngineFailures<A extends Record<string, (...args: never[]) => Promise<unknown>>>(activities: A): A {
  const mapped = Object.entries(activities).map(([name, fn]) => [
    name,
    async (...args: never[]) => {
      try {
        return await fn(...args);
      } catch (e) {
        throw engineFailure(e);
      }
    },
  ]);
  return Object.fromEntries(mapped) as A;
}

/** Runs `work`, heartbeating `details()` every HEARTBEAT_EVERY_MS meanwhile. */
export async function heartbeating<T>(details: () => unknown, work: () => Promise<T>): Promise<T> {
  const beat = setInterval(() => heartbeat(details()), HEARTBEAT_EVERY_MS);
  try {
    return await work();
  } finally {
    clearInterval(beat);
  }
}
