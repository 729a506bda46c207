/** The bundled `chain` team: four turns, a wrong step carries over, per-turn and final rewards. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runEpisode, type EpisodeIO } from '../../../agents/episode';
import { scoreEpisode } from '../../../agents/rewards';
import { chainTeam } from '../../../examples/teams/chain';
import { executeTool } from '../../../activities/tools';
import { loadTasks } from '../../../activities/tasks';

const team = chainTeam();

/** Each generate call returns the next scripted text ('$' = EOS). */
function scripted(replies: string[]): EpisodeIO {
  return {
    async generate(call) {
      const text = replies.shift();
      if (text === undefined) throw new Error('script exhausted');
      const eos = text.endsWith('$');
      const tokens = team.tokenizer.encode(eos ? text.slice(0, -1) : text);
      if (eos) tokens.push(team.tokenizer.eosId);
      const last = tokens[tokens.length - 1];
      return { tokens, logprobs: tokens.map(() => -1), stopReason: last !== undefined && call.stopTokens.includes(last) ? 'stop_token' : 'max_tokens' };
    },
    callTool: (req) => executeTool(team, req),
    now: () => 0,
  };
}

const input = { episodeId: 'e', seed: 1, versions: { policy: 0 }, task: { start: 3, steps: [4, 2, 9, 1] } };

describe('chain team', () => {
  it('all four steps on the calculator: every turn right, the final reward earned', async () => {
    // each turn: '=' (the calculator shows the sum), then EOS
    const traj = await runEpisode(team, input, scripted(['=', '$', '=', '$', '=', '$', '=', '$']));
    assert.deepEqual(traj.outcome, { values: [7, 9, 18, 19] });
    const tok = team.tokenizer;
    assert.deepEqual(
      traj.turns.map((t) => tok.decode(t.contextTokens.slice(1))),
      ['3+4', '7+2', '9+9', '18+1'],
    );
    assert.deepEqual(
      traj.turns.map((t) => t.parents),
      [[], [0], [1], [2]],
    );
    const scored = scoreEpisode(team, input.task, traj);
    assert.deepEqual(
      scored.rewards.map((r) => [r.components, r.perTurn]),
      Array.from({ length: 4 }, () => [{ final: 1, step: 0.25 }, ['step']]),
    );
  });

  it('a wrong step carries over: later steps can be right from it, the final reward is lost', async () => {
    // turn 1 answers 8 by hand (right: 9); turns 2 and 3 add correctly from 8
    const traj = await runEpisode(team, input, scripted(['=', '$', '8$', '=', '$', '=', '$']));
    assert.deepEqual(traj.outcome, { values: [7, 8, 17, 18] });
    const scored = scoreEpisode(team, input.task, traj);
    assert.deepEqual(
      scored.rewards.map((r) => r.components),
      [
        { final: 0, step: 0.25 },
        { final: 0, step: 0 },
        { final: 0, step: 0.25 },
        { final: 0, step: 0.25 },
      ],
    );
    assert.equal(team.success({ task: input.task, outcome: traj.outcome as never, status: 'completed' }), false);
  });
});

describe('chain team: per-token versions and the long tail', () => {
  it('a turn continued under a newer version records the version of each response token', async () => {
    // the first segment ('=') came from version 1 (a carried generation), the second (EOS) from version 2
    const io = scripted(['=', '$', '=', '$', '=', '$', '=', '$']);
    let calls = 0;
    const versioned: EpisodeIO = {
      ...io,
      generate: async (call) => ({ ...(await io.generate(call)), ...(calls++ === 0 ? { version: 1 } : {}) }),
    };
    const traj = await runEpisode(team, { ...input, versions: { policy: 2 } }, versioned);
    const [first, second] = traj.turns;
    // '=' (v1), the calculator's output '7' (not sampled: the turn's version, v1), EOS (v2)
    assert.equal(first!.version, 1);
    assert.deepEqual(first!.lossMask, [1, 0, 1]);
    assert.deepEqual(first!.tokenVersions, [1, 1, 2]);
    assert.equal(second!.version, 2);
    assert.equal(second!.tokenVersions, undefined, 'one version: no per-token array');
  });

  it('longTail: that share of tasks has 8x the increments; without it the tasks are unchanged', () => {
    const plain = loadTasks(chainTeam());
    assert.deepEqual(
      loadTasks(chainTeam({ longTail: 0 })).map((t) => t.id),
      plain.map((t) => t.id),
    );
    const tail = chainTeam({ longTail: 0.1 });
    const tasks = loadTasks(tail);
    const long = tasks.filter((t) => (t.data as { steps: number[] }).steps.length === 32).length;
    assert.ok(tasks.every((t) => [4, 32].includes((t.data as { steps: number[] }).steps.length)));
    // 2000 tasks, share 0.1: a binomial count, 3 standard deviations (~13) around 200
    assert.ok(long > 160 && long < 240, `${long} long tasks`);
    assert.equal(tail.agents.adder!.maxTurns, 32);
    assert.throws(() => chainTeam({ longTail: 2 }), /teamOptions\.longTail: must be a share from 0 to 1, got 2/);
  });
});
