/**
 * `agents-handoff`: agent code on the OpenAI Agents SDK (`@openai/agents`, on
 * its default Responses API; Chat Completions as an option), trained through
 * the gateway (gateway/). Two agents: a
 * `triage` agent whose only move is a handoff to `solver`, and a `solver` with
 * a function tool `lookup` that knows a hidden digit; the answer is the digit.
 * Each SDK agent's model is an `OpenAIResponsesModel` (the SDK's default) or
 * an `OpenAIChatCompletionsModel` on its Troupe agent's session (`agents.triage.openai`, `agents.solver.openai`), so every
 * call is a turn of the agent that made it, sampled from that agent's own
 * model (`triage`, `solver`); tracing is off (it would export to OpenAI).
 *
 * Small enough for a tiny-lm policy to learn from scratch: a vocabulary
 * (agents/tokenizer.ts vocabTokenizer) of each tool call as one piece plus the
 * characters the chat template writes here, a chat template that writes each
 * message as a one-letter tag and its content and ends with `>`, and
 * one-token replies. The policy learns: after the user's `U?>`, the handoff;
 * after the handoff's result, the lookup; after `T<digit>>`, the digit. The
 * solver's reward counts calling the tool on its own (`looked`) as well as
 * the answer (`correct`), or a random policy's groups would almost never see
 * a reward (ai-sdk-lookup.ts); the answer counts only after one lookup, as a
 * second lookup's context is the answer's. Batched rollout only (the gateway
 * serves batched episodes).
 */
import type OpenAI from 'openai';
import { agent, chatTemplate, tinyLM, generatedTasks, defineTeam, TeamDefinitionError, vocabTokenizer } from 'troupe';

export interface HandoffTask {
  secret: number;
}

/** The tool calls as the gateway renders them (Hermes convention), one piece of the vocabulary each. */
export const HANDOFF_CALL = '<tool_call>{"name":"transfer_to_solver","arguments":{}}</tool_call>';
export const LOOKUP_CALL = '<tool_call>{"name":"lookup","arguments":{}}</tool_call>';
/** Every character the template writes for this agent code (tool lists, instructions, prompt, tool results): a small vocabulary. */
const RENDERED = '[transfer_to_solver][lookup]SRoute.SAnswer.U?>T{"assistant":"solver"}0123456789';
const tokenizer = vocabTokenizer([HANDOFF_CALL, LOOKUP_CALL, ...new Set(RENDERED)]);
const TEMPLATE =
  '{%- if tools %}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% endif -%}' +
  "{%- for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}{% elif m.role == 'user' %}U{{ m.content }}" +
  "{% elif m.role == 'tool' %}T{{ m.content }}{% else %}S{{ m.content }}{% endif %}{% endfor -%}" +
  '{%- if add_generation_prompt %}>{% endif -%}';

/** The packages, loaded where the episode runs (bundled teams are also compiled into the workflow bundle). */
async function sdk() {
  try {
    const [agents, openai, zod] = await Promise.all([
      import(/* webpackIgnore: true */ '@openai/agents'),
      import(/* webpackIgnore: true */ 'openai'),
      import(/* webpackIgnore: true */ 'zod'),
    ]);
    return { agents, OpenAI: openai.default as typeof OpenAI, z: zod.z };
  } catch (e) {
    throw new Error(`team agents-handoff needs the @openai/agents package: ${(e as Error).message}`);
  }
}

export interface HandoffOptions {
  /** Which OpenAI API the SDK's models call: its default, 'responses', or 'chat-completions'. */
  api?: 'responses' | 'chat-completions';
  /** Run the agents streamed (`Runner.run(..., { stream: true })`). */
  stream?: boolean;
}

// ai-sdk-lookup's settings (entropyCoef 0.15, Dr. GRPO): they keep the solver's answer from collapsing onto
// one or two digits before it tells the secrets apart (docs/performance.md). The solver's lr is 0.04: at 0.03
// one seed in five still had a digit undecided at step 60.
const policy = (lr: number) =>
  tinyLM({ tokenizer, contextWindow: 4, embedDim: 16, hiddenDim: 64, optimizer: { lr, entropyCoef: 0.15, estimator: { normalizeStd: false } } });

