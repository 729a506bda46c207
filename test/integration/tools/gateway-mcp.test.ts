/**
 * The agent's team tools through the gateway's MCP server, on the real stack (Temporal dev
 * server, PostgreSQL and its journal, the control worker, a pool worker process with its engine
 * and episode threads) with real MCP servers: @modelcontextprotocol/server-everything from npm
 * and counting-mcp-server.mjs (written with the SDK, logging each call it answers). A batched
 * run of the fixture project's `gateway-mcp` team (fixtures/gateway-mcp/team.ts: agent code on
 * the MCP SDK's client at `session.mcpURL`) has its pool worker killed -9 while its episode
 * (the run's first, its first eval's) holds after three tool calls; the retried rollout answers them from the journal, so no server
 * is called twice for them, and the episode completes with the tools' results.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, it } from 'node:test';
import { loadEpisode } from '../../../activities/store/trajectories';
import { createControlWorker } from '../../../processes/control-worker';
import type { trainingRun } from '../../../workflows/training-run';
import { fileStack, uniqueTaskQueue, workflowBundle } from '../../helpers';
import { finishThroughPoolKill } from '../fixtures/pool-kill';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gateway-mcp-'));
const callLog = path.join(dir, 'calls');
const hold = path.join(dir, 'go-on');
// before the bundle and the pool worker: this process and the worker enter the fixture project,
// whose counting server logs its calls and whose episode holds until `hold` exists
process.env.TROUPE_PROJECT = path.join(__dirname, 'fixtures', 'gateway-mcp');
process.env.MCP_CALL_LOG = callLog;
process.env.GATEWAY_MCP_HOLD = hold;
const serverCalls = () => (fs.existsSync(callLog) ? fs.readFileSync(callLog, 'utf8').split('\n').filter(Boolean) : []);

const stack = fileStack();
after(() => fs.rmSync(dir, { recursive: true, force: true }));

it('gateway MCP tools: listed, called, journaled; a pool worker killed mid-episode calls no tool twice', async () => {
  const { env, db } = stack;
  const taskQueue = uniqueTaskQueue('troupe');
  const control = await createControlWorker({
    connection: env.nativeConnection,
    namespace: 'default',
    taskQueue,
    sql: db.sql,
    workflowBundle: await workflowBundle(),
  });
  const controlRun = control.run();
  try {
    const runId = 'gwmcp';
    // one step of one episode, and one held-out task evaluated before and after it (evalEvery 0)
    const config = { team: 'gateway-mcp', runId, steps: 1, groupsPerStep: 1, groupSize: 1, rollout: 'batched' as const, evalEvery: 0, evalTasks: 1, seed: 3 };
    const handle = await env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue, workflowId: runId, args: [config] });

    // killed once the run's first episode made its three tool calls (journaled) and holds before its turn
    let episodeId = '';
    let atKill: string[] = [];
    const summary = await finishThroughPoolKill(env, db, handle, 60_000, {
      killWhen: async () => {
        const [row] = await db.sql`
          SELECT episode_id FROM gateway_calls WHERE run_id = ${runId} AND tool_reply IS NOT NULL GROUP BY episode_id HAVING count(*) = 3`;
        if (!row) return false;
        episodeId = row.episode_id as string;
        atKill = serverCalls();
        return true;
      },
      beforeRestart: () => fs.writeFileSync(hold, ''),
    });
    assert.equal(atKill.length, 2, 'mul and refuse reached the counting server');
    assert.equal(summary.status, 'completed');
    // the run's start listed both servers (tools/list, no call): every declared tool is there
    const [listed] = await db.sql`SELECT step, detail FROM run_events WHERE run_id = ${runId} AND kind = 'tools-listed'`;
    const servers = (listed?.detail as { servers: Array<{ server: string; tools?: Array<{ name: string }>; missing?: string[] }> }).servers;
    assert.deepEqual(
      servers.map((l) => [l.server, l.missing ?? []]),
      [
        ['everything', []],
        ['counting', []],
      ],
    );
    assert.ok(servers[0]?.tools?.some((t) => t.name === 'echo') && servers[1]?.tools?.some((t) => t.name === 'mul'));

    const episode = await loadEpisode(db.sql, episodeId);
    assert.ok(episode, 'the killed episode is stored');
    const trajectory = episode.trajectory;
    assert.equal(trajectory.status, 'completed', trajectory.error);
    const task = (JSON.parse(atKill[0] ?? '{}') as { args?: { a?: number } }).args?.a ?? NaN;
    assert.deepEqual(trajectory.outcome, {
      listed: [
        { name: 'echo', inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] } },
        { name: 'mul', inputSchema: { type: 'object' } },
        { name: 'refuse', inputSchema: { type: 'object' } },
      ],
      echo: `Echo: task ${task}`,
      product: String(task * 7),
      refused: { isError: true, text: `refuse: refused: task ${task}` },
      replied: 1,
    });
    assert.equal(trajectory.counters?.solver?.journalReplayedCalls, 3, 'the retry answered the three tool calls from the journal');
    assert.equal(trajectory.counters?.solver?.gatewayToolCalls, 3);
    // every episode of the run (the two evals' and the step's) called the counting server twice, the killed one included
    const [stored] = await db.sql`SELECT count(*)::int AS n FROM episodes WHERE run_id = ${runId}`;
    assert.equal(stored?.n, 3);
    assert.equal(serverCalls().length, 2 * 3, `no tool call was made again after the kill: ${serverCalls().join(' ')}`);
    const journal = await db.sql`SELECT call_index, tool_reply IS NOT NULL AS tool FROM gateway_calls WHERE episode_id = ${episodeId} ORDER BY call_index`;
    assert.deepEqual(
      journal.map((r) => [r.call_index, r.tool]),
      [
        [0, true],
        [1, true],
        [2, true],
        [3, false],
      ],
      'the tool calls and the turn in one sequence',
    );
  } finally {
    control.shutdown();
    await controlRun;
  }
});
