/**
 * `chat-sum`: agent code written against the official `openai` client, trained
 * through the gateway (gateway/). Its episode function is what a user would
 * write for any OpenAI-compatible server, save for the base URL and key: it asks
 * the policy for a sum, then continues the same conversation and asks for one
 * more. Each call is a turn of the solver, token in / token out: the second call's
 * history holds the first reply, which the gateway matches to the ids it sampled.
 *
 * Small enough to learn from scratch on a CPU: a 12-character vocabulary, a chat
 * template that writes a user message as `content=` and an assistant message as
 * its content (its end is EOS, which has no text: endToken ''), and a tiny-lm
 * policy that sees the last 8 tokens. Batched rollout only (the default): the
 * gateway serves episodes that run in the pool worker, not in the workflow sandbox.
 */
import type OpenAI from 'openai';
import { agent } from '../agent';
import { chatTemplate } from '../chat-template';
import { tinyLM } from '../model';
import { generatedTasks } from '../tasks';
import { defineTeam } from '../team';
import { charTokenizer } from '../tokenizer';

export interface SumTask {
  a: number;
  b: number;
}

const tokenizer = charTokenizer('0123456789+=');
const TEMPLATE = "{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}{% elif m.role == 'user' %}{{ m.content }}={% endif %}{% endfor %}";

/**
 * The client, loaded where the episode runs. Bundled teams are also compiled into the workflow
 * bundle (for durable episodes, which have no gateway): webpack leaves this import alone.
 */
async function openai(): Promise<typeof OpenAI> {
  try {
    return (await import(/* webpackIgnore: true */ 'openai')).default;
  } catch (e) {
    throw new Error(`team chat-sum needs the openai package (npm install openai): ${(e as Error).message}`);
  }
}

export function chatSumTeam() {
  return defineTeam({
    name: 'chat-sum',
    description: 'OpenAI-client agent code trained through the gateway: a sum, then one more.',
    tokenizer,
    chatTemplate: chatTemplate(TEMPLATE, {}, ''),
    // lr 0.02 and a 0.01 entropy bonus: the math team's settings for a tiny-lm learning from scratch
    models: { policy: tinyLM({ tokenizer, contextWindow: 8, embedDim: 16, hiddenDim: 64, optimizer: { lr: 0.02, entropyCoef: 0.01 } }) },
    agents: { solver: agent({ model: 'policy', maxTokens: 2, maxTurns: 2 }) },
    tasks: generatedTasks<SumTask>({
      seed: 5,
      count: 25,
      evalFraction: 0.2,
      make: (_random, i) => ({ id: `${Math.floor(i / 5)}+${i % 5}`, data: { a: Math.floor(i / 5), b: i % 5 } }),
    }),
    async episode({ task, agents }) {
      const OpenAIClient = await openai();
      const client = new OpenAIClient({ ...agents.solver.openai, maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: `${task.a}+${task.b}` }];
      const first = await client.chat.completions.create({ model: 'policy', messages, max_tokens: 2 });
      const sum = first.choices[0]!.message.content ?? '';
      messages.push({ role: 'assistant', content: sum }, { role: 'user', content: '+1' });
      const second = await client.chat.completions.create({ model: 'policy', messages, max_tokens: 2 });
      return { sum, next: second.choices[0]!.message.content ?? '' };
    },
    rewards: {
      // one reward per turn: the first turn is scored on the sum, the second on the sum + 1
      solver: ({ task, outcome, turn }) => ({
        correct: turn.index === 0 ? Number(outcome?.sum === String(task.a + task.b)) : Number(outcome?.next === String(Number(outcome?.sum) + 1)),
      }),
    },
    success: ({ task, outcome }) => outcome?.sum === String(task.a + task.b) && outcome.next === String(task.a + task.b + 1),
  });
}
