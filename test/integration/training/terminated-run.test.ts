/**
 * A run whose workflow is terminated (no workflow code runs to record it)
 * does not stay "running": `troupe status` and `troupe list` (run as a user
 * runs them, against the real Temporal dev server and PostgreSQL) show it
 * terminated and record the end in the store, and the dashboard's API shows
 * the same status with a duration that no longer grows.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import { statusQuery } from '../../../workflows/definitions';
import type { trainingRun } from '../../../workflows';
import { startDashboard, type Dashboard } from '../../../dashboard/server';
import { startHarness, type Harness } from '../../../testing/stack';
import { troupe } from '../../helpers/cli';
import { getJson } from '../dashboard/fixture';

let h: Harness;
let dash: Dashboard | undefined;
before(async () => {
  h = await startHarness();
});
after(async () => {
  await dash?.close();
  await h?.shutdown();
});

it('a terminated run shows terminated in status, list and the dashboard, and its duration stops', async () => {
  const runId = 'terminated-run';
  const handle = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', {
    taskQueue: h.taskQueue,
    workflowId: runId,
    args: [{ team: 'math', steps: 500, groupsPerStep: 1, groupSize: 2, evalEvery: 0, evalTasks: 1 }],
  });
  for (;;) {
    const live = await handle.query(statusQuery).catch(() => undefined);
    if (live?.status === 'running' && live.step >= 1) break;
    await new Promise((r) => setTimeout(r, 300));
  }
  await handle.terminate('operator terminated it');
  const closedAt = (await handle.describe()).closeTime!;

  // the store still says running until someone reconciles: the dashboard does on its reads
  const [before] = await h.db.sql`SELECT status FROM runs WHERE run_id = ${runId}`;
  assert.equal(before!.status, 'running');
  dash = await startDashboard({ sql: h.db.sql, port: 0, client: h.env.client });
  const first = (await getJson(`${dash.url}/api/runs`)).body.runs.find((r: { runId: string }) => r.runId === runId);
  assert.equal(first.status, 'terminated');
  assert.equal(first.updatedAt, closedAt.toISOString(), 'the end is the workflow close time');
  await new Promise((r) => setTimeout(r, 1100));
  const second = (await getJson(`${dash.url}/api/runs`)).body.runs.find((r: { runId: string }) => r.runId === runId);
  assert.equal(second.durationSeconds, first.durationSeconds, 'the duration stopped growing');
  const events = await h.db.sql`SELECT kind, detail FROM run_events WHERE run_id = ${runId} AND kind = 'workflow-closed'`;
  assert.equal(events.length, 1);
  assert.equal(events[0]!.detail.workflowStatus, 'TERMINATED');

  // the CLI, against the same stack
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-terminated-'));
  const env = { ...process.env, TROUPE_STATE_DIR: state, TEMPORAL_ADDRESS: h.env.address, DATABASE_URL: h.db.url, TROUPE_DEBUG: '' };
  const status = await troupe(['status', runId], env);
  assert.equal(status.code, 0, status.stderr);
  assert.match(status.stdout, new RegExp(`^run ${runId}  team math  workflow TERMINATED  store terminated$`, 'm'));
  const list = await troupe(['list', '--json'], env);
  assert.equal(list.code, 0, list.stderr);
  const row = list.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .find((r) => r.workflowId === runId);
  assert.deepEqual([row.status, row.phase], ['TERMINATED', 'terminated']);
  fs.rmSync(state, { recursive: true, force: true });
});
