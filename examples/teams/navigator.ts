/**
 * `navigator`: one agent walks a 10×10 grid to a goal, one move per turn, for
 * turn-level credit over long episodes (issue #30). A task is a start cell and
 * a goal exactly NAVIGATOR_TURNS (8) moves away, or as many as option `turns`
 * (1–18) says; each turn the agent is shown its cell and the goal as four
 * digits ("2705": at x 2, y 7, goal x 0, y 5) and answers one move: N (y + 1),
 * S (y − 1), E (x + 1) or W (x − 1). Anything else, or a move off the grid,
 * leaves it where it was.
 *
 * Every turn must close the distance, so a task takes eight (`turns`) right
 * decisions in as many different states. A wrong move does not end the
 * episode: later turns are judged from wherever the agent got to.
 *
 * Rewards: sparse, the episode's `arrived` (1 at the goal after the last
 * turn), plus per turn `closer` (0.25 when that move cut the distance to the
 * goal). Episode-level credit gives each move the average of all eight, so a
 * right move in an episode with wrong ones is pushed down with them; a
 * turn-level estimator scores it on its own. bench/credit.ts compares the
 * estimators on this team (bench/results/credit-navigator.md): they reach eval 0.9 in
 * about the same number of steps, with 8 turns and with 12; docs/performance.md
 * (Credit over turns) measures why: AdamW's step and the data of a step set
 * the pace, not the credit.
 */
import { agent, tinyLM, generatedTasks, defineTeam, TeamDefinitionError, charTokenizer } from 'troupe';

/** [x, y] */
export type Cell = [number, number];

export interface NavigatorTask {
  start: Cell;
  goal: Cell;
}

export interface NavigatorOutcome {
  /** The cell after each turn. */
  cells: Cell[];
}

/** Turns per episode: the start is this many moves from the goal. */
export const NAVIGATOR_TURNS = 8;
/** Cells per side of the grid (coordinates 0..GRID − 1, one digit each). */
export const GRID = 10;
const CLOSER_REWARD = 0.25;

export interface NavigatorOptions {
  /** Moves per episode (the start is this many from the goal), 1 to 2 × (GRID − 1); default NAVIGATOR_TURNS. */
  turns?: number;
}

const MOVES: Record<string, Cell> = { N: [0, 1], S: [0, -1], E: [1, 0], W: [-1, 0] };
const tokenizer = charTokenizer('0123456789NSEW');

/** Moves between two cells (Manhattan distance). */
export const distance = (a: Cell, b: Cell) => Math.abs(a[0] - b[0]) + Math.abs(a[1] - b[1]);
const onGrid = (c: Cell) => c.every((v) => v >= 0 && v < GRID);

/** Where a reply takes the agent from `cell`: a move's first character, kept on the grid. */
export function move(cell: Cell, reply: string): Cell {
  const d = MOVES[reply.slice(0, 1)];
  const next: Cell | undefined = d && [cell[0] + d[0], cell[1] + d[1]];
  return next && onGrid(next) ? next : [cell[0], cell[1]];
}

/** Whether the agent stood on the goal after its last turn (turn `turns`). */
const arrived = (task: NavigatorTask, outcome: NavigatorOutcome | undefined, turns: number) => {
  const last = outcome?.cells[turns - 1];
  return last !== undefined && distance(last, task.goal) === 0;
};

/** A start cell and a goal `moves` moves away, both on the grid (drawn again until the goal is). */
export function walkTask(random: () => number, moves: number): { id: string; data: NavigatorTask } {
  for (;;) {
    const start: Cell = [Math.floor(random() * GRID), Math.floor(random() * GRID)];
    const dx = Math.floor(random() * (moves + 1)) * (random() < 0.5 ? -1 : 1);
    const dy = (moves - Math.abs(dx)) * (random() < 0.5 ? -1 : 1);
    const goal: Cell = [start[0] + dx, start[1] + dy];
    if (onGrid(goal)) return { id: `${start.join('')}>${goal.join('')}`, data: { start, goal } };
  }
}

export function navigatorTeam(options: NavigatorOptions = {}) {
  const turns = options.turns ?? NAVIGATOR_TURNS;
  if (!Number.isInteger(turns) || turns < 1 || turns > 2 * (GRID - 1))
    throw new TeamDefinitionError('navigator', [
      { path: 'teamOptions.turns', message: `must be a whole number from 1 to ${2 * (GRID - 1)}, got ${JSON.stringify(options.turns)}` },
    ]);
  return defineTeam({
    name: 'navigator',
    description: `One agent walks a 10x10 grid to a goal ${turns === NAVIGATOR_TURNS ? 'eight' : turns} moves away, one move a turn: a sparse arrival reward and a per-turn one.`,
    tokenizer,
    models: {
      // as chain's policy (lr 0.02 and an entropy bonus suit the tiny-lm learning from scratch)
      policy: tinyLM({
        tokenizer,
        contextWindow: 8,
        embedDim: 16,
        hiddenDim: 64,
        optimizer: { lr: 0.02, entropyCoef: 0.01, estimator: { name: 'at-grpo' } },
      }),
    },
    agents: {
      walker: agent({ model: 'policy', maxTokens: 1, maxTurns: turns, memory: false }),
    },
    tasks: generatedTasks<NavigatorTask>({
      seed: 13,
      count: 2000,
      evalFraction: 0.1,
      make: (random) => walkTask(random, turns),
    }),
    async episode({ task, agents }): Promise<NavigatorOutcome> {
      const cells: Cell[] = [];
      let cell = task.start;
      let previous;
      for (let k = 0; k < turns; k++) {
        const turn = await agents.walker.act(`${cell.join('')}${task.goal.join('')}`, previous ? { after: [previous] } : undefined);
        cell = move(cell, turn.reply);
        cells.push(cell);
        previous = turn;
      }
      return { cells };
    },
    rewards: {
      walker: ({ task, outcome, turn }) => {
        const cells = outcome?.cells ?? [];
        const from = turn.index === 0 ? task.start : cells[turn.index - 1];
        const to = cells[turn.index];
        return {
          episode: { arrived: arrived(task, outcome, turns) ? 1 : 0 },
          turn: { closer: from !== undefined && to !== undefined && distance(to, task.goal) < distance(from, task.goal) ? CLOSER_REWARD : 0 },
        };
      },
    },
    success: ({ task, outcome }) => arrived(task, outcome, turns),
  });
}

export default navigatorTeam;
