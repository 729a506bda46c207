// One error type for everything a user can fix: a one-line message plus what to do.
// The CLI prints `troupe: <message>` and `  → <hint>`; stacks only with TROUPE_DEBUG=1.
import { isTemporalOutage } from './outage';

export class TroupeError extends Error {
  /** What the user should do about it (one or two short sentences). */
  readonly hint?: string;

  constructor(message: string, hint?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TroupeError';
    this.hint = hint;
  }
}

export function isTroupeError(err: unknown): err is TroupeError {
  return err instanceof Error && err.name === 'TroupeError';
}

/** The message of any thrown value, on one line. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return (err.message || err.name).split('\n')[0]!;
  return String(err).split('\n')[0]!;
}

/** Format an error the way the CLI prints it: one line, then `  → hint` if there is one. */
export function formatError(err: unknown, opts: { debug?: boolean } = {}): string {
  const lines = [`troupe: ${errorMessage(err)}`];
  if (isTroupeError(err) && err.hint) lines.push(`  → ${err.hint}`);
  if (opts.debug && err instanceof Error && err.stack) {
    lines.push(err.stack);
    let cause = err.cause;
    while (cause instanceof Error) {
      lines.push(`caused by: ${cause.stack ?? cause.message}`);
      cause = cause.cause;
    }
  } else if (isTemporalOutage(err)) {
    lines.push('  → Temporal is unreachable (down, restarting, or a wrong TEMPORAL_ADDRESS): `npx troupe doctor` checks it, `npx troupe up` starts it');
  } else if (!isTroupeError(err)) {
    lines.push('  → this looks like a bug in Troupe; run again with TROUPE_DEBUG=1 for the stack trace');
  }
  return lines.join('\n');
}
