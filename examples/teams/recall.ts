/**
 * `recall`: a team that needs attention. The reader sees a row of 12 digits
 * 0-5 and a '?', and must answer the first digit of the row. That digit sits
 * 13 tokens before the answer, outside the 8-token window of a tiny-lm policy
 * (which can only guess: 1 in 6), so this team trains a small transformer
 * whose attention looks it up.
 */
import { agent, transformer, type ModelSpec, generatedTasks, defineTeam, charTokenizer } from 'troupe';

export interface RecallOptions {
  /** digits in the row (≥ 9 puts the answer outside an 8-token window) */
  length?: number;
}

/** Six digits, not ten: each guess is right more often, so RL finds the lookup within the default 40 steps. */
const DIGITS = '012345';
const tokenizer = charTokenizer(`${DIGITS}?`);

export function recallTeam(options: RecallOptions = {}) {
  const length = options.length ?? 12;
  // Measured in-process over seeds (bench/seeds.ts): one layer of width 128 with learned positions
  // (an absolute lookup) learns it in 20-40 steps; 2 layers of width 64 with RoPE, or width 32-64
  // with ten digits, were still below 0.9 at step 40. entropyCoef 0.01 keeps a seed from collapsing
  // onto one answer before the lookup is learned (seen without it at lr 0.002).
  const policy: ModelSpec = transformer({
    tokenizer,
    width: 128,
    layers: 1,
    heads: 2,
    positions: 'learned',
    maxSeq: 32,
    optimizer: { lr: 0.002, entropyCoef: 0.01 },
  });
  return defineTeam({
    name: 'recall',
    description: 'Answer the first digit of a row of digits: a lookup 13 tokens back, which needs attention.',
    tokenizer,
    models: { policy },
    agents: { reader: agent({ model: 'policy', maxTokens: 1 }) },
    tasks: generatedTasks<{ row: string }>({
      seed: 11,
      count: 4000,
      evalFraction: 0.05,
      make: (random, i) => ({ id: `r${i}`, data: { row: Array.from({ length }, () => DIGITS[Math.floor(random() * DIGITS.length)]).join('') } }),
    }),
    async episode({ task, agents }) {
      return (await agents.reader.act(`${task.row}?`)).reply;
    },
    rewards: { reader: ({ task, outcome }) => ({ correct: outcome === task.row[0] ? 1 : 0 }) },
    success: ({ task, outcome }) => outcome === task.row[0],
  });
}

export default recallTeam;
