/**
 * `chain`: one agent adds a chain of numbers with a calculator, one step per
 * turn, for turn-level credit (issue #30). A task is a start value and four
 * single-digit increments; turn k is shown the value the agent reached at turn
 * k − 1 and the k-th increment ("23+4"), and must produce their sum (typing '='
 * has the calculator show it, as in `math`). A wrong step carries over: the next
 * turn starts from the wrong value.
 *
 * Rewards: sparse, the episode's `final` (1 when the last value is the task's
 * total), plus per turn `step` (0.25 when that turn's sum is right), so a
 * turn-level estimator can tell the good turns of a failed episode from its
 * bad ones. The default estimator is turn-return; bench/credit.ts compares the
 * estimators on it.
 *
 * Option `longTail` (a share, 0-1; issue #31): that share of the tasks is 8x
 * as long (32 increments, 32 turns), the long-tail episode lengths where
 * partial rollouts matter.
 */
import { agent, tinyLM, generatedTasks, defineTeam, TeamDefinitionError, charTokenizer, keySyntax } from 'troupe';
import { calculator, solverAnswer } from './math';

export interface ChainTask {
  start: number;
  steps: number[];
}

export interface ChainOutcome {
  /** The value after each turn (null where the turn gave no number). */
  values: Array<number | null>;
}

/** Turns per episode (of a long-tail task: LONG_TAIL_FACTOR times as many). */
export const CHAIN_STEPS = 4;
export const LONG_TAIL_FACTOR = 8;

export interface ChainOptions {
  /** Share of the tasks (0-1) with LONG_TAIL_FACTOR times the turns; default 0. */
  longTail?: number;
}
const STEP_REWARD = 0.25;

const tokenizer = charTokenizer('0123456789+=E');

/** The value turn k should reach from what it was shown. */
function stepRight(task: ChainTask, values: ReadonlyArray<number | null>, k: number): boolean {
  // a turn after one that gave no number was shown 0 (see episode)
  const from = k === 0 ? task.start : (values[k - 1] ?? 0);
  return values[k] === from + task.steps[k]!;
}

export function chainTeam(options: ChainOptions = {}) {
  const longTail = options.longTail ?? 0;
  if (typeof longTail !== 'number' || !(longTail >= 0 && longTail <= 1))
    throw new TeamDefinitionError('chain', [{ path: 'teamOptions.longTail', message: `must be a share from 0 to 1, got ${JSON.stringify(options.longTail)}` }]);
  const maxSteps = longTail > 0 ? CHAIN_STEPS * LONG_TAIL_FACTOR : CHAIN_STEPS;
  return defineTeam({
    name: 'chain',
    description: 'One agent adds four numbers in four turns with a calculator: a sparse final reward and a per-turn one.',
    tokenizer,
    models: {
      // as math's policy (lr 0.02 and an entropy bonus suit the 9,811-parameter tiny-lm); turn-return by default
      policy: tinyLM({
        tokenizer,
        contextWindow: 8,
        embedDim: 16,
        hiddenDim: 64,
        optimizer: { lr: 0.02, entropyCoef: 0.01, estimator: { name: 'turn-return' } },
      }),
    },
    toolSyntax: keySyntax({ trigger: '=', tool: 'calculator', argument: 'expr', separators: '=E', error: 'E' }),
    agents: {
      adder: agent({ model: 'policy', tools: [calculator], maxTokens: 3, maxToolCalls: 1, maxTurns: maxSteps, memory: false }),
    },
    tasks: generatedTasks<ChainTask>({
      seed: 11,
      count: 2000,
      evalFraction: 0.1,
      make: (random, i) => {
        const start = Math.floor(random() * 10);
        // without the option no extra draw: the tasks stay those of runs before it
        const long = longTail > 0 && random() < longTail;
        const steps = Array.from({ length: long ? CHAIN_STEPS * LONG_TAIL_FACTOR : CHAIN_STEPS }, () => 1 + Math.floor(random() * 9));
        return { id: `c${i}:${start}+${steps.join('+')}`, data: { start, steps } };
      },
    }),
    async episode({ task, agents }): Promise<ChainOutcome> {
      const values: Array<number | null> = [];
      let value: number | null = task.start;
      let previous;
      for (const step of task.steps) {
        // a turn that gave no number leaves the next one nothing to add to: it is shown 0
        const turn = await agents.adder.act(`${value ?? 0}+${step}`, previous ? { after: [previous] } : undefined);
        value = solverAnswer(turn);
        values.push(value);
        previous = turn;
      }
      return { values };
    },
    rewards: {
      adder: ({ task, outcome, turn }) => {
        const values = outcome?.values ?? [];
        const total = task.start + task.steps.reduce((a, b) => a + b, 0);
        return {
          episode: { final: values[task.steps.length - 1] === total ? 1 : 0 },
          turn: { step: stepRight(task, values, turn.index) ? STEP_REWARD : 0 },
        };
      },
    },
    success: ({ task, outcome }) => outcome?.values[task.steps.length - 1] === task.start + task.steps.reduce((a, b) => a + b, 0),
  });
}

export default chainTeam;
