/**
 * One error type for bad input to the RL core. Every issue names the field
 * by path (`samples[3].rewards.correct`) so a user can find it without a
 * stack trace; several issues are reported at once, up to a cap.
 */

export interface InputIssue {
  path: string;
  message: string;
}

export class RlInputError extends Error {
  readonly issues: readonly InputIssue[];

  constructor(issues: readonly InputIssue[]) {
    super(issues.map((i) => `${i.path}: ${i.message}`).join('\n'));
    this.name = 'RlInputError';
    this.issues = issues;
  }
}

/** Collects issues and throws them together; stops collecting after `cap`. */
export class IssueList {
  private readonly list: InputIssue[] = [];
  private truncated = false;

  constructor(private readonly cap = 20) {}

  add(path: string, message: string): void {
    if (this.list.length < this.cap) this.list.push({ path, message });
    else this.truncated = true;
  }

  get count(): number {
    return this.list.length;
  }

  throwIfAny(): void {
    if (this.list.length === 0) return;
    const issues = this.truncated
      ? [...this.list, { path: '(more)', message: `further issues omitted after the first ${this.cap}` }]
      : this.list;
    throw new RlInputError(issues);
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
