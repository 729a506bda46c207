/**
 * The bundled `lab` team (examples/teams/lab.ts) with its real tools: the solver's key runs a
 * Python snippet in bubblewrap (sandboxTool), the checker's key calls the team's MCP server
 * (lab-mcp-server.mjs). Scripted episodes check what each key does; then three training steps
 * from a random initialization on the built-in engine (the in-process loop of bench/seeds.ts,
 * the code a batched run calls) show the policy's own calls reaching both tools.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { runEpisode, type EpisodeIO, type ToolCallReply } from '../../../agents/episode';
import { scoreEpisode } from '../../../agents/rewards';
import { executeTool } from '../../../activities/tools';
import { EngineClient } from '../../../engines/protocol/client';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';
import { trainInProcess, type InProcessStep } from '../../../bench/lib/inprocess';
import { checkerServer, labTeam, sandboxPrefix, type LabOutcome } from '../../../examples/teams/lab';

const hasBwrap = spawnSync('bwrap', ['--version']).status === 0;
const skip = hasBwrap ? false : 'bubblewrap is not installed (Debian: apt-get install bubblewrap)';

const team = labTeam();

after(() => checkerServer.close());

/** Each generate call returns the next scripted one-token reply; tool calls go to the real tools, counted by name. */
function scripted(replies: string[], calls: Record<string, number>): EpisodeIO {
  return {
    async generate() {
      const text = replies.shift();
      if (text === undefined) throw new Error('script exhausted');
      const tokens = team.tokenizer.encode(text);
      return { tokens, logprobs: tokens.map(() => -1), stopReason: 'stop_token' };
    },
    callTool: async (req): Promise<ToolCallReply> => {
      calls[req.tool] = (calls[req.tool] ?? 0) + 1;
      return executeTool(team, req);
    },
    now: () => 0,
  };
}

describe('lab team', { skip }, () => {
  it('the keys run the snippet in the sandbox and ask the MCP server', async () => {
    const calls: Record<string, number> = {};
    const task = { a: 37, b: 29 };
    const traj = await runEpisode(team, { episodeId: 'lab-1', seed: 1, versions: { policy: 0 }, task }, scripted(['=', '!'], calls));
    assert.deepEqual(calls, { run_code: 1, check: 1 });
    const [solver, checker] = traj.turns;
    assert.equal(team.tokenizer.decode(solver!.responseTokens), `=${sandboxPrefix}1073`);
    assert.deepEqual(solver!.toolCalls[0]!.input, { language: 'python', code: 'print(37*29)' });
    assert.equal(team.tokenizer.decode(checker!.contextTokens), '37*29=1073?');
    assert.equal(team.tokenizer.decode(checker!.responseTokens), '!Y');
    assert.deepEqual(traj.outcome, { answer: 1073, verdict: 'Y' } satisfies LabOutcome);
    const scored = scoreEpisode(team, task, traj);
    const total = (agent: string) =>
      scored.rewards.filter((r) => r.agent === agent).reduce((k, r) => k + Object.values(r.components).reduce((a, b) => a + b, 0), 0);
    assert.deepEqual([total('solver'), total('checker')], [1, 10]);
    assert.equal(team.success({ task, outcome: traj.outcome as LabOutcome, status: traj.status }), true);

    // a guessed answer: the checker's key gets 'N' from the server
    const wrong = await runEpisode(team, { episodeId: 'lab-2', seed: 2, versions: { policy: 0 }, task }, scripted(['7', '!'], calls));
    assert.deepEqual(wrong.outcome, { answer: 7, verdict: 'N' } satisfies LabOutcome);
    assert.deepEqual(calls, { run_code: 1, check: 2 });
  });

  describe('training from a random initialization', () => {
    let engine: SpawnedEngine;
    let client: EngineClient;
    before(async () => {
      engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', '1'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
      client = await EngineClient.connect(engine.listening.address);
    });
    after(() => {
      client?.close();
      engine?.child.kill('SIGTERM');
    });

    it("three steps: the policy's own keys run the sandbox and call the MCP server", async () => {
      const steps: InProcessStep[] = [];
      const config = { team: 'lab', seed: 0, runId: `lab-test-${Date.now().toString(36)}`, steps: 3, groupsPerStep: 8, groupSize: 8, evalEvery: 0 };
      await trainInProcess(client, config, { onStep: (s) => steps.push(s) });
      assert.equal(steps.length, 3);
      const replies = (agent: string) => steps.flatMap((s) => Object.entries(s.replies[agent] ?? {}).map(([text, n]) => ({ text, n })));
      const count = (agent: string, re: RegExp) => replies(agent).reduce((k, r) => k + (re.test(r.text) ? r.n : 0), 0);
      // a sampled '=' followed by what the sandbox printed (exit 0 and the product), never a tool error
      const ran = count('solver', new RegExp(`^=${sandboxPrefix}\\d+$`));
      const asked = count('checker', /^![YN]$/);
      assert.ok(ran > 0, `no solver turn ran the sandbox: ${JSON.stringify(replies('solver'))}`);
      assert.ok(asked > 0, `no checker turn called the MCP server: ${JSON.stringify(replies('checker'))}`);
      assert.equal(count('solver', /^=E$/) + count('checker', /^!E$/), 0, 'a key call failed');
      assert.ok(steps.reduce((k, s) => k + s.toolCalls, 0) >= ran + asked);
      for (const s of steps) assert.ok(Object.values(s.gradNorm).every(Number.isFinite), 'every step updated the policy');
    });
  });
});
