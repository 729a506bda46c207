/**
 * `troupe train --json` prints its JSON line also when the run fails: the
 * workflow's status as Temporal has it, and the error. Real dev server, real
 * control worker; the run fails at once (a team that is not registered).
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import { failureJson } from '../../../cli/commands/train';
import { watchRun } from '../../../control/runs';
import { createControlWorker } from '../../../processes/control-worker';
import type { trainingRun } from '../../../workflows/training-run';
import { createTestDatabase, startTemporal, uniqueTaskQueue, workflowBundle, type TestDatabase } from '../../helpers';

let env: TestWorkflowEnvironment;
let db: TestDatabase;
let worker: Worker;
let running: Promise<void>;
const taskQueue = uniqueTaskQueue('train-json');

before(async () => {
  [env, db] = await Promise.all([startTemporal(), createTestDatabase()]);
  worker = await createControlWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    sql: db.sql,
    workflowBundle: await workflowBundle(),
  });
  running = worker.run();
});
after(async () => {
  worker?.shutdown();
  await running;
  await db?.drop();
  await env?.teardown();
});

it('a failed run still gets a JSON line with its status and error', async () => {
  const handle = await env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue, workflowId: 'json-of-failed', args: [{ team: 'chess' }] });
  const error = await watchRun(handle, { quiet: true }).then(
    () => assert.fail('the run should fail'),
    (e: unknown) => e,
  );
  const line = JSON.parse(JSON.stringify(await failureJson(handle, 'chess', error, { runSeconds: 1, setupSeconds: 0.5 })));
  assert.deepEqual(
    { ...line, error: undefined },
    {
      runId: 'json-of-failed',
      workflowId: 'json-of-failed',
      team: 'chess',
      status: 'failed',
      error: undefined,
      wallSeconds: 1.5,
      runSeconds: 1,
      setupSeconds: 0.5,
    },
  );
  assert.match(line.error, /^run json-of-failed failed: .*unknown team "chess"/);
});
