/**
 * `recall`: a team that needs attention. The reader sees a row of digits and a
 * '?', and must answer the first digit of the row. With 12 digits that digit
 * sits 13 tokens before the answer, outside the 8-token window of a tiny-lm
 * policy (which can only guess: 10% success), so this team trains a small
 * transformer (learned positions let one attention head look it up).
 */
import { agent } from '../agent';
import { transformer, type ModelSpec } from '../model';
import { generatedTasks } from '../tasks';
import { defineTeam } from '../team';
import { charTokenizer } from '../tokenizer';

export interface RecallOptions {
  /** digits in the row (≥ 9 puts the answer outside an 8-token window) */
  length?: number;
}

const tokenizer = charTokenizer('0123456789?');

export function recallTeam(options: RecallOptions = {}) {
  const length = options.length ?? 12;
  // lr 0.002: measured with the engine alone, higher rates collapse onto one digit before the lookup is learned.
  const policy: ModelSpec = transformer({ tokenizer, width: 64, layers: 2, heads: 4, positions: 'rope', maxSeq: 32, optimizer: { lr: 0.002 } });
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
      make: (random, i) => ({ id: `r${i}`, data: { row: Array.from({ length }, () => Math.floor(random() * 10)).join('') } }),
    }),
    async episode({ task, agents }) {
      return (await agents.reader.act(`${task.row}?`)).reply;
    },
    rewards: { reader: ({ task, outcome }) => ({ correct: outcome === task.row[0] ? 1 : 0 }) },
    success: ({ task, outcome }) => outcome === task.row[0],
  });
}
