// The dev server keeps its state in a SQLite file: a workflow started before the server
// is killed is still there after a restart on the same file.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { TROUPE_SEARCH_ATTRIBUTES } from '../../../infra/search-attributes';
import { ensureTemporalBinary, startDevServer, waitForTemporal } from '../../../stack/temporal';
import { pidAlive, stopService } from '../../../stack/processes';
import { freePort, uniqueTaskQueue } from '../../helpers';

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-devserver-'));

after(async () => {
  await stopService(stateDir, 'temporal', { timeoutMs: 5000 });
  fs.rmSync(stateDir, { recursive: true, force: true });
});

async function withClient<T>(address: string, fn: (c: Client, conn: Connection) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address });
  try {
    return await fn(new Client({ connection, namespace: 'default' }), connection);
  } finally {
    await connection.close();
  }
}

test('a workflow survives killing and restarting the dev server on the same --db-filename', async (t) => {
  if (process.env.TEMPORAL_ADDRESS) return t.skip('needs a local dev server (TEMPORAL_ADDRESS is set)');
  const bin = await ensureTemporalBinary();
  const [port, uiPort] = [await freePort(), await freePort()];
  const address = `127.0.0.1:${port}`;
  const opts = { bin: bin.path, stateDir, dbFilename: path.join(stateDir, 'temporal.db'), port, uiPort };

  const first = startDevServer(opts);
  await waitForTemporal(address, { rec: first });
  const workflowId = `persist-${uniqueTaskQueue()}`;
  await withClient(address, async (client) => {
    // No worker polls this queue: the workflow stays Running.
    await client.workflow.start('neverPolled', { taskQueue: uniqueTaskQueue('nobody'), workflowId, args: [{}] });
  });

  process.kill(first.pid, 'SIGKILL');
  for (let i = 0; i < 100 && pidAlive(first.pid); i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(pidAlive(first.pid), false);

  const second = startDevServer(opts);
  await waitForTemporal(address, { rec: second });
  await withClient(address, async (client, connection) => {
    const desc = await client.workflow.getHandle(workflowId).describe();
    assert.equal(desc.status.name, 'RUNNING');
    assert.equal(desc.type, 'neverPolled');
    let listed: string[] = [];
    for (let i = 0; i < 50 && listed.length === 0; i++) {
      listed = [];
      for await (const wf of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) listed.push(wf.workflowId);
      if (listed.length === 0) await new Promise((r) => setTimeout(r, 200));
    }
    assert.deepEqual(listed, [workflowId]);
    const res = await connection.operatorService.listSearchAttributes({ namespace: 'default' });
    for (const name of Object.keys(TROUPE_SEARCH_ATTRIBUTES)) assert.ok(name in (res.customAttributes ?? {}), name);
  });
});