export function agentsHandoffTeam(options: HandoffOptions = {}) {
  const { api = 'responses', stream = false } = options;
  if (api !== 'responses' && api !== 'chat-completions')
    throw new TeamDefinitionError('agents-handoff', [
      { path: 'teamOptions.api', message: `must be "responses" or "chat-completions", got ${JSON.stringify(api)}` },
    ]);
  if (typeof stream !== 'boolean')
    throw new TeamDefinitionError('agents-handoff', [{ path: 'teamOptions.stream', message: `must be a boolean, got ${JSON.stringify(stream)}` }]);
  return defineTeam({
    name: 'agents-handoff',
    description: 'OpenAI Agents SDK code trained through the gateway: a triage agent hands off to a solver, which calls a tool.',
    tokenizer,
    chatTemplate: chatTemplate(TEMPLATE, {}, ''),
    run: { steps: 60 }, // the seed table's run length (README)
    // one model per agent: with one shared policy, the triage's handoff (learned first) is
    // pushed up in the solver's contexts too (eval 0.00 on seeds 0 and 1; docs/performance.md)
    models: { triage: policy(0.03), solver: policy(0.04) },
    agents: {
      triage: agent({ model: 'triage', maxTokens: 1, maxTurns: 2 }),
      solver: agent({ model: 'solver', maxTokens: 1, maxTurns: 3 }),
    },
    // 200 tasks, so that every digit is in the training split often (ai-sdk-lookup.ts)
    tasks: generatedTasks<HandoffTask>({ seed: 8, count: 200, evalFraction: 0.2, make: (_random, i) => ({ id: String(i), data: { secret: i % 10 } }) }),
    async episode({ task, agents }) {
      const { agents: sdkAgents, OpenAI: Client, z } = await sdk();
      const Model = api === 'responses' ? sdkAgents.OpenAIResponsesModel : sdkAgents.OpenAIChatCompletionsModel;
      // the model name a client sends is its agent's model (the gateway refuses another)
      const model = (session: { baseURL: string; apiKey: string }, name: string) => new Model(new Client({ ...session, maxRetries: 0 }), name);
      const lookup = sdkAgents.tool({ name: 'lookup', description: 'the hidden digit', parameters: z.object({}), execute: async () => String(task.secret) });
      const solver = new sdkAgents.Agent({
        name: 'solver',
        instructions: 'Answer.',
        tools: [lookup],
        model: model(agents.solver.openai, 'solver'),
        modelSettings: { maxTokens: 1 },
      });
      const triage = new sdkAgents.Agent({
        name: 'triage',
        instructions: 'Route.',
        handoffs: [solver],
        model: model(agents.triage.openai, 'triage'),
        modelSettings: { maxTokens: 1 },
      });
      const runner = new sdkAgents.Runner({ tracingDisabled: true });
      const result = stream
        ? await runner.run(triage, '?', { maxTurns: 4, stream: true }).then(async (streamed) => {
            await streamed.completed;
            return streamed;
          })
        : await runner.run(triage, '?', { maxTurns: 4 });
      const items = result.newItems.map((i) => i.type);
      const lookups = items.filter((t) => t === 'tool_call_output_item').length;
      return { answer: String(result.finalOutput ?? ''), handedOff: items.includes('handoff_output_item'), looked: lookups > 0, lookups };
    },
    rewards: {
      solver: ({ task, outcome }) => ({
        looked: Number(outcome?.looked === true),
        // the answer counts right after one lookup only: a second lookup's context is the first's, so
        // a policy that may look again loops under greedy eval (the eval's misses; docs/performance.md)
        correct: Number(outcome?.lookups === 1 && outcome.answer === String(task.secret)),
      }),
      triage: ({ outcome }) => ({ handedOff: Number(outcome?.handedOff === true) }),
    },
    success: ({ task, outcome }) => outcome?.handedOff === true && outcome.looked === true && outcome.answer === String(task.secret),
  });
}

export default agentsHandoffTeam;
