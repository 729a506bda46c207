/**
 * The payload codec end to end: with TROUPE_PAYLOAD_KEY set on the client and both workers,
 * a training run completes, and Temporal's stored history — fetched raw by a client without
 * the codec — holds no cleartext of the run config or of the prompts: every payload is
 * encrypted. The same history decoded with the codec does contain the config, so the
 * cleartext check below would see it were it there.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Client } from '@temporalio/client';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { createPoolWorker } from '../../../processes/pool-worker';
import { AesGcmCodec, ENCRYPTED_ENCODING } from '../../../infra/codec';
import { loadConfig } from '../../../infra/config';
import { createControlWorker } from '../../../processes/control-worker';
import { temporalClient } from '../../../infra/temporal-connection';
import { startTrainingRun, validateRunConfig } from '../../../control/runs';
import { createTestDatabase, startTemporal, uniqueTaskQueue, workflowBundle } from '../../helpers';

/**
 * Every payload of Troupe's data in a history message (any depth). Left out, because Temporal
 * must read them and they are not Troupe's data: search attributes (run id, team, step, status,
 * and the SDK's patch list) and the SDK's marker metadata (patch ids, a local activity's
 * sequence number and type); a local activity's result (marker detail `result`) is included.
 */
function payloadsIn(node: unknown, out: Payload[] = [], key = ''): Payload[] {
  if (!node || typeof node !== 'object' || ArrayBuffer.isView(node) || key === 'searchAttributes') return out;
  const o = node as Record<string, unknown>;
  if (o.metadata && typeof o.metadata === 'object' && 'data' in o && ArrayBuffer.isView(o.data)) out.push(o as Payload);
  else if (key === 'markerRecordedEventAttributes') payloadsIn((o.details as Record<string, unknown> | undefined)?.result, out, 'result');
  else for (const [k, v] of Object.entries(o)) payloadsIn(v, out, k);
  return out;
}

test('payload codec: a run completes and its raw history holds only encrypted payloads, no cleartext config or prompts', { timeout: 300_000 }, async () => {
  const env = await startTemporal();
  const db = await createTestDatabase();
  const namespace = env.namespace ?? 'default';
  const taskQueue = uniqueTaskQueue('codec');
  const poolQueue = uniqueTaskQueue('codec-gpu');
  const config = loadConfig({ TROUPE_PAYLOAD_KEY: Buffer.alloc(32, 0x5c).toString('base64'), TROUPE_PAYLOAD_KEY_ID: 'test-key-1' });
  const control = await createControlWorker({
    connection: env.nativeConnection,
    namespace,
    taskQueue,
    sql: db.sql,
    poolTaskQueue: poolQueue,
    payloadKeys: config.payloadKeys,
    workflowBundle: await workflowBundle(),
  });
  const pool = await createPoolWorker({
    connection: env.nativeConnection,
    namespace,
    taskQueue: poolQueue,
    device: 'cpu',
    quietEngine: true,
    sql: db.sql,
    payloadKeys: config.payloadKeys,
  });
  const controlRun = control.run();
  void pool.run();
  try {
    const client = temporalClient(env.connection, namespace, config);
    const runConfig = validateRunConfig({
      team: 'math',
      steps: 2,
      groupsPerStep: 2,
      groupSize: 2,
      rollout: 'durable',
      evalEvery: 1,
      evalTasks: 2,
      seed: 11,
      runId: 'codec-run',
    });
    const handle = await startTrainingRun(client, taskQueue, runConfig);
    const summary = await handle.result();
    assert.equal(summary.status, 'completed');

    // The raw histories of the run and its children, read without the codec.
    const raw = new Client({ connection: env.connection, namespace });
    const ids = ['codec-run'];
    const histories: Uint8Array[] = [];
    const payloads: Payload[] = [];
    for (let i = 0; i < ids.length; i++) {
      const history = await raw.workflow.getHandle(ids[i]!).fetchHistory();
      for (const e of history.events ?? []) {
        const child = e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId;
        if (child) ids.push(child);
      }
      histories.push(temporal.api.history.v1.History.encode(history).finish());
      payloadsIn(history, payloads);
    }
    assert.ok(payloads.length > 10, `found ${payloads.length} payloads in ${ids.length} histories`);
    const clear = payloads.filter((p) => new TextDecoder().decode(p.metadata?.encoding ?? new Uint8Array()) !== ENCRYPTED_ENCODING);
    assert.deepEqual(
      clear.map((p) => new TextDecoder().decode(p.data ?? new Uint8Array()).slice(0, 80)),
      [],
      'payloads stored in clear',
    );

    // Cleartext we know: the run config's fields and the math team's tasks, as data and as the question the solver is asked.
    const tasks = await db.sql<{ task: { a: number; b: number } }[]>`SELECT DISTINCT task FROM episodes WHERE run_id = 'codec-run'`;
    // At least 5 characters, so that ciphertext cannot contain one by chance.
    const prompts = [...new Set(tasks.flatMap(({ task }) => [`${task.a}+${task.b}`, JSON.stringify({ a: task.a, b: task.b })]))].filter((t) => t.length >= 5);
    assert.ok(prompts.length > 0, 'the stored tasks give prompts to look for');
    const needles = ['groupsPerStep', '"evalTasks"', ...prompts];
    for (const bytes of histories) for (const n of needles) assert.ok(!Buffer.from(bytes).includes(n), `the raw history contains ${n}`);

    // Decoded with the codec, the same payloads show the config and prompts: the check above is real.
    const decoded = Buffer.concat((await new AesGcmCodec(config.payloadKeys!).decode(payloads)).map((p) => temporal.api.common.v1.Payload.encode(p).finish()));
    assert.ok(decoded.includes('groupsPerStep'), 'the decoded history has the run config');
    const found = prompts.filter((t) => decoded.includes(t));
    assert.ok(found.length > 0, 'the decoded history has prompts');
    const first = (await raw.workflow.getHandle('codec-run').fetchHistory()).events![0]!.workflowExecutionStartedEventAttributes!.input!.payloads! as Payload[];
    assert.equal(
      (defaultPayloadConverter.fromPayload((await new AesGcmCodec(config.payloadKeys!).decode(first))[0]!) as { groupsPerStep: number }).groupsPerStep,
      2,
    );
  } finally {
    control.shutdown();
    await controlRun.catch(() => undefined);
    await pool.shutdown();
    await db.drop();
    await env.teardown();
  }
});
