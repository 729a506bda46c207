// The files `troupe init` writes (relative path → text given the project's folder name). Only the
// public API ('troupe'): the example is what a user's team looks like.
export const SCAFFOLD: Record<string, (name: string) => string> = {
  'troupe.config.ts': () => `import { defineConfig } from 'troupe';

// Teams by the name run configs use (\`npx troupe train count\`) -> the module exporting it.
// Modules under \`estimators\` are loaded by every Troupe process at start (defineEstimator).
// \`stack\` sets defaults for the stack by environment variable, e.g. { TROUPE_DASHBOARD_PORT: 8300 }.
export default defineConfig({
  teams: {
    count: './teams/count.ts',
  },
  estimators: [],
  stack: {},
});
`,
  'teams/count.ts': () => `/**
 * \`count\`: one agent, shown a digit, answers the next one (9 -> 0). Small enough to
 * learn from scratch on a CPU; copy it to start your own team (docs: Troupe's
 * docs/writing-teams.md). Episode code runs in Temporal's workflow sandbox: no I/O,
 * no Math.random or Date.now of its own.
 */
import { agent, charTokenizer, defineTeam, generatedTasks, tinyLM } from 'troupe';

const tokenizer = charTokenizer('0123456789');

export default defineTeam({
  name: 'count',
  description: 'Answer the digit after the one shown.',
  tokenizer,
  models: { policy: tinyLM({ tokenizer, contextWindow: 4, embedDim: 16, hiddenDim: 32, optimizer: { lr: 0.02 } }) },
  agents: { counter: agent({ model: 'policy', maxTokens: 1 }) },
  tasks: generatedTasks<{ digit: number }>({
    seed: 1,
    count: 10,
    evalFraction: 0.2,
    make: (_random, i) => ({ id: String(i), data: { digit: i } }),
  }),
  async episode({ task, agents }) {
    const turn = await agents.counter.act(String(task.digit));
    return { answer: turn.reply };
  },
  rewards: {
    counter: ({ task, outcome }) => ({ correct: outcome?.answer === String((task.digit + 1) % 10) ? 1 : 0 }),
  },
  success: ({ task, outcome }) => outcome?.answer === String((task.digit + 1) % 10),
});
`,
  'tsconfig.json': () => `{
  "compilerOptions": {
    "target": "ES2022",
    "module": "preserve",
    "moduleResolution": "bundler",
    "lib": ["ES2022"],
    "strict": true,
    "skipLibCheck": true,
    "noEmit": true
  },
  "include": ["troupe.config.ts", "teams", "estimators"]
}
`,
  'package.json': (name) =>
    `${JSON.stringify({ name: name.toLowerCase().replace(/[^a-z0-9-]/g, '-') || 'troupe-project', private: true, description: 'Teams trained with Troupe' }, null, 2)}\n`,
};
