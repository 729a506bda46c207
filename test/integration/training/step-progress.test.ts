// Progress inside a step, live, in the four places a user looks while a step runs: the CLI's
// progress line (the status query), `troupe status`, the dashboard's run page (its API) and the
// Temporal Web UI's Current Details. The team's episodes wait 2, 4, 6 and 8 s (by task kind)
// without using the CPU, so a step's 16 episodes finish in four waves over ~8 s; its rollout part
// reports every 5 s (batched) and the run counts its own episode children (durable).
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import type { RunStatusView } from '../../../workflows/definitions';
import { cliStack, newRunId, storedRunIds, troupe } from '../../helpers/cli';

const project = path.join(__dirname, 'fixtures', 'runaway-project');
let stack: Awaited<ReturnType<typeof cliStack>>;
before(async () => {
  stack = await cliStack({ TROUPE_PROJECT: project });
});
after(async () => {
  await stack?.cleanup().catch(() => undefined);
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const options = '{"calm":true,"slowMs":2000,"cpuMs":60000}';
const LINE = /step 1 rollout: (\d+)\/16 episodes/;

for (const rollout of ['batched', 'durable'] as const) {
  test(`a ${rollout} step's progress shows live in the status query, troupe status, the dashboard and Current Details`, { timeout: 8 * 60_000 }, async () => {
    const earlier = await storedRunIds(stack.db);
    const seed = rollout === 'batched' ? 1 : 2;
    const args = ['train', 'runaway', '--steps', '1', '--groups', '8', '--group-size', '2', '--eval-every', '0', '--seed', String(seed)];
    const done = troupe([...args, '--rollout', rollout, '--team-options', options], stack.env);
    const runId = await newRunId(stack.db, 'runaway', earlier);
    assert.ok(runId, 'the run started');
    const connection = await Connection.connect({ address: `127.0.0.1:${stack.env.TROUPE_TEMPORAL_PORT}` });
    try {
      const handle = new Client({ connection, namespace: stack.env.TEMPORAL_NAMESPACE || 'default' }).workflow.getHandle(runId);
      // the step's rollout in flight with some of its episodes done, as the status query says
      let seen: RunStatusView['progress'] = null;
      for (let i = 0; i < 240 && !seen; i++) {
        const view = await handle.query<RunStatusView>('status').catch(() => undefined);
        const p = view?.progress;
        if (p && p.split === 'train' && p.done > 0 && p.done < p.planned) seen = p;
        else await sleep(250);
      }
      assert.ok(seen, 'the status query showed the step part done');
      console.log(`[step-progress] ${rollout}: status query ${JSON.stringify(seen)}`);
      assert.equal(seen.step, 0);
      assert.equal(seen.planned, 16);
      assert.equal(seen.failed, 0);
      assert.ok(seen.etaSeconds !== null && seen.etaSeconds > 0, `an ETA: ${seen.etaSeconds}`);
      if (rollout === 'batched') assert.ok(seen.turnsPerSecond !== null && seen.turnsPerSecond > 0, `turns/s: ${seen.turnsPerSecond}`);

      // Current Details (the Web UI's), the dashboard's run API and `troupe status`, while the step still runs
      const meta = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
      assert.match(meta.currentDetails ?? '', LINE, `Current Details: ${meta.currentDetails}`);
      const res = await fetch(`http://127.0.0.1:${stack.env.TROUPE_DASHBOARD_PORT}/api/runs/${encodeURIComponent(runId)}`);
      const detail = (await res.json()) as { progress: { text: string } | null };
      assert.match(detail.progress?.text ?? '', LINE, `dashboard: ${JSON.stringify(detail.progress)}`);
      const status = await troupe(['status', runId], stack.env);
      assert.equal(status.code, 0, status.stdout + status.stderr);
      assert.match(status.stdout, LINE, status.stdout);
      const counted = Number(LINE.exec(status.stdout)![1]);
      assert.ok(counted > 0 && counted < 16, `troupe status during the step: ${counted}/16`);
    } finally {
      await connection.close();
    }
    const out = await done;
    assert.equal(out.code, 0, out.stdout + out.stderr);
    const view = await troupe(['status', runId], stack.env);
    assert.doesNotMatch(view.stdout, LINE, 'no rollout shows once the run closed');
  });
}
