/** `troupe list` shows one row per run: its latest execution that worked on it. */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { latestExecutions, type ExecutionRow } from '../../../cli/commands/list';
import { phaseAfterClose } from '../../../activities/store/run-end';

const row = (run: string, status: string, ranTheRun = true, phase = 'running'): ExecutionRow => ({
  run,
  workflowId: run,
  status,
  phase,
  started: '2026-11-22T00:00:00.000Z',
  ranTheRun,
});

it('collapses continued-as-new and resumed executions into one row per run; a refused start never hides its run', () => {
  // As visibility lists them: running first, then most recently closed first.
  const rows = latestExecutions([
    row('a', 'RUNNING'),
    row('b', 'FAILED', false, 'failed'), // a refused second start of b
    row('a', 'CONTINUED_AS_NEW', true, 'continued'),
    row('b', 'COMPLETED', true, 'completed'),
    row('a', 'TERMINATED'),
    row('c', 'FAILED', false, 'failed'), // a config that failed validation: its own row
  ]);
  assert.deepEqual(
    rows.map((r) => `${r.workflowId}:${r.status}:${r.phase}`),
    ['a:RUNNING:running', 'b:COMPLETED:completed', 'c:FAILED:failed'],
  );
});

it('a phase the workflow could not record is replaced by how it closed; a recorded end stays', () => {
  assert.equal(phaseAfterClose('TERMINATED', 'running'), 'terminated');
  assert.equal(phaseAfterClose('TIMED_OUT', 'paused'), 'timed-out');
  assert.equal(phaseAfterClose('TERMINATED', undefined), 'terminated');
  assert.equal(phaseAfterClose('FAILED', 'evaluating'), 'failed');
  assert.equal(phaseAfterClose('FAILED', 'failed'), 'failed');
  assert.equal(phaseAfterClose('TERMINATED', 'completed'), 'completed');
  assert.equal(phaseAfterClose('CONTINUED_AS_NEW', 'continued'), 'continued');
  assert.equal(phaseAfterClose('RUNNING', 'running'), 'running');
  assert.equal(phaseAfterClose('COMPLETED', 'completed'), 'completed');
});
