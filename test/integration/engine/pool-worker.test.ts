/**
 * The pool worker against a real Temporal dev server: a workflow calls the
 * engine activities on the pool task queue; after the engine process dies the
 * pool worker restarts it, the workflow sees MODEL_NOT_LOADED, refills the
 * version and gets the same tokens as before.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { createPoolWorker, PoolWorker } from '../../../gpu-workers/pool-worker';
import type { SmokeOutput } from './workflows';
import { engineSmokeWorkflow } from './workflows';

const temporalBin = process.env.TROUPE_TEMPORAL_BIN ?? path.join(os.homedir(), '.cache', 'troupe', 'bin', 'temporal');
const skip = fs.existsSync(temporalBin) ? false : `no Temporal CLI at ${temporalBin} (set TROUPE_TEMPORAL_BIN)`;

let env: TestWorkflowEnvironment;
let pool: PoolWorker;
let wfWorker: Worker;
const POOL_QUEUE = 'troupe-gpu-test';
const WF_QUEUE = 'engine-test-workflows';

before(async () => {
  if (skip) return;
  env = await TestWorkflowEnvironment.createLocal({ server: { executable: { type: 'existing-path', path: temporalBin } } });
  pool = await createPoolWorker({ connection: env.nativeConnection, namespace: env.namespace ?? 'default', taskQueue: POOL_QUEUE, device: 'cpu', quietEngine: true });
  wfWorker = await Worker.create({
    connection: env.nativeConnection,
    namespace: env.namespace ?? 'default',
    taskQueue: WF_QUEUE,
    workflowsPath: require.resolve('./workflows'),
  });
});

after(async () => {
  await pool?.shutdown();
  await env?.teardown();
});

test('a workflow generates through the pool queue; the engine is restarted and refilled after it dies', { skip, timeout: 120_000 }, async () => {
  const execute = (id: string, args: Parameters<typeof engineSmokeWorkflow>[0]) =>
    env.client.workflow.execute(engineSmokeWorkflow, { taskQueue: WF_QUEUE, workflowId: id, args: [args] });
  // Both workers run for the whole scenario (runUntil shuts a worker down at the end).
  await pool.worker.runUntil(wfWorker.runUntil(scenario(execute)));
});

async function scenario(execute: (id: string, args: Parameters<typeof engineSmokeWorkflow>[0]) => Promise<SmokeOutput>) {
  const first: SmokeOutput = await execute('smoke-1', { poolQueue: POOL_QUEUE, modelKey: 'smoke', init: true });
  assert.equal(first.generated.sequences.length, 2);
  assert.equal(first.generated.sequences[0].tokens.length, 6);
  assert.deepEqual(first.scored, first.generated.sequences[0].logprobs, 'Score reproduces Generate log-probs');
  assert.equal(first.refilled, false);
  // Same request straight to the engine: identical.
  const direct = await pool.getClient().generate({
    modelKey: 'smoke',
    version: 0,
    sequences: [{ context: [1, 2, 3], seed: '12345678901234567' }, { context: [], seed: 5 }],
    sampling: { temperature: 1, maxTokens: 6 },
  });
  assert.deepEqual(direct, first.generated);

  // Kill the engine; the supervisor starts a fresh (empty) one.
  const supervisor = pool.supervisor!;
  const pid = supervisor.pid;
  process.kill(pid!, 'SIGKILL');
  await supervisor.waitForRestart(pid);
  assert.notEqual(supervisor.pid, pid);
  assert.equal(supervisor.restartCount, 1);

  const second: SmokeOutput = await execute('smoke-2', { poolQueue: POOL_QUEUE, modelKey: 'smoke', init: false, refill: first.exported });
  assert.equal(second.refilled, true, 'the workflow saw MODEL_NOT_LOADED and loaded the version');
  assert.deepEqual(second.generated, first.generated, 'same version + seeds after the restart: same tokens and log-probs');
}
