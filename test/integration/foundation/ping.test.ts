// The trivial path end to end: real dev server, real PostgreSQL, the real control worker.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { createControlWorker } from '../../../processes/control-worker';
import { TROUPE_SEARCH_ATTRIBUTES } from '../../../infra/search-attributes';
import { pingWorkflow } from '../../../workflows';
import { createTestDatabase, startTemporal, type TestDatabase, uniqueTaskQueue, workflowBundle } from '../../helpers';

let env: TestWorkflowEnvironment;
let db: TestDatabase;

before(async () => {
  [env, db] = await Promise.all([startTemporal(), createTestDatabase()]);
});

after(async () => {
  await env?.teardown();
  await db?.drop();
});

test('pingWorkflow writes a row through the control worker and returns it', async () => {
  const taskQueue = uniqueTaskQueue('ping');
  const worker = await createControlWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue,
    sql: db.sql,
    workflowBundle: await workflowBundle(),
  });
  const workflowId = `ping-${taskQueue}`;
  const row = await worker.runUntil(env.client.workflow.execute(pingWorkflow, { taskQueue, workflowId, args: [{ message: 'hello' }] }));
  assert.equal(row.message, 'hello');
  assert.equal(row.workflowId, workflowId);
  assert.ok(Number.isInteger(row.id) && row.id > 0);

  const rows = await db.sql`select id, message, workflow_id from pings`;
  assert.deepEqual(
    rows.map((r) => ({ ...r })),
    [{ id: row.id, message: 'hello', workflow_id: workflowId }],
  );
});

test("the dev server has Troupe's search attributes registered", async () => {
  const res = await env.connection.operatorService.listSearchAttributes({ namespace: env.namespace ?? 'default' });
  const custom = Object.keys(res.customAttributes ?? {});
  for (const name of Object.keys(TROUPE_SEARCH_ATTRIBUTES)) assert.ok(custom.includes(name), `${name} registered`);
});
