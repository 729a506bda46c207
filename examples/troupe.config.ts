import { defineConfig } from 'troupe';

// Troupe's examples project: the teams a source checkout of Troupe trains (`npx troupe train
// math` from the repository root enters this project). Each is written against the public API
// only ('troupe'), as a project's own teams are.
export default defineConfig({
  teams: {
    math: './teams/math.ts',
    research: './teams/research.ts',
    recall: './teams/recall.ts',
    chain: './teams/chain.ts',
    navigator: './teams/navigator.ts',
    lookout: './teams/lookout.ts',
    'chat-digits': './teams/chat-digits.ts',
    'ai-sdk-lookup': './teams/ai-sdk-lookup.ts',
    'agents-handoff': './teams/agents-handoff.ts',
    'python-lookup': './teams/python-lookup.ts',
    lab: './teams/lab.ts',
  },
  // `npx troupe pipeline warm-start`: sample from a teacher run, fine-tune a fresh model on its
  // successful episodes (SFT), then RL from there (docs/running.md, "Pipelines").
  pipelines: {
    'warm-start': {
      stages: [
        { name: 'teacher', run: { team: 'math', steps: 8 } },
        { name: 'sft', run: { team: 'math', steps: 6, sft: { from: { run: { $run: 'teacher' }, successOnly: true } } } },
        { name: 'rl', run: { team: 'math', steps: 10, init: { policy: { run: { $run: 'sft' }, step: { $step: 'sft' } } } } },
      ],
    },
  },
});
