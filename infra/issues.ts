/**
 * The one error type for bad input: every problem is a field issue named by
 * its path (`optimizer.models.policy.betas[1]`) so a user finds it without a
 * stack trace, and several are reported at once. The named subclasses
 * (RunConfigError, SettingsError, RlInputError) only say where the input came
 * from; the shape and the message format are defined here, once.
 */
import type { z } from 'zod';

export interface FieldIssue {
  path: string;
  message: string;
}

export class FieldError extends Error {
  readonly issues: readonly FieldIssue[];

  /** `heading` prefixes the message, e.g. `invalid run config: steps: must be >= 1`. */
  constructor(issues: readonly FieldIssue[], heading?: string) {
    const list = issues.map((i) => `${i.path}: ${i.message}`).join('; ');
    super(heading ? `${heading}: ${list}` : list);
    this.name = 'FieldError';
    this.issues = issues;
  }
}

/** Collects issues and throws them together; stops collecting after `cap`. */
export class IssueList {
  private readonly list: FieldIssue[] = [];
  private truncated = false;

  constructor(
    private readonly cap = 20,
    private readonly make: (issues: readonly FieldIssue[]) => FieldError = (issues) => new FieldError(issues),
  ) {}

  add(path: string, message: string): void {
    if (this.list.length < this.cap) this.list.push({ path, message });
    else this.truncated = true;
  }

  get count(): number {
    return this.list.length;
  }

  throwIfAny(): void {
    if (this.list.length === 0) return;
    const issues = this.truncated ? [...this.list, { path: '(more)', message: `further issues omitted after the first ${this.cap}` }] : this.list;
    throw this.make(issues);
  }
}

/** Renders a value for an error message: NaN and Infinity stay readable. */
export function describe(value: unknown): string {
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  if (value === undefined) return 'undefined';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value;
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
    iss.code === 'unrecognized_keys'
      ? iss.keys.map((key) => ({ path: at([...iss.path, key]), message: opts.unknownKey }))
      : [{ path: at(iss.path), message: iss.message }],
  );
}
