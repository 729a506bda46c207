/** The bundled `chain` team: four turns, a wrong step carries over, per-turn and final rewards. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runEpisode, type EpisodeIO } from '../../../agents/episode';
import { scoreEpisode } from '../../../agents/rewards';
import { chainTeam } from '../../../examples/teams/chain';
import { executeTool } from '../../../activities/tools';

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
