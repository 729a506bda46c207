/**
 * Every recorded history (test/fixtures/histories), cut at every workflow task
 * boundary, replays without nondeterminism. A worker that picks a run up in the
 * middle (a restart, an eviction from the sticky cache, a query or update on an
 * uncached run) replays the history as it stands then, not the whole finished
 * one, so code that decides a command on something outside history (a handler's
 * timing, a local activity's completion) fails here at the cut that exposes it.
 *
 * A cut ends with a WorkflowTaskCompleted (the standard cut: what follows the
 * history is new work, so a cut ending in WorkflowTaskStarted would run that
 * task live and need the local activities a replay worker has not got). The
 * workflow code is bundled once for all replays.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import type { temporal } from '@temporalio/proto';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { workflowBundle } from '../../helpers';

type Event = temporal.api.history.v1.IHistoryEvent;
const { EventType } = require('@temporalio/proto').temporal.api.enums.v1 as typeof temporal.api.enums.v1;

const dir = path.join(__dirname, '..', '..', 'fixtures', 'histories');
const files = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();

/**
 * Lengths at which to cut: before each WorkflowTaskScheduled after the first, so
 * each cut ends with a completed task's commands. That is the history a worker
 * replays to answer a query on a run it has not cached (a legacy query task).
 */
function cutPoints(events: Event[]): number[] {
  return events.flatMap((e, i) => (i > 1 && e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED ? [i] : []));
}

test('every recorded history replays cut at every workflow task boundary', async () => {
  const cuts: Array<{ workflowId: string; history: { events: Event[] } }> = [];
  for (const file of files) {
    const events = historyFromJSON(JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'))).events ?? [];
    const points = cutPoints(events);
    // a durable math episode has 3 workflow tasks since local-record-episode, so 2 cuts
    assert.ok(points.length >= 2, `${file}: ${points.length} cut points`);
    for (const n of points) cuts.push({ workflowId: `${file}@${n}`, history: { events: events.slice(0, n) } });
  }
  const failures: string[] = [];
  let replayed = 0;
  for await (const result of Worker.runReplayHistories({ workflowBundle: await workflowBundle() }, cuts)) {
    replayed++;
    if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
  }
  assert.equal(replayed, cuts.length);
  assert.deepEqual(failures, []);
});
