/**
 * `triad`: three roles on two models, written for bench/staleness.ts (issue #44: a team the
 * asynchronous defaults were not tuned on). A solver with a calculator and a judge share a
 * tiny-lm policy; a scribe on a small transformer files the judge's verdict (it must copy a
 * 'Y' or an 'N', never file anything else).
 *
 * Success: the solver's sum is right, the judge says 'Y' to it, and the scribe files that 'Y'.
 */
import { agent, charTokenizer, defineTeam, generatedTasks, keySyntax, tinyLM, transformer } from 'troupe';
// the calculator and the reading of the solver's answer are math's (examples/teams/math.ts)
import { calculator, solverAnswer } from '../../examples/teams/math';

const tokenizer = charTokenizer('0123456789+=?YNE');

interface Task {
  a: number;
  b: number;
}

export default function triadTeam() {
  const MAX = 29;
  return defineTeam({
    name: 'triad',
    description: 'Solver with a calculator, a judge on the same tiny-lm, and a scribe on a transformer.',
    tokenizer,
    models: {
      policy: tinyLM({ tokenizer, contextWindow: 8, embedDim: 16, hiddenDim: 64, optimizer: { lr: 0.02, entropyCoef: 0.01 } }),
      scribe: transformer({ tokenizer, width: 64, layers: 1, heads: 2, positions: 'learned', maxSeq: 24, optimizer: { lr: 0.002, entropyCoef: 0.01 } }),
    },
    toolSyntax: keySyntax({ trigger: '=', tool: 'calculator', argument: 'expr', separators: '?=', error: 'E' }),
    agents: {
      solver: agent({ model: 'policy', tools: [calculator], maxTokens: 3, maxToolCalls: 1 }),
      judge: agent({ model: 'policy', maxTokens: 1 }),
      scribe: agent({ model: 'scribe', maxTokens: 1 }),
    },
    tasks: generatedTasks<Task>({
      seed: 5,
      count: (MAX + 1) ** 2,
      evalFraction: 0.2,
      make: (_random, i) => ({ id: `t${i}`, data: { a: Math.floor(i / (MAX + 1)), b: i % (MAX + 1) } }),
    }),
    async episode({ task, agents }) {
      const question = `${task.a}+${task.b}`;
      const solution = await agents.solver.act(question);
      const verdict = await agents.judge.act(`${question}${solution.text}?`, { after: [solution] });
      const filed = await agents.scribe.act(`${question}${solution.text}?${verdict.reply}?`, { after: [verdict] });
      return { answer: solverAnswer(solution), verdict: Array.from(verdict.reply)[0] ?? '', filed: filed.reply };
    },
    rewards: {
      solver: ({ task, outcome }) => ({ correct: outcome?.answer === task.a + task.b ? 1 : 0 }),
      judge: ({ task, outcome }) => {
        const right = outcome?.answer === task.a + task.b;
        return { judged: (outcome?.verdict === 'Y' && right) || (outcome?.verdict === 'N' && !right) ? 1 : 0 };
      },
      scribe: ({ outcome }) => ({ filed: (outcome?.verdict === 'Y' || outcome?.verdict === 'N') && outcome.filed === outcome.verdict ? 1 : 0 }),
    },
    success: ({ task, outcome }) => outcome?.answer === task.a + task.b && outcome.verdict === 'Y' && outcome.filed === 'Y',
  });
}
