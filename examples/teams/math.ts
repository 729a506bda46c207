/**
 * `math`: a solver with a calculator and a verifier that judges the solver.
 *
 * Made to be learnable from a random initialization by the built-in tiny
 * policy: one-character tool calls (typing '=' evaluates the expression on the
 * display), a 19-token vocabulary, short answers. The verifier's reward is ten
 * times the solver's, the case per-agent advantage normalization is for.
 */
import { z } from 'zod';
import {
  agent,
  lora,
  tinyLM,
  transformer,
  type ModelSpec,
  generatedTasks,
  defineTeam,
  TeamDefinitionError,
  charTokenizer,
  defineTool,
  keySyntax,
} from 'troupe';

export interface MathTask {
  a: number;
  b: number;
}

export interface MathOutcome {
  answer: number | null;
  verdict: string;
}

export const calculator = defineTool({
  name: 'calculator',
  description: 'Adds two numbers of at most two digits: "12+7" gives 19.',
  input: z.object({ expr: z.string().regex(/^\d{1,2}\+\d{1,2}$/, 'expected two numbers of 1-2 digits joined by +') }),
  output: z.object({ value: z.number().int() }),
  async execute({ expr }) {
    const [a, b] = expr.split('+').map(Number);
    return { value: a! + b! };
  },
  render: ({ value }) => String(value),
});

export interface MathOptions {
  /**
   * 'shared': one policy for both roles; 'separate': one policy each; 'lora' (with policy 'transformer'):
   * one LoRA adapter each over a frozen shared transformer (needs an engine that hosts LoRA: --engine pytorch).
   */
  models?: 'shared' | 'separate' | 'lora';
  /** Multiplier of the verifier's reward relative to the solver's. */
  verifierScale?: number;
  /** Operands are drawn from 0..maxOperand. */
  maxOperand?: number;
  /** The policy family: 'tiny-lm' (default) or 'transformer'. */
  policy?: 'tiny-lm' | 'transformer';
  /** With models 'lora': a PEFT adapter directory (absolute path) the solver's adapter starts from. */
  solverAdapter?: string;
}

const tokenizer = charTokenizer('0123456789+=?YNE');

/** The number the solver answered: the calculator's display if it used it, else the digits it wrote. */
export function solverAnswer(turn: { reply: string; toolCalls: ReadonlyArray<{ output?: unknown }> }): number | null {
  const shown = [...turn.toolCalls].reverse().find((c) => c.output !== undefined);
  if (shown) return (shown.output as { value: number }).value;
  return /^\d{1,3}$/.test(turn.reply) ? Number(turn.reply) : null;
}

export function mathTeam(options: MathOptions = {}) {
  const scale = options.verifierScale ?? 10;
  const maxOperand = options.maxOperand ?? 49;
  if (options.policy !== undefined && options.policy !== 'tiny-lm' && options.policy !== 'transformer') {
    throw new TeamDefinitionError('math', [
      { path: 'teamOptions.policy', message: `must be "tiny-lm" or "transformer", got ${JSON.stringify(options.policy)}` },
    ]);
  }
  if (options.models === 'lora' && options.policy !== 'transformer')
    throw new TeamDefinitionError('math', [{ path: 'teamOptions.models', message: '"lora" adapts a transformer: set policy "transformer" too' }]);
  // lr 0.02: Adam steps this large suit a 9,811-parameter tiny-lm policy learning from scratch (measured: eval 0 -> 0.98 in 20 steps).
  // entropyCoef 0.01: while the solver is still mostly wrong, 'N' is the verifier's right verdict, and
  // without a bonus it can become the verifier's only verdict before the solver turns accurate; then no
  // sample ever says 'Y', every group's judged reward is 0, the advantage is 0 and it never recovers
  // (seed 11: verifier entropy 0.00 from step 15, eval 0). The bonus keeps 'Y' sampled (bench/seeds.ts).
  const policy = (): ModelSpec =>
    options.policy === 'transformer'
      ? transformer({ tokenizer, width: 64, layers: 2, heads: 4, maxSeq: 48, optimizer: { lr: 0.002 } })
      : tinyLM({ tokenizer, contextWindow: 8, embedDim: 16, hiddenDim: 64, optimizer: { lr: 0.02, entropyCoef: 0.01 } });
  // LoRA: the policy is the frozen base (no agent trains it); each role trains rank-8 adapters on the attention
  // projections, which every layout has (the MLP's are 1, 2 or g, u, d: a checkpoint's is SwiGLU)
  const adapter = (from?: string) =>
    lora({ tokenizer, base: 'policy', rank: 8, alpha: 16, targets: ['q', 'k', 'v', 'o'], optimizer: { lr: 0.005 }, ...(from ? { adapter: from } : {}) });
  const models: Record<string, ModelSpec> =
    options.models === 'separate'
      ? { solver: policy(), verifier: policy() }
      : options.models === 'lora'
        ? { policy: policy(), solver: adapter(options.solverAdapter), verifier: adapter() }
        : { policy: policy() };
  const modelOf = (role: 'solver' | 'verifier') => (options.models === 'separate' || options.models === 'lora' ? role : 'policy');

  return defineTeam({
    name: 'math',
    description: 'A solver with a calculator and a verifier; the verifier is rewarded at ten times the solver scale.',
    tokenizer,
    models,
    toolSyntax: keySyntax({ trigger: '=', tool: 'calculator', argument: 'expr', separators: '?=', error: 'E' }),
    agents: {
      solver: agent({ model: modelOf('solver'), tools: [calculator], maxTokens: 3, maxToolCalls: 1 }),
      verifier: agent({ model: modelOf('verifier'), maxTokens: 2 }),
    },
    tasks: generatedTasks<MathTask>({
      seed: 7,
      count: (maxOperand + 1) ** 2,
      evalFraction: 0.2,
      make: (_random, i) => {
        const a = Math.floor(i / (maxOperand + 1));
        const b = i % (maxOperand + 1);
        return { id: `${a}+${b}`, data: { a, b } };
      },
    }),
    async episode({ task, agents }): Promise<MathOutcome> {
      const question = `${task.a}+${task.b}`;
      const solution = await agents.solver.act(question);
      const verdict = await agents.verifier.act(`${question}${solution.text}?`, { after: [solution] });
      // its first character, not its first UTF-16 unit: half of an astral character (a large vocabulary has them) is not storable JSON
      return { answer: solverAnswer(solution), verdict: Array.from(verdict.reply)[0] ?? '' };
    },
    rewards: {
      solver: ({ task, outcome }) => ({ correct: outcome?.answer === task.a + task.b ? 1 : 0 }),
      verifier: ({ task, outcome }) => {
        const right = outcome?.answer === task.a + task.b;
        const judged = (outcome?.verdict === 'Y' && right) || (outcome?.verdict === 'N' && !right);
        return { judged: judged ? scale : 0 };
      },
    },
    success: ({ task, outcome }) => outcome?.answer === task.a + task.b && outcome.verdict === 'Y',
  });
}

export default mathTeam;
