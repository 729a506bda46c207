// Waiting for a dependency (Temporal, PostgreSQL, an engine, a worker process) with capped
// exponential backoff. Workers and supervisors use it so that they come up by themselves
// once what they need does, in any start order, instead of exiting on the first refusal.
import { errorMessage } from './errors';

export interface BackoffOptions {
  /** first delay (default 250 ms), doubled per failed attempt */
  initialMs?: number;
  /** cap of the delay (default 5 s) */
  maxMs?: number;
  /** one line per failed attempt, saying what is waited for and why */
  log?: (line: string) => void;
  /** give up (rethrow the last error) once this returns true, e.g. on shutdown */
  stopped?: () => boolean;
  /** false for an error that waiting cannot fix (a configuration error): rethrown at once */
  retryable?: (err: unknown) => boolean;
}

/** The delay after `failures` consecutive failures: initialMs·2^(failures−1), capped at maxMs. */
export function backoffDelay(failures: number, opts: Pick<BackoffOptions, 'initialMs' | 'maxMs'> = {}): number {
  const initial = opts.initialMs ?? 250;
  const max = opts.maxMs ?? 5000;
  return Math.min(max, initial * 2 ** Math.min(Math.max(failures - 1, 0), 30));
}

/** Calls `attempt` until it resolves, sleeping backoffDelay between failures. */
export async function untilAvailable<T>(what: string, attempt: () => Promise<T>, opts: BackoffOptions = {}): Promise<T> {
  for (let failures = 1; ; failures++) {
    try {
      return await attempt();
    } catch (e) {
      if (opts.stopped?.() || opts.retryable?.(e) === false) throw e;
      const delay = backoffDelay(failures, opts);
      opts.log?.(`waiting for ${what}: ${errorMessage(e)} (attempt ${failures}; next in ${(delay / 1000).toFixed(delay < 1000 ? 2 : 0)} s)`);
      await new Promise((r) => setTimeout(r, delay));
      if (opts.stopped?.()) throw e;
    }
  }
}
