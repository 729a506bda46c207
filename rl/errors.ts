/**
 * Bad input to the RL core: a FieldError (infra/issues.ts) whose issues name
 * the field by path (`samples[3].rewards.correct`).
 */
import { FieldError, IssueList as FieldIssueList, type FieldIssue } from '../infra/issues';

export { describe } from '../infra/issues';
export type InputIssue = FieldIssue;

export class RlInputError extends FieldError {
  override readonly name = 'RlInputError';
}

/** Collects issues of RL-core input and throws them together as one RlInputError. */
export class IssueList extends FieldIssueList {
  constructor(cap = 20) {
    super(cap, (issues) => new RlInputError(issues));
  }
}
