/**
 * A durable episode of the bundled `lab` team through the real stack (Temporal dev server,
 * PostgreSQL, the control worker's tool threads, a pool worker's engine) whose MCP server crashes
 * on the checker's call (LAB_MCP_CRASH, which examples/teams/lab-mcp-server.mjs obeys): by
 * default the checker reads a tool error and the episode completes; with the team option
 * `checkerOnError: 'fail-run'` (mcpServer's onError) the episode's tool call fails, not retried,
 * with a message naming the server, the tool and what went wrong, and the episode fails with it
 * (a durable rollout fails the run on a failed episode child).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { it } from 'node:test';
import { ActivityFailure, ApplicationFailure, WorkflowFailedError } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import { loadTeam } from '../../../agents/team-registry';
import { createRun } from '../../../activities/store/runs';
import { loadEpisode } from '../../../activities/store/trajectories';
import { loadTasks } from '../../../activities/tasks';
import { planTrainEpisodes } from '../../../activities/training/plan';
import { createTrainingPoolActivities } from '../../../activities/training/pool';
import { createControlWorker } from '../../../processes/control-worker';
import type { episodeWorkflow } from '../../../workflows';
import { fileStack, uniqueTaskQueue, workflowBundle } from '../../helpers';
import { startPool } from '../../../testing/stack';

const skip = spawnSync('bwrap', ['--version']).status === 0 ? false : 'bubblewrap is not installed (Debian: apt-get install bubblewrap)';

// A seed whose version-0 policy presses both keys on its one episode (lab-durable.test.ts).
const SEED = 1361;
// before the control worker starts its tool threads: each thread's MCP server inherits it
process.env.LAB_MCP_CRASH = '1';

const stack = fileStack({ skip });

it("a crashing MCP server is a tool error by default, and fails the episode at once with onError 'fail-run'", { skip }, async () => {
  const { env, db } = stack;
  const taskQueue = uniqueTaskQueue('troupe');
  const bundle = await workflowBundle();
  const control = await createControlWorker({ connection: env.nativeConnection, namespace: 'default', taskQueue, sql: db.sql, workflowBundle: bundle });
  const controlRun = control.run();
  const pool = await startPool(env, db);
  try {
    const activities = createTrainingPoolActivities({ sql: db.sql, engine: () => pool.getClient(), checkpoints: db.checkpoints });
    const runs = { calm: {}, failing: { checkerOnError: 'fail-run' } };
    for (const [runId, teamOptions] of Object.entries(runs)) {
      await createRun(db.sql, { runId, team: 'lab', config: { teamOptions } });
      await new MockActivityEnvironment().run(activities.initModel, { team: 'lab', teamOptions, runId, model: 'policy', seed: SEED });
    }
    const spec = (runId: keyof typeof runs) =>
      planTrainEpisodes(loadTasks(loadTeam('lab', runs[runId])), { runId, step: 0, seed: SEED, groupsPerStep: 1, groupSize: 1 })[0]!;
    const args = (runId: keyof typeof runs) =>
      [{ team: 'lab', teamOptions: runs[runId], runId, step: 0, split: 'train' as const, spec: spec(runId), versions: { policy: 0 } }] as [
        Parameters<typeof episodeWorkflow>[0],
      ];

    // the default: the checker reads a tool error, the episode goes on
    await env.client.workflow.execute<typeof episodeWorkflow>('episodeWorkflow', { taskQueue, workflowId: 'lab-calm', args: args('calm') });
    const calm = (await loadEpisode(db.sql, spec('calm').episodeId))!;
    assert.equal(calm.trajectory.status, 'completed', calm.trajectory.error);
    const check = calm.trajectory.turns.flatMap((t) => t.toolCalls).find((c) => c.tool === 'check');
    assert.ok(check, `the checker called the server: ${JSON.stringify(calm.trajectory.turns.map((t) => t.toolCalls))}`);
    assert.match(check.error ?? '', /^check: MCP server lab: .*Connection closed.*lab-checker: crashing on purpose/);

    // onError 'fail-run': the tool call's activity fails, not retried, and the episode with it
    let error: unknown;
    await assert.rejects(
      env.client.workflow.execute<typeof episodeWorkflow>('episodeWorkflow', { taskQueue, workflowId: 'lab-failing', args: args('failing') }),
      (e) => ((error = e), e instanceof WorkflowFailedError),
    );
    let activity: ActivityFailure | undefined;
    for (let c = error as Error | undefined; c; c = c.cause as Error | undefined) if (c instanceof ActivityFailure) activity = c;
    assert.ok(activity, `an activity failed: ${String(error)}`);
    assert.equal(activity.activityType, 'callTool');
    const cause = activity.cause;
    assert.ok(cause instanceof ApplicationFailure, String(cause));
    assert.equal(cause.type, 'ToolFailsRun');
    assert.equal(cause.nonRetryable, true);
    assert.match(
      cause.message,
      /^MCP server lab, tool check: the server exited mid-call \(.*Connection closed\) \(server stderr: lab-checker: crashing on purpose \(LAB_MCP_CRASH\)\) \(onError: 'fail-run'\)$/,
    );
    const history = await env.client.workflow.getHandle('lab-failing').fetchHistory();
    const attempts = history.events!.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes!.attempt ?? 1);
    assert.equal(Math.max(...attempts), 1, 'no attempt was retried');
  } finally {
    await pool.shutdown();
    control.shutdown();
    await controlRun;
  }
});
