/** The bundled `navigator` team: eight moves on a grid, a per-turn and an arrival reward. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runEpisode, type EpisodeIO } from '../../../agents/episode';
import { scoreEpisode } from '../../../agents/rewards';
import { loadTasks } from '../../../activities/tasks';
import { executeTool } from '../../../activities/tools';
import { TeamDefinitionError } from '../../../agents/team';
import { move, NAVIGATOR_TURNS, navigatorTeam, type NavigatorTask } from '../../../examples/teams/navigator';

const team = navigatorTeam();

/** Each generate call returns the next scripted move (one token). */
function scripted(replies: string[], t = team): EpisodeIO {
  return {
    async generate() {
      const text = replies.shift();
      if (text === undefined) throw new Error('script exhausted');
      const tokens = t.tokenizer.encode(text);
      return { tokens, logprobs: tokens.map(() => -1), stopReason: 'max_tokens' };
    },
    callTool: (req) => executeTool(t, req),
    now: () => 0,
  };
}

// start (2, 7), goal (0, 1): two moves west, six south
const task: NavigatorTask = { start: [2, 7], goal: [0, 1] };
const input = { episodeId: 'e', seed: 1, versions: { policy: 0 }, task };

describe('navigator team', () => {
  it('eight right moves: every turn closer, arrived', async () => {
    const traj = await runEpisode(team, input, scripted(['W', 'S', 'S', 'W', 'S', 'S', 'S', 'S']));
    assert.deepEqual(traj.outcome, {
      cells: [
        [1, 7],
        [1, 6],
        [1, 5],
        [0, 5],
        [0, 4],
        [0, 3],
        [0, 2],
        [0, 1],
      ],
    });
    // each turn is shown its cell and the goal; turns form a chain
    assert.deepEqual(
      traj.turns.map((t) => team.tokenizer.decode(t.contextTokens.slice(1))),
      ['2701', '1701', '1601', '1501', '0501', '0401', '0301', '0201'],
    );
    assert.deepEqual(
      traj.turns.map((t) => t.parents),
      [[], [0], [1], [2], [3], [4], [5], [6]],
    );
    const scored = scoreEpisode(team, task, traj);
    assert.deepEqual(
      scored.rewards.map((r) => [r.components, r.perTurn]),
      Array.from({ length: NAVIGATOR_TURNS }, () => [{ arrived: 1, closer: 0.25 }, ['closer']]),
    );
    assert.equal(team.success({ task, outcome: traj.outcome as never, status: 'completed' }), true);
  });

  it('a wrong move loses the arrival, and later moves are still judged from where the agent is', async () => {
    // turn 1 goes north (away: 1,8), turn 2 comes back (1,7), turn 3 answers a digit (stays); the rest close in to 0,4
    const traj = await runEpisode(team, input, scripted(['W', 'N', 'S', '5', 'S', 'W', 'S', 'S']));
    assert.deepEqual((traj.outcome as { cells: unknown[] }).cells.at(-1), [0, 4]);
    const scored = scoreEpisode(team, task, traj);
    assert.deepEqual(
      scored.rewards.map((r) => r.components),
      [0.25, 0, 0.25, 0, 0.25, 0.25, 0.25, 0.25].map((closer) => ({ arrived: 0, closer })),
    );
    assert.equal(team.success({ task, outcome: traj.outcome as never, status: 'completed' }), false);
  });

  it('moves stay on the grid; anything but N, S, E, W stays put', () => {
    assert.deepEqual(move([0, 0], 'W'), [0, 0]);
    assert.deepEqual(move([9, 9], 'N'), [9, 9]);
    assert.deepEqual(move([4, 4], 'E'), [5, 4]);
    assert.deepEqual(move([4, 4], ''), [4, 4]);
    assert.deepEqual(move([4, 4], '7'), [4, 4]);
  });

  it('every task has its goal on the grid exactly eight moves away', () => {
    const tasks = loadTasks(team);
    assert.ok(tasks.length > 500, `${tasks.length} tasks`);
    for (const t of tasks) {
      const { start, goal } = t.data as NavigatorTask;
      assert.equal(Math.abs(start[0] - goal[0]) + Math.abs(start[1] - goal[1]), NAVIGATOR_TURNS, t.id);
      assert.ok(
        [...start, ...goal].every((c) => c >= 0 && c <= 9),
        t.id,
      );
    }
    assert.ok(tasks.some((t) => t.split === 'eval'));
  });

  it('option turns: tasks that many moves away, episodes of that many turns', async () => {
    const short = navigatorTeam({ turns: 3 });
    for (const t of loadTasks(short)) {
      const { start, goal } = t.data as NavigatorTask;
      assert.equal(Math.abs(start[0] - goal[0]) + Math.abs(start[1] - goal[1]), 3, t.id);
    }
    // start (2, 7), goal (1, 5): one move west, two south
    const near: NavigatorTask = { start: [2, 7], goal: [1, 5] };
    const traj = await runEpisode(short, { ...input, task: near }, scripted(['W', 'S', 'S'], short));
    assert.deepEqual(traj.outcome, {
      cells: [
        [1, 7],
        [1, 6],
        [1, 5],
      ],
    });
    assert.equal(short.success({ task: near, outcome: traj.outcome as never, status: 'completed' }), true);
    // a wrong last move: two of three closer, not arrived
    const astray = await runEpisode(short, { ...input, task: near }, scripted(['W', 'S', 'N'], short));
    assert.deepEqual(
      scoreEpisode(short, near, astray).rewards.map((r) => r.components),
      [
        { arrived: 0, closer: 0.25 },
        { arrived: 0, closer: 0.25 },
        { arrived: 0, closer: 0 },
      ],
    );
    assert.equal(short.success({ task: near, outcome: astray.outcome as never, status: 'completed' }), false);
  });

  it('option turns out of range is a definition error naming teamOptions.turns', () => {
    for (const turns of [0, 19, 2.5, '8']) {
      assert.throws(
        () => navigatorTeam({ turns } as never),
        (e: unknown) =>
          e instanceof TeamDefinitionError && e.problems.length === 1 && e.problems[0]!.startsWith('teamOptions.turns: must be a whole number from 1 to 18'),
        String(turns),
      );
    }
  });
});
