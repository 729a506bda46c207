/**
 * The pool worker against a real Temporal dev server, a real PostgreSQL and
 * its engine process: a workflow runs the run's pool activities on the pool
 * queue (version 0 into the store, a turn's generation). After the engine
 * process dies the pool worker restarts it, and the next generation reloads
 * the version from the store and gives the same tokens. A request the engine
 * refuses fails the activity at once, non-retryably, naming the field.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Worker } from '@temporalio/worker';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { loadTeam } from '../../../agents/team-registry';
import type { GenerateCall } from '../../../agents/episode';
import { createRun } from '../../../activities/store/runs';
import { createPoolWorker, type PoolWorker } from '../../../processes/pool-worker';
import { createTestDatabase, startTemporal, uniqueTaskQueue, type TestDatabase } from '../../helpers';
import { engineSmokeWorkflow, type SmokeInput, type SmokeOutput } from './workflows';

let env: TestWorkflowEnvironment;
let db: TestDatabase;
let pool: PoolWorker;
let wfWorker: Worker;
const POOL_QUEUE = uniqueTaskQueue('troupe-gpu-test');
const WF_QUEUE = uniqueTaskQueue('engine-test-workflows');

before(async () => {
  env = await startTemporal();
  db = await createTestDatabase();
  pool = await createPoolWorker({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue: POOL_QUEUE,
    device: 'cpu',
    quietEngine: true,
    sql: db.sql,
    checkpoints: db.checkpoints,
  });
  wfWorker = await Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue: WF_QUEUE,
    workflowsPath: require.resolve('./workflows'),
  });
});

after(async () => {
  await pool?.shutdown();
  await db?.drop();
  await env?.teardown();
});

test(
  'pool activities on the pool queue: the engine is restarted and refilled from the store; a refused request fails at once',
  { timeout: 180_000 },
  async () => {
    const execute = (id: string, args: SmokeInput) => env.client.workflow.execute(engineSmokeWorkflow, { taskQueue: WF_QUEUE, workflowId: id, args: [args] });
    // Both workers run for the whole scenario (runUntil shuts a worker down at the end).
    await pool.worker.runUntil(wfWorker.runUntil(scenario(execute)));
  },
);

async function scenario(execute: (id: string, args: SmokeInput) => Promise<SmokeOutput>) {
  const team = loadTeam('math');
  const runId = 'smoke';
  await createRun(db.sql, { runId, team: 'math', config: {} });
  const call: GenerateCall = {
    model: 'policy',
    version: 0,
    context: [team.tokenizer.bosId, ...team.tokenizer.encode('12+7')],
    maxTokens: 6,
    stopTokens: [],
    sampling: { temperature: 1, topK: 0, topP: 1 },
    seed: 12345,
  };

  const first = await execute('smoke-1', { poolQueue: POOL_QUEUE, runId, init: true, call });
  assert.ok('generated' in first, JSON.stringify(first));
  assert.equal(first.generated.tokens.length, 6);
  assert.equal(first.generated.logprobs.length, 6);

  // Kill the engine; the supervisor starts a fresh (empty) one.
  const supervisor = pool.supervisor!;
  const pid = supervisor.pid;
  process.kill(pid!, 'SIGKILL');
  await supervisor.waitForRestart(pid);
  assert.notEqual(supervisor.pid, pid);
  assert.equal(supervisor.restartCount, 1);

  const second = await execute('smoke-2', { poolQueue: POOL_QUEUE, runId, init: false, call });
  assert.deepEqual(second, first, 'the version reloaded from the store gives the same tokens and log-probs');

  // A token outside the vocabulary: the engine's INVALID_REQUEST, not retried, naming the field.
  const refused = await execute('smoke-3', { poolQueue: POOL_QUEUE, runId, init: false, call: { ...call, context: [team.tokenizer.bosId, 999] } });
  assert.ok('failure' in refused, JSON.stringify(refused));
  assert.equal(refused.failure.type, 'INVALID_REQUEST');
  assert.equal(refused.failure.nonRetryable, true);
  assert.equal(refused.failure.retryState, 'NON_RETRYABLE_FAILURE');
  assert.match(refused.failure.message, /^engine Generate: sequences\[0\]\.context\[1\]: token id 999 is outside the vocabulary/);
  assert.deepEqual(refused.failure.details, [{ reason: 'INVALID_REQUEST', code: 3, method: 'Generate', field: 'sequences[0].context[1]' }]);
}
