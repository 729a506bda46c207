/**
 * `research`: three roles in a chain. A planner turns the question into a
 * query, a searcher looks the query up in a small corpus shipped in the repo,
 * and an answerer reads the searcher's findings and answers.
 *
 * Each role has its own reward (query right, search made, answer faithful to
 * what was found and right), so each can learn from a random initialization;
 * the team succeeds only when all three do their part.
 */
import { z } from 'zod';
import { agent, tinyLM, generatedTasks, defineTeam, charTokenizer, defineTool, keySyntax } from 'troupe';
import corpus from './corpus.json';

const facts: Record<string, string> = corpus.facts;
const keys = Object.keys(facts);

export const search = defineTool({
  name: 'search',
  description: 'Looks a one-letter key up in the corpus.',
  input: z.object({ query: z.string().regex(/^[a-h]$/, 'expected one key letter a-h') }),
  output: z.object({ value: z.string() }),
  async execute({ query }) {
    const value = facts[query];
    if (value === undefined) throw new Error(`no fact for ${query}`);
    return { value };
  },
  render: ({ value }) => value,
});

export interface ResearchTask {
  key: string;
  /** A decoy letter in the question, so the planner has to pick the right one. */
  decoy: string;
}

export interface ResearchOutcome {
  query: string;
  found: string | null;
  answer: string;
}

const tokenizer = charTokenizer('abcdefgh0123456789?=:E');

export interface ResearchOptions {
  /**
   * 'separate' (default): one policy per role; 'shared': one for all three. With one tiny
   * shared policy the roles interfere (the answerer collapses onto one digit early).
   */
  models?: 'shared' | 'separate';
}

export function researchTeam(options: ResearchOptions = {}) {
  const separate = options.models !== 'shared';
  // A strong entropy bonus: without one a role collapses onto one token within a few steps (at lr 0.02,
  // entropy bonus 0.03: the answerer always says '8', the fact of the letter the planner happened to
  // query most, entropy 0.00 by step 15), and GRPO cannot recover from a deterministic policy; a gentle
  // lr instead (0.004) learns too slowly for the default 40 steps (eval 0.125 median over 20 seeds).
  // With the bonus at 0.3 a larger lr is safe; greedy eval needs only the argmax right (bench/seeds.ts).
  const policy = () => tinyLM({ tokenizer, contextWindow: 8, embedDim: 16, hiddenDim: 64, optimizer: { lr: 0.03, entropyCoef: 0.3 } });
  const modelOf = (role: string) => (separate ? role : 'policy');
  return defineTeam({
    name: 'research',
    description: 'Planner, searcher with a search tool, answerer.',
    tokenizer,
    models: separate ? { planner: policy(), searcher: policy(), answerer: policy() } : { policy: policy() },
    toolSyntax: keySyntax({ trigger: '=', tool: 'search', argument: 'query', separators: ':?', error: 'E' }),
    agents: {
      // One sampled token each: a query letter, the '=' key, an answer digit.
      planner: agent({ model: modelOf('planner'), maxTokens: 1 }),
      searcher: agent({ model: modelOf('searcher'), tools: [search], maxTokens: 1, maxToolCalls: 1 }),
      // Trained on its own job only; `correct` is logged (weight 0) so a lucky constant answer is not reinforced.
      answerer: agent({ model: modelOf('answerer'), maxTokens: 1, optimizer: { rewardWeights: { correct: 0 } } }),
    },
    tasks: generatedTasks<ResearchTask>({
      seed: 11,
      count: keys.length * keys.length,
      evalFraction: 0.25,
      make: (_random, i) => {
        const key = keys[Math.floor(i / keys.length)]!;
        const decoy = keys[i % keys.length]!;
        return { id: `${key}${decoy}`, data: { key, decoy } };
      },
    }),
    async episode({ task, agents }): Promise<ResearchOutcome> {
      // The question asks for the first letter; the second is a decoy.
      const plan = await agents.planner.act(`${task.key}${task.decoy}?`);
      const query = plan.reply.slice(0, 1);
      const found = await agents.searcher.act(`:${query}`, { after: [plan] });
      const hit = found.toolCalls.find((c) => c.output !== undefined);
      // The answerer reads the searcher's findings (its call and the tool's output).
      const answer = await agents.answerer.act(`${found.text}:`, { after: [found] });
      return { query, found: hit ? (hit.output as { value: string }).value : null, answer: answer.reply.slice(0, 1) };
    },
    rewards: {
      planner: ({ task, outcome }) => ({ query: outcome?.query === task.key ? 1 : 0 }),
      searcher: ({ outcome }) => ({ found: outcome?.found != null ? 1 : 0 }),
      // Credit for the answerer's own job (repeating what was found) as well as for the team's result.
      answerer: ({ task, outcome }) => ({
        faithful: outcome?.found != null && outcome.answer === outcome.found ? 1 : 0,
        correct: outcome?.answer === facts[task.key] ? 1 : 0,
      }),
    },
    success: ({ task, outcome }) => outcome?.answer === facts[task.key],
  });
}

export default researchTeam;
