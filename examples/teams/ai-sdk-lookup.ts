/**
 * `ai-sdk-lookup`: agent code on the Vercel AI SDK (`ai` with
 * `@ai-sdk/openai-compatible`), trained through the gateway (gateway/). The
 * episode function is what a user would write for any OpenAI-compatible
 * server: `generateText` with a `lookup` tool, multi-step. The user asks for a
 * hidden digit; only the tool knows it, so the agent must call the tool and
 * then answer with what it returned.
 *
 * Small enough for a tiny-lm policy to learn from scratch: a vocabulary
 * (agents/tokenizer.ts vocabTokenizer) of the whole tool call as one piece
 * plus the characters the chat template writes here, a chat template that
 * writes each message as a one-letter tag and its content (`U?`, then `T7` for
 * the tool's result) and ends with `>`, and one-token replies. The policy
 * learns two things: after `U?>`, the tool call; after `T<digit>>`, the digit.
 * The reward counts calling the tool on its own (`looked`) as well as the
 * answer (`correct`): a random policy calls it in 1 episode of 24, answers
 * right after it in 1 of 24 again, and with the answer alone almost no group
 * would ever see a reward. Batched rollout only (the gateway serves batched
 * episodes).
 */
import { agent, chatTemplate, tinyLM, generatedTasks, defineTeam, vocabTokenizer } from 'troupe';

export interface LookupTask {
  secret: number;
}

/** The tool call as the gateway renders it (Hermes convention), one piece of the vocabulary. */
export const LOOKUP_CALL = '<tool_call>{"name":"lookup","arguments":{}}</tool_call>';
/** Every character the template writes for this agent code (a tool list, the prompt, tool results): a small vocabulary. */
const RENDERED = '[lookup]U?>T0123456789';
const tokenizer = vocabTokenizer([LOOKUP_CALL, ...new Set(RENDERED)]);
const TEMPLATE =
  '{%- if tools %}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% endif -%}' +
  "{%- for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}{% elif m.role == 'user' %}U{{ m.content }}" +
  "{% elif m.role == 'tool' %}T{{ m.content }}{% else %}S{{ m.content }}{% endif %}{% endfor -%}" +
  '{%- if add_generation_prompt %}>{% endif -%}';

/** The packages, loaded where the episode runs (bundled teams are also compiled into the workflow bundle). */
async function sdk() {
  try {
    const [ai, compatible, zod] = await Promise.all([
      import(/* webpackIgnore: true */ 'ai'),
      import(/* webpackIgnore: true */ '@ai-sdk/openai-compatible'),
      import(/* webpackIgnore: true */ 'zod'),
    ]);
    return { ai, compatible, z: zod.z };
  } catch (e) {
    throw new Error(`team ai-sdk-lookup needs the ai and @ai-sdk/openai-compatible packages: ${(e as Error).message}`);
  }
}

/** What an agent of the lookup game ends with: its answer and whether it called the tool. */
export interface LookupOutcome {
  answer: string;
  looked: boolean;
}

type Scored = { task: LookupTask; outcome: LookupOutcome | undefined };
const solved = ({ task, outcome }: Scored) => outcome?.looked === true && outcome.answer === String(task.secret);

/**
 * The lookup game without its agent code: tokenizer, chat template, model, solver and rewards.
 * `python-lookup` plays the same game with agent code in Python.
 */
export function lookupGame() {
  return {
    tokenizer,
    chatTemplate: chatTemplate(TEMPLATE, {}, ''),
    // with 16 groups a step 4 of 5 seeds reached 0.9 in 60 steps, with 32 all five by step 40 (README)
    run: { steps: 60, groupsPerStep: 32 },
    // entropyCoef 0.15 and Dr. GRPO advantages (normalizeStd false) keep the answer turn from
    // collapsing onto one or two digits before it tells the secrets apart (docs/performance.md)
    models: {
      policy: tinyLM({
        tokenizer,
        contextWindow: 4,
        embedDim: 16,
        hiddenDim: 64,
        optimizer: { lr: 0.03, entropyCoef: 0.15, estimator: { normalizeStd: false } },
      }),
    },
    agents: { solver: agent({ model: 'policy', maxTokens: 1, maxTurns: 3 }) },
    rewards: { solver: (s: Scored) => ({ looked: Number(s.outcome?.looked === true), correct: Number(solved(s)) }) },
    success: solved,
  };
}

/**
 * The game's tasks, split by id under `seed`: 200, so every digit has >= 14 training tasks. With 50,
 * the split left 2 training tasks each for the digits 1 and 2, which were 6 of the 9 held-out ones
 * (eval 0.11-0.67; docs/performance.md).
 */
export const lookupTasks = (seed: number) =>
  generatedTasks<LookupTask>({ seed, count: 200, evalFraction: 0.2, make: (_random, i) => ({ id: String(i), data: { secret: i % 10 } }) });

export function aiSdkLookupTeam() {
  return defineTeam({
    name: 'ai-sdk-lookup',
    description: 'Vercel AI SDK agent code trained through the gateway: call the lookup tool, answer with its digit.',
    ...lookupGame(),
    tasks: lookupTasks(7),
    async episode({ task, agents }): Promise<LookupOutcome> {
      const { ai, compatible, z } = await sdk();
      const provider = compatible.createOpenAICompatible({ name: 'troupe', ...agents.solver.openai });
      const result = await ai.generateText({
        model: provider.chatModel('policy'),
        prompt: '?',
        tools: {
          lookup: ai.tool({ description: 'the hidden digit', inputSchema: z.object({}), execute: async () => String(task.secret) }),
        },
        stopWhen: ai.stepCountIs(3),
        maxOutputTokens: 1,
        maxRetries: 0,
      });
      return { answer: result.text, looked: result.steps.some((s) => s.toolCalls.length > 0) };
    },
  });
}

export default aiSdkLookupTeam;
