/** The bundled `lookout` team: a walker proposes moves, a lookout may veto them; per-role per-turn rewards. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runEpisode, type EpisodeIO } from '../../../agents/episode';
import { scoreEpisode } from '../../../agents/rewards';
import { loadTasks } from '../../../activities/tasks';
import { executeTool } from '../../../activities/tools';
import { LOOKOUT_DISTANCE, lookoutTeam, type LookoutOutcome, type LookoutTask } from '../../../examples/teams/lookout';

const team = lookoutTeam();

/** Each generate call returns the next scripted reply (one token); the roles alternate, walker first. */
function scripted(replies: string[]): EpisodeIO {
  return {
    async generate() {
      const text = replies.shift();
      if (text === undefined) throw new Error('script exhausted');
      const tokens = team.tokenizer.encode(text);
      return { tokens, logprobs: tokens.map(() => -1), stopReason: 'max_tokens' };
    },
    callTool: (req) => executeTool(team, req),
    now: () => 0,
  };
}

/** Walker moves and lookout answers, interleaved (the lookout's '0' lets a move through). */
const turnsOf = (moves: string, calls: string) => [...moves].flatMap((m, k) => [m, calls[k]!]);

// start (2, 7), goal (0, 1): two moves west, six south
const task: LookoutTask = { start: [2, 7], goal: [0, 1] };
const input = { episodeId: 'e', seed: 1, versions: { walker: 0, lookout: 0 }, task };

/** Per role, its turns' reward components in order. */
async function play(moves: string, calls: string) {
  const traj = await runEpisode(team, input, scripted(turnsOf(moves, calls)));
  const scored = scoreEpisode(team, task, traj);
  const of = (agent: string) => scored.rewards.filter((r) => r.agent === agent).map((r) => r.components);
  return { traj, outcome: traj.outcome as LookoutOutcome, walker: of('walker'), lookout: of('lookout') };
}

describe('lookout team', () => {
  it('eight right moves let through: arrived, the walk ends at the goal', async () => {
    const { traj, outcome, walker, lookout } = await play('WSSWSSSS', '00000000');
    assert.deepEqual(outcome.end, [0, 1]);
    assert.equal(traj.turns.length, 16);
    // the walker is shown its cell and the goal, the lookout that and the proposal; one chain of turns
    assert.deepEqual(
      traj.turns.slice(0, 4).map((t) => [t.agent, team.tokenizer.decode(t.contextTokens.slice(1))]),
      [
        ['walker', '2701'],
        ['lookout', '2701W'],
        ['walker', '1701'],
        ['lookout', '1701S'],
      ],
    );
    assert.deepEqual(
      traj.turns.slice(0, 4).map((t) => t.parents),
      [[], [0], [1], [2]],
    );
    assert.deepEqual(walker, Array(8).fill({ arrived: 1, closer: 0.25 }));
    assert.deepEqual(lookout, Array(8).fill({ arrived: 1, caught: 0, blocked: 0 }));
    assert.equal(team.success({ task, outcome: outcome as never, status: 'completed' }), true);
  });

  it('a vetoed wrong move is caught and a vetoed right one blocked; each costs one move of the slack', async () => {
    // N (away) vetoed, W (closer) vetoed, then the eight right moves: arrives on the tenth
    const { outcome, walker, lookout } = await play('NWWSSWSSSS', 'VV00000000');
    assert.deepEqual(
      outcome.steps.slice(0, 3).map((s) => [s.from, s.proposal, s.vetoed]),
      [
        [[2, 7], 'N', true],
        [[2, 7], 'W', true],
        [[2, 7], 'W', false],
      ],
    );
    assert.deepEqual(outcome.end, [0, 1]);
    assert.deepEqual(
      walker.map((r) => r.closer),
      [0, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25],
    );
    assert.deepEqual(lookout[0], { arrived: 1, caught: 0.25, blocked: 0 });
    assert.deepEqual(lookout[1], { arrived: 1, caught: 0, blocked: -0.25 });
    assert.deepEqual(lookout.slice(2), Array(8).fill({ arrived: 1, caught: 0, blocked: 0 }));
  });

  it('a wrong move let through costs two moves: with a veto as well, the walk ends one short', async () => {
    // N let through (2, 8): nine right moves left; S (closer) vetoed: eight turns left for them
    const { traj, outcome, walker, lookout } = await play('NSSSSSSSWW', '0V00000000');
    assert.equal(traj.turns.length, 20);
    assert.deepEqual(outcome.end, [0, 2]);
    assert.deepEqual(
      walker.map((r) => r.closer),
      [0, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25],
    );
    assert.ok(walker.every((r) => r.arrived === 0));
    // letting a wrong move through earns the lookout nothing and costs nothing on the turn
    assert.deepEqual(lookout.slice(0, 2), [
      { arrived: 0, caught: 0, blocked: 0 },
      { arrived: 0, caught: 0, blocked: -0.25 },
    ]);
    assert.equal(team.success({ task, outcome: outcome as never, status: 'completed' }), false);
  });

  it('its tasks are walks of eight moves on the grid', () => {
    const tasks = loadTasks(team);
    assert.ok(tasks.length > 500, `${tasks.length} tasks`);
    assert.ok(
      tasks.every((t) => {
        const { start, goal } = t.data as LookoutTask;
        return Math.abs(start[0] - goal[0]) + Math.abs(start[1] - goal[1]) === LOOKOUT_DISTANCE;
      }),
    );
    assert.ok(tasks.some((t) => t.split === 'eval'));
  });
});
