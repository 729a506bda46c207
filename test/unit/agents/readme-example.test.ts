/**
 * The "Writing a team" example in the README must stay true: it is extracted,
 * loaded as a team module, and one episode is run with a scripted policy.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { it } from 'node:test';
import { runEpisode } from '../../../agents/episode';
import { scoreEpisode } from '../../../agents/rewards';
import type { AnyTeam } from '../../../agents/team';
import { executeTool } from '../../../activities/tools';

it('the README team example defines a team whose episode runs and is scored', async () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', '..', '..', 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Writing a team'));
  const code = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
  const file = path.join(__dirname, '..', '..', '..', 'examples', 'teams', `.readme-example-${process.pid}.ts`); // it imports 'troupe'
  fs.writeFileSync(file, code);
  try {
    const { adder } = require(file) as { adder: AnyTeam };
    assert.equal(adder.name, 'adder');
    assert.deepEqual(adder.roles, ['solver', 'checker']);
    const tok = adder.tokenizer;
    const replies = [[...tok.encode('=')], [tok.eosId], [...tok.encode('Y'), tok.eosId]];
    const traj = await runEpisode(
      adder,
      { episodeId: 'e', seed: 1, task: { a: 3, b: 4 }, versions: { policy: 0 } },
      {
        generate: async (call) => {
          const tokens = replies.shift()!;
          return { tokens, logprobs: tokens.map(() => -1), stopReason: call.stopTokens.includes(tokens[tokens.length - 1]!) ? 'stop_token' : 'max_tokens' };
        },
        callTool: (req) => executeTool(adder, req),
        now: () => 0,
      },
    );
    assert.deepEqual(traj.outcome, { answer: 7, verdict: 'Y' });
    assert.deepEqual(
      scoreEpisode(adder, { a: 3, b: 4 }, traj).rewards.map((r) => r.components),
      [{ correct: 1 }, { judged: 1 }],
    );
  } finally {
    fs.rmSync(file, { force: true });
  }
});
