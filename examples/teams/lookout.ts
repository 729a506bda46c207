/**
 * `lookout`: a walker and a lookout cross a 10×10 grid to a goal, for
 * turn-level credit between roles (issue #30). A task is a start cell and a
 * goal LOOKOUT_DISTANCE (8) moves away. Each turn the walker is shown its cell
 * and the goal ("2705": at x 2, y 7, goal x 0, y 5) and proposes one move (N, S,
 * E, W as in `navigator`); the lookout is shown the same and the proposal
 * ("2705W") and answers V to veto it or anything else to let it be made. A
 * vetoed move is not made. The walk ends at the goal or after
 * LOOKOUT_DISTANCE + LOOKOUT_SLACK (10) moves, so a good walk takes 8 turns of
 * each role: one wrong move made costs two of the slack's moves (away and
 * back), one vetoed only the turn.
 *
 * Rewards, each role for its own job: the walker `closer` (0.25 when its
 * proposal would cut the distance to the goal), the lookout `caught` (0.25 when
 * it vetoes a proposal that would not) and `blocked` (−0.25 when it vetoes one
 * that would), and both the sparse `arrived` (1 when the walk reached the
 * goal).
 *
 * Episode-level credit (`grpo` in scope `group`) points the wrong way here. It
 * gives every turn the team's average score, in which a walker's proposal is
 * worth 0.25 × (1 − v) when right and 0.25 × v′ when wrong (v, v′: how often
 * the lookout vetoes right and wrong ones). A lookout that vetoes more often
 * than not (v + v′ > 1) makes wrong proposals pay the team more, and vetoing is
 * what the lookout learns first, while most of the walker's moves are wrong.
 * Trained so, the walker settles on a non-move and the lookout on vetoing it:
 * 0.25 a turn for the team, never arriving. Turn-level estimators score each
 * role's turns by its own rewards; the default is turn-return. bench/credit.ts
 * compares them (docs/performance.md, Credit over turns).
 */
import { agent, tinyLM, generatedTasks, defineTeam, charTokenizer } from 'troupe';
import { distance, move, walkTask, type Cell, type NavigatorTask } from './navigator';

/** As navigator's: a start cell and a goal. */
export type LookoutTask = NavigatorTask;

/** One move of the walk. */
export interface LookoutStep {
  /** The walker's cell when it proposed. */
  from: Cell;
  /** The first character of the walker's reply ('' when it gave none). */
  proposal: string;
  vetoed: boolean;
}

export interface LookoutOutcome {
  steps: LookoutStep[];
  /** Where the walk ended. */
  end: Cell;
}

/** Moves from the start to the goal. */
export const LOOKOUT_DISTANCE = 8;
/** Moves beyond LOOKOUT_DISTANCE the walk may take. */
export const LOOKOUT_SLACK = 2;
const REWARD = 0.25;

const tokenizer = charTokenizer('0123456789NSEWV');

/** Whether a proposal from `from` would cut the distance to the goal. */
const wouldClose = (from: Cell, proposal: string, goal: Cell) => distance(move(from, proposal), goal) < distance(from, goal);

/** The role's own turn number (0-based) of an episode turn. */
const ownTurn = (turn: { index: number; agent: string }, turns: ReadonlyArray<{ index: number; agent: string }>) =>
  turns.filter((t) => t.agent === turn.agent && t.index < turn.index).length;

export function lookoutTeam() {
  // navigator's policy, one per role so each learns its own job; turn-return by default (bench/credit.ts)
  const policy = () =>
    tinyLM({ tokenizer, contextWindow: 8, embedDim: 16, hiddenDim: 64, optimizer: { lr: 0.02, entropyCoef: 0.01, estimator: { name: 'turn-return' } } });
  const arrived = (task: LookoutTask, outcome: LookoutOutcome | undefined) => outcome !== undefined && distance(outcome.end, task.goal) === 0;
  return defineTeam({
    name: 'lookout',
    description:
      'A walker proposes moves to a goal eight moves away on a 10x10 grid and a lookout may veto each: per-role per-turn rewards and a sparse arrival.',
    tokenizer,
    // turn-return's first eval >= 0.9 came by step 48 on 9 of 10 seeds, by step 40 on 6 (docs/performance.md)
    run: { steps: 48 },
    models: { walker: policy(), lookout: policy() },
    agents: {
      walker: agent({ model: 'walker', maxTokens: 1, maxTurns: LOOKOUT_DISTANCE + LOOKOUT_SLACK, memory: false }),
      lookout: agent({ model: 'lookout', maxTokens: 1, maxTurns: LOOKOUT_DISTANCE + LOOKOUT_SLACK, memory: false }),
    },
    tasks: generatedTasks<LookoutTask>({
      seed: 17,
      count: 2000,
      evalFraction: 0.1,
      make: (random) => walkTask(random, LOOKOUT_DISTANCE),
    }),
    async episode({ task, agents }): Promise<LookoutOutcome> {
      const steps: LookoutStep[] = [];
      let cell = task.start;
      let previous;
      for (let k = 0; k < LOOKOUT_DISTANCE + LOOKOUT_SLACK && distance(cell, task.goal) > 0; k++) {
        const shown = `${cell.join('')}${task.goal.join('')}`;
        const walker = await agents.walker.act(shown, previous ? { after: [previous] } : undefined);
        const proposal = walker.reply.slice(0, 1);
        const lookout = await agents.lookout.act(`${shown}${proposal}`, { after: [walker] });
        const vetoed = lookout.reply.startsWith('V');
        steps.push({ from: cell, proposal, vetoed });
        if (!vetoed) cell = move(cell, proposal);
        previous = lookout;
      }
      return { steps, end: cell };
    },
    rewards: {
      walker: ({ task, outcome, turn, turns }) => {
        const step = outcome?.steps[ownTurn(turn, turns)];
        return {
          episode: { arrived: arrived(task, outcome) ? 1 : 0 },
          turn: { closer: step && wouldClose(step.from, step.proposal, task.goal) ? REWARD : 0 },
        };
      },
      lookout: ({ task, outcome, turn, turns }) => {
        const step = outcome?.steps[ownTurn(turn, turns)];
        const good = step !== undefined && wouldClose(step.from, step.proposal, task.goal);
        return {
          episode: { arrived: arrived(task, outcome) ? 1 : 0 },
          turn: { caught: step?.vetoed && !good ? REWARD : 0, blocked: step?.vetoed && good ? -REWARD : 0 },
        };
      },
    },
    success: ({ task, outcome }) => arrived(task, outcome),
  });
}

export default lookoutTeam;
