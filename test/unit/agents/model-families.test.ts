/**
 * Teams declare models of any registered family; a bad model config fails at
 * team load with its field named under `models.<name>`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agent, charTokenizer, defineTeam, generatedTasks, TeamDefinitionError, tinyLM, transformer, type ModelSpec } from '../../../agents';
import { engineSpec } from '../../../agents/model';

const tokenizer = charTokenizer('0123456789');

function team(policy: ModelSpec) {
  return defineTeam({
    name: 'models',
    tokenizer,
    models: { policy },
    agents: { solver: agent({ model: 'policy', maxTokens: 2 }) },
    tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
    episode: async ({ agents }) => (await agents.solver.act('1')).reply,
    rewards: { solver: () => ({ r: 1 }) },
    success: () => true,
  });
}

function problems(policy: ModelSpec): string[] {
  try {
    team(policy);
  } catch (e) {
    assert.ok(e instanceof TeamDefinitionError, String(e));
    return e.problems;
  }
  assert.fail('expected a TeamDefinitionError');
}

test('transformer({...}) and tinyLM({...}) both define a team; the engine spec carries family + config', () => {
  const tf = transformer({ tokenizer, width: 32, layers: 2, heads: 4, maxSeq: 64, optimizer: { lr: 0.001 } });
  assert.equal(team(tf).models.policy!.family, 'transformer');
  assert.deepEqual(engineSpec(tf), { family: 'transformer', vocabSize: tokenizer.size, width: 32, layers: 2, heads: 4, maxSeq: 64 });
  assert.deepEqual(engineSpec(tinyLM({ tokenizer, contextWindow: 4 })), { family: 'tiny-lm', vocabSize: tokenizer.size, contextWindow: 4 });
});

test('bad model configs fail at team load, each field named', () => {
  assert.deepEqual(problems(transformer({ tokenizer, width: 30, heads: 4 })), [
    'models.policy.heads: must divide width (30 is not a multiple of 4), or set headDim',
  ]);
  assert.ok(problems(transformer({ tokenizer, layers: 0 })).some((p) => p.startsWith('models.policy.layers:')));
  assert.ok(
    problems(transformer({ tokenizer, width: 8192, layers: 128, mlpWidth: 65536 })).some((p) =>
      /^models\.policy\.width: \d+ parameters exceed the limit/.test(p),
    ),
  );
  assert.ok(problems(transformer({ tokenizer, ...({ dropout: 0.1 } as object) })).some((p) => p.startsWith('models.policy.dropout: unknown option')));
  assert.ok(problems(transformer({ tokenizer, norm: 'batchnorm' as never })).some((p) => p.startsWith('models.policy.norm: unknown option "batchnorm"')));
  assert.deepEqual(problems(tinyLM({ tokenizer, hiddenDim: 0.5 })), ['models.policy.hiddenDim: must be an integer in [1, 4096], got 0.5']);
});

test('bundled teams: recall trains a transformer; math takes {"policy":"transformer"}', async () => {
  const { loadTeam } = await import('../../../agents/team-registry');
  const recall = loadTeam('recall');
  assert.equal(recall.models.policy!.family, 'transformer');
  assert.equal(recall.tasks.kind, 'generated');
  const task = (recall.tasks as { all(): { data: unknown }[] }).all()[0]!.data as { row: string };
  // bos + the row + '?': the answer digit sits 13 tokens before the reply, outside tiny-lm's 8-token window
  assert.equal(task.row.length, 12);
  assert.equal(loadTeam('math').models.policy!.family, 'tiny-lm');
  assert.equal(loadTeam('math', { policy: 'transformer' }).models.policy!.family, 'transformer');
  assert.deepEqual(
    Object.values(loadTeam('math', { policy: 'transformer', models: 'separate' }).models).map((m) => m.family),
    ['transformer', 'transformer'],
  );
  assert.throws(() => loadTeam('math', { policy: 'gpt' }), /teamOptions\.policy: must be "tiny-lm" or "transformer", got "gpt"/);
});
