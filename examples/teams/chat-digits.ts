/**
 * `chat-digits`: agent code written against the official `openai` client, trained
 * through the gateway (gateway/). Its episode function is what a user would write
 * for any OpenAI-compatible server, save for the base URL and key: it shows the
 * policy two digits and asks for the first, then continues the same conversation
 * with `?` and asks for the second. Each call is a turn of the reader, token in /
 * token out: the second call's history holds the first reply, which the gateway
 * matches to the id it sampled.
 *
 * Small enough to learn from scratch on a CPU, and to generalize to held-out
 * pairs (each answer is a copy from a fixed place in the context): a 12-character
 * vocabulary, a chat template that writes a user message as `content=` and an
 * assistant message as its content (its end would be EOS, which has no text:
 * endToken ''), one-token replies, and a tiny-lm policy that sees the last 8
 * tokens. Batched rollout only (the default): the gateway serves episodes that
 * run in the pool worker, not in the workflow sandbox.
 */
import type OpenAI from 'openai';
import { agent, chatTemplate, tinyLM, generatedTasks, defineTeam, charTokenizer } from 'troupe';

export interface DigitsTask {
  a: number;
  b: number;
}

const tokenizer = charTokenizer('0123456789?=');
const TEMPLATE = "{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}{% elif m.role == 'user' %}{{ m.content }}={% endif %}{% endfor %}";

/**
 * The client, loaded where the episode runs. Bundled teams are also compiled into the workflow
 * bundle (for durable episodes, which have no gateway): webpack leaves this import alone.
 */
async function openai(): Promise<typeof OpenAI> {
  try {
    return (await import(/* webpackIgnore: true */ 'openai')).default;
  } catch (e) {
    throw new Error(`team chat-digits needs the openai package (npm install openai): ${(e as Error).message}`);
  }
}

export function chatDigitsTeam() {
  return defineTeam({
    name: 'chat-digits',
    description: 'OpenAI-client agent code trained through the gateway: two digits, say the first, then the second.',
    tokenizer,
    chatTemplate: chatTemplate(TEMPLATE, {}, ''),
    run: { steps: 60 }, // the seed table's run length (README)
    // ai-sdk-lookup's settings (lr 0.03, entropyCoef 0.15, Dr. GRPO advantages): with the math team's
    // (lr 0.02, entropyCoef 0.01) 2 of 5 seeds reached 0.9 in 60 steps, with these 5 of 5 (docs/performance.md)
    models: {
      policy: tinyLM({
        tokenizer,
        contextWindow: 8,
        embedDim: 16,
        hiddenDim: 64,
        optimizer: { lr: 0.03, entropyCoef: 0.15, estimator: { normalizeStd: false } },
      }),
    },
    agents: { reader: agent({ model: 'policy', maxTokens: 1, maxTurns: 2 }) },
    tasks: generatedTasks<DigitsTask>({
      seed: 5,
      count: 100,
      evalFraction: 0.2,
      make: (_random, i) => ({ id: String(i).padStart(2, '0'), data: { a: Math.floor(i / 10), b: i % 10 } }),
    }),
    async episode({ task, agents }) {
      const OpenAIClient = await openai();
      const client = new OpenAIClient({ ...agents.reader.openai, maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: `${task.a}${task.b}` }];
      const first = await client.chat.completions.create({ model: 'policy', messages, max_tokens: 1 });
      const firstDigit = first.choices[0]!.message.content ?? '';
      messages.push({ role: 'assistant', content: firstDigit }, { role: 'user', content: '?' });
      const second = await client.chat.completions.create({ model: 'policy', messages, max_tokens: 1 });
      return { first: firstDigit, second: second.choices[0]!.message.content ?? '' };
    },
    rewards: {
      // one reward per turn: the first turn is scored on the first digit, the second on the second
      reader: ({ task, outcome, turn }) => ({
        correct: Number(turn.index === 0 ? outcome?.first === String(task.a) : outcome?.second === String(task.b)),
      }),
    },
    success: ({ task, outcome }) => outcome?.first === String(task.a) && outcome.second === String(task.b),
  });
}

export default chatDigitsTeam;
