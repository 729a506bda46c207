/**
 * Field issues of a schema check: each names the field by path
 * (`optimizer.models.policy.betas[1]`) so a user finds it without a stack trace.
 */
import type { z } from 'zod';

export interface FieldIssue {
  path: string;
  message: string;
}

/** `prefix.a.b[3]`: keys joined with dots, array indices in brackets. */
export function joinPath(prefix: string, path: readonly PropertyKey[]): string {
  let out = prefix;
  for (const key of path) out += typeof key === 'number' ? `[${key}]` : out === '' ? String(key) : `.${String(key)}`;
  return out;
}

/** A zod error as field issues under `prefix`; an unknown key is reported as `unknownKey`. */
export function issuesFromZod(error: z.ZodError, opts: { prefix?: string; unknownKey: string; root?: string }): FieldIssue[] {
  const at = (path: readonly PropertyKey[]) => joinPath(opts.prefix ?? '', path) || (opts.root ?? '(root)');
  return error.issues.flatMap((iss) =>
    iss.code === 'unrecognized_keys' ? iss.keys.map((key) => ({ path: at([...iss.path, key]), message: opts.unknownKey })) : [{ path: at(iss.path), message: iss.message }],
  );
}
