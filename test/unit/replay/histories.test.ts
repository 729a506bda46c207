/**
 * Recorded histories of trainingRun and episode workflows (test/fixtures/histories,
 * from real runs) must replay against the current workflow code: a change that
 * would break workflows already running fails here instead of in production.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Worker } from '@temporalio/worker';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { workflowBundle } from '../../helpers';

const dir = path.join(__dirname, '..', '..', 'fixtures', 'histories');
const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));

describe('replay of recorded histories', () => {
  it('has fixtures for both rollout modes and an episode, from before and after step plans became references, with the dashboard link, asynchronous runs (staleness 1), a model training on another pool (run config pools), a continued execution whose continue-as-new task was failed by a signal (UnhandledCommand) and redone with it, a durable run one of whose episodes was terminated (stored as failed), a durable run through rollout nodes with one of its nodes, a durable run whose episodes record themselves by a local activity, a batched asynchronous run with partial rollouts, a batched one whose groups are carried at most once (partialRollouts.maxCarrySteps), and a durable run of two episodes to a workflow with one such workflow', () => {
    const kinds = ['episode-math', 'training-run-batched', 'training-run-durable'];
    const oneMode = [
      'training-run-batched-stale',
      'training-run-durable-stale',
      'training-run-batched-signal-continue',
      'training-run-durable-stopped-episode',
      'training-run-durable-tree',
      'rollout-node-math-tree',
      'training-run-durable-local-record',
      'episode-math-local-record',
      'training-run-batched-stale-partial',
      'training-run-batched-partial-bounded',
      'training-run-durable-groups',
      'episode-group-math-groups',
    ];
    const expected = [
      ...['', '-plan-ref', '-dashboard-link', '-pools'].flatMap((suffix) => kinds.map((k) => `${k}${suffix}.json`)),
      ...oneMode.map((k) => `${k}.json`),
    ];
    assert.deepEqual(files.sort(), expected.sort());
  });
  for (const file of files) {
    it(`${file} replays without nondeterminism`, async () => {
      const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')));
      assert.ok((history.events?.length ?? 0) > 10);
      // the workflow code bundled once for every file (a bundle per replay was most of this test's time)
      await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, file);
    });
  }
});
