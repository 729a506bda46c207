// `npx troupe train math` as a user runs it: its summary prints the run's dashboard page, the
// dashboard `up` started answers there with the run, and the run's Current Details link to it.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { cliStack, troupe } from '../../helpers/cli';
import { getJson } from './fixture';

let cleanup: (() => Promise<void>) | undefined;
after(async () => cleanup?.());

test('troupe train prints the dashboard URL of the run, which shows it; Current Details link there too', async () => {
  const stack = await cliStack();
  cleanup = stack.cleanup;
  const runId = 'dash-train-summary';
  const config = path.join(stack.stateDir, 'run.json');
  fs.writeFileSync(config, JSON.stringify({ evalTasks: 2 }));
  const train = await troupe(
    ['train', 'math', '--config', config, '--run-id', runId, '--steps', '1', '--groups', '1', '--group-size', '2', '--eval-every', '0', '--no-plot', '--json'],
    stack.env,
  );
  assert.equal(train.code, 0, train.stderr + train.stdout);
  const url = `http://127.0.0.1:${stack.env.TROUPE_DASHBOARD_PORT}/#/runs/${runId}`;
  const lines = train.stdout.trim().split('\n');
  assert.ok(
    lines.some((l) => l.trim() === `dashboard: ${url}`),
    train.stdout,
  );
  assert.equal(JSON.parse(lines.at(-1)!).dashboard, url, 'and in the --json line');

  const run = await getJson(`http://127.0.0.1:${stack.env.TROUPE_DASHBOARD_PORT}/api/runs/${runId}`);
  assert.equal(run.status, 200);
  assert.equal(run.body.run.status, 'completed');
  assert.equal(run.body.run.step, 1);

  const connection = await Connection.connect({ address: `127.0.0.1:${stack.env.TROUPE_TEMPORAL_PORT}` });
  try {
    const meta = (await new Client({ connection }).workflow.getHandle(runId).query('__temporal_workflow_metadata')) as { currentDetails?: string };
    assert.ok(meta.currentDetails?.includes(`[dashboard](${url})`), meta.currentDetails);
  } finally {
    await connection.close();
  }
});
