/**
 * Mistakes no retry can fix fail the run on the first attempt, naming the
 * field, against the real stack (Temporal dev server, PostgreSQL, the pool
 * worker's CPU engine): a turn whose context + maxTokens exceeds the model's
 * maxSeq (known only at run time: the task's message is long) is the engine's
 * INVALID_REQUEST, and a truncated model.safetensors is BadCheckpoint.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ActivityFailure, ApplicationFailure, WorkflowFailedError } from '@temporalio/client';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';
import { failureHint } from '../../../control/runs';

const QWEN = path.resolve(__dirname, '../../fixtures/hf/qwen2-tiny');

describe('runs that cannot work fail at once', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });

  /** The run's failure: the failed activity, its non-retryable cause, and the attempt it failed on. */
  async function failure(workflowId: string, args: Parameters<typeof trainingRun>[0]) {
    let error: unknown;
    await assert.rejects(h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId, args: [args] }), (e) => {
      error = e;
      return e instanceof WorkflowFailedError;
    });
    let activity: ActivityFailure | undefined;
    for (let c = error as Error | undefined; c; c = c.cause as Error | undefined) if (c instanceof ActivityFailure) activity = c;
    assert.ok(activity, `an activity failed: ${String(error)}`);
    const cause = activity.cause;
    assert.ok(cause instanceof ApplicationFailure, String(cause));
    const history = await h.env.client.workflow.getHandle(workflowId).fetchHistory();
    const attempts = history.events!.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes!.attempt ?? 1);
    return { error, activity: activity.activityType, cause, lastAttempt: Math.max(...attempts) };
  }

  it("a turn past the model's maxSeq is a non-retryable INVALID_REQUEST naming the model and the sequence", async () => {
    // recall's transformer holds 32 tokens; BOS + 40 digits + '?' + 1 sampled token do not fit
    const f = await failure('too-long-context', { team: 'recall', teamOptions: { length: 40 }, steps: 1, groupsPerStep: 1, groupSize: 2, evalTasks: 1 });
    assert.equal(f.cause.type, 'INVALID_REQUEST');
    assert.equal(f.cause.nonRetryable, true);
    assert.match(
      f.cause.message,
      /^engine Generate: sequences\[0\]: context \+ tokens = 43 exceeds the model's maxSeq 32 \(a turn of models\.policy: context 42 tokens, maxTokens 1 left\)$/,
    );
    assert.equal(f.lastAttempt, 1, 'no attempt was retried');
    // resume would make the same request with the stored model spec: the CLI points at a new run instead
    assert.match(failureHint(f.error, 'too-long-context'), /fix it and start a new run$/);
  });

  it('a truncated model.safetensors is a non-retryable BadCheckpoint naming the file and field', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-truncated-'));
    for (const f of fs.readdirSync(QWEN)) fs.copyFileSync(path.join(QWEN, f), path.join(dir, f));
    const file = path.join(dir, 'model.safetensors');
    fs.truncateSync(file, fs.statSync(file).size - 100);
    const f = await failure('truncated-checkpoint', {
      team: 'math',
      teamOptions: { policy: 'transformer', checkpoint: dir },
      steps: 1,
      groupsPerStep: 1,
      groupSize: 2,
      evalTasks: 1,
    });
    assert.equal(f.activity, 'initModel');
    assert.equal(f.cause.type, 'BadCheckpoint');
    assert.equal(f.cause.nonRetryable, true);
    assert.match(f.cause.message, new RegExp(`^model policy: checkpoint ${dir}: ${file}: tensor ".+": data_offsets .* \\(the file is truncated\\?\\)$`));
    assert.equal(f.lastAttempt, 1, 'no attempt was retried');
    assert.match(failureHint(f.error, 'truncated-checkpoint'), /troupe resume truncated-checkpoint$/, 'a repaired file lets the run resume');
  });
});
