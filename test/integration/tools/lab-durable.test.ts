/**
 * A durable episode of the bundled `lab` team (a sandbox call and an MCP call) whose pool worker
 * is killed -9 mid-episode ends bit-identical to its uninterrupted twin, and the MCP server sees
 * one `check` call per episode: the killed episode's tool calls are not made again, and replaying
 * its finished history calls no tool at all. The server counts its calls in a file
 * (LAB_MCP_CALL_LOG, which examples/teams/lab-mcp-server.mjs appends to when set).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
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
import { finishThroughPoolKill } from '../fixtures/pool-kill';

const skip = spawnSync('bwrap', ['--version']).status === 0 ? false : 'bubblewrap is not installed (Debian: apt-get install bubblewrap)';

// A seed whose version-0 policy presses both keys on its one episode (found by sampling seeds 0-1361 in process).
const SEED = 1361;
const callLog = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'lab-durable-')), 'mcp-calls');
// before the control worker starts its tool threads: each thread's MCP server inherits it
process.env.LAB_MCP_CALL_LOG = callLog;
const checkCalls = () => (fs.existsSync(callLog) ? fs.readFileSync(callLog, 'utf8').split('\n').filter(Boolean) : []);

const stack = fileStack({ skip });
after(() => fs.rmSync(path.dirname(callLog), { recursive: true, force: true }));

it('a durable lab episode survives kill -9 of its pool worker, bit-identical, one MCP call per episode', { skip }, async () => {
  const { env, db } = stack;
  const taskQueue = uniqueTaskQueue('troupe');
  const bundle = await workflowBundle();
  const control = await createControlWorker({ connection: env.nativeConnection, namespace: 'default', taskQueue, sql: db.sql, workflowBundle: bundle });
  const controlRun = control.run();
  const team = loadTeam('lab');
  const ref = { team: 'lab', teamOptions: {} };
  try {
    const pool = await startPool(env, db);
    const activities = createTrainingPoolActivities({ sql: db.sql, engine: () => pool.getClient(), checkpoints: db.checkpoints });
    for (const runId of ['calm', 'killed']) {
      await createRun(db.sql, { runId, team: 'lab', config: {} });
      await new MockActivityEnvironment().run(activities.initModel, { ...ref, runId, model: 'policy', seed: SEED });
    }
    const spec = (runId: string) => planTrainEpisodes(loadTasks(team), { runId, step: 0, seed: SEED, groupsPerStep: 1, groupSize: 1 })[0]!;
    const args = (runId: string) =>
      [{ ...ref, runId, step: 0, split: 'train' as const, spec: spec(runId), versions: { policy: 0 } }] as [Parameters<typeof episodeWorkflow>[0]];
    await env.client.workflow.execute<typeof episodeWorkflow>('episodeWorkflow', { taskQueue, workflowId: 'lab-calm', args: args('calm') });
    await pool.shutdown();
    const calm = (await loadEpisode(db.sql, spec('calm').episodeId))!;
    const said = calm.trajectory.turns.map((t) => ({ agent: t.agent, text: team.tokenizer.decode(t.responseTokens), calls: t.toolCalls }));
    assert.deepEqual(
      calm.trajectory.turns.flatMap((t) => t.toolCalls.map((c) => c.tool)),
      ['run_code', 'check'],
      `both keys pressed (the sandbox ran, the MCP server was asked): ${JSON.stringify(said)}`,
    );
    assert.equal(checkCalls().length, 1, 'the calm episode called the MCP server once');

    // the same episode on a pool worker process killed after the first turn's generation
    const handle = await env.client.workflow.start<typeof episodeWorkflow>('episodeWorkflow', { taskQueue, workflowId: 'lab-killed', args: args('killed') });
    const result = await finishThroughPoolKill(env, db, handle);
    assert.equal(result.status, 'completed');

    const killed = (await loadEpisode(db.sql, spec('killed').episodeId))!;
    const tokens = (e: typeof calm) =>
      e.trajectory.turns.map((t) => ({
        ctx: t.contextTokens,
        out: t.responseTokens,
        lp: t.logprobs,
        mask: t.lossMask,
        calls: t.toolCalls.map((c) => c.output),
      }));
    assert.deepEqual(tokens(killed), tokens(calm));
    assert.deepEqual(killed.trajectory.outcome, calm.trajectory.outcome);
    assert.deepEqual(killed.rewards, calm.rewards);
    assert.equal(checkCalls().length, 2, 'one MCP call per episode: none made again after the kill');

    // replaying the killed episode's whole history runs no activity: the server is not asked again
    const history = await handle.fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: bundle }, history, 'lab-killed');
    assert.equal(checkCalls().length, 2, 'a replay calls no MCP tool');
  } finally {
    control.shutdown();
    await controlRun;
  }
});
