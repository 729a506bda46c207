/**
 * A team whose models start from a pretrained checkpoint: the team-level
 * option (`transformer({ checkpoint })`), the run-level one
 * (`teamOptions.checkpoint`, what `troupe train --model DIR` sets), their
 * refusals by field, and version 0 as initModel stores it — the checkpoint's
 * θ as float32 bytes, the same on every call — and the directory's own
 * tokenizer.json (`teamOptions.checkpointTokenizer`): a placeholder until the
 * process registers the loader (as workers do; workflow code never does).
 */
import assert from 'node:assert/strict';
import { ApplicationFailure } from '@temporalio/common';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { pretrainedVersion, readCheckpointTokenizers } from '../../../activities/training/pretrained';
import { transformer } from '../../../agents/model';
import { defineTeam } from '../../../agents/team';
import { loadTeam } from '../../../agents/team-registry';
import { charTokenizer } from '../../../agents/tokenizer';
import { loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { decodeWeights, sha256Hex } from '../../../engines/protocol/version-bytes';
import { sameBits } from '../engine/helpers';
import { qwenWithTokenizer } from './pretrained-dir';

const HF = path.join(__dirname, '../../fixtures/hf');
const QWEN = path.join(HF, 'qwen2-tiny');

describe('teams that start from a checkpoint', () => {
  it('teamOptions.checkpoint moves every model of the team onto the directory, keeping maxSeq', () => {
    const team = loadTeam('math', { policy: 'transformer', models: 'separate', checkpoint: QWEN });
    for (const m of ['solver', 'verifier']) assert.deepEqual(team.models[m]!.config, { checkpoint: QWEN, maxSeq: 48 });
  });

  it('refuses a relative path and a model family that has no checkpoint layout, naming the field', () => {
    assert.throws(
      () => loadTeam('math', { policy: 'transformer', checkpoint: 'fixtures/qwen2' }),
      /models\.policy\.checkpoint: must be an absolute directory path, got "fixtures\/qwen2"/,
    );
    assert.throws(
      () => loadTeam('math', { checkpoint: QWEN }),
      /models\.policy\.checkpoint: only transformer models load a checkpoint; this is a tiny-lm model/,
    );
  });

  it('transformer({ checkpoint }) refuses shape options: config.json has them', () => {
    const tokenizer = charTokenizer('ab');
    const def = (model: ReturnType<typeof transformer>) =>
      defineTeam({
        name: 'pre',
        tokenizer,
        models: { policy: model },
        agents: {
          a: {
            model: 'policy',
            instructions: 'a',
            maxTokens: 2,
            maxTurns: 1,
            maxToolCalls: 0,
            tools: [],
            memory: false,
            sampling: { temperature: 1, topK: 0, topP: 1 },
          },
        } as never,
        tasks: { kind: 'generated', generate: () => ({}) } as never,
        episode: async () => undefined,
        rewards: { a: () => ({}) },
        success: () => true,
      });
    assert.throws(
      () => def(transformer({ tokenizer, checkpoint: QWEN, width: 64, heads: 4 })),
      /models\.policy\.width: comes from the checkpoint's config\.json; leave it out.*models\.policy\.heads/s,
    );
    assert.deepEqual(def(transformer({ tokenizer, checkpoint: QWEN })).models.policy!.config, { checkpoint: QWEN });
  });
});

describe("the checkpoint's own tokenizer", () => {
  const dir = qwenWithTokenizer();
  const load = () => loadTeam('math', { policy: 'transformer', checkpoint: dir, checkpointTokenizer: true });

  it('is a placeholder where files cannot be read (workflow code): the team loads, encoding refuses naming the rollout mode', () => {
    const team = load();
    assert.equal(team.tokenizer.kind, 'placeholder');
    assert.throws(() => team.tokenizer.encode('1+1='), /tokenizer of .* is read in activities only: train this team with rollout "batched"/);
  });

  it("is the directory's tokenizer.json in a worker, for the team and every model", () => {
    readCheckpointTokenizers();
    const team = load();
    assert.equal(team.tokenizer.kind, 'hf');
    assert.equal(team.models.policy!.tokenizer, team.tokenizer);
    assert.equal(team.tokenizer.size, 22);
    assert.equal(team.tokenizer.bosId, 0, 'no BOS of its own: the end-of-text token');
    assert.deepEqual(team.tokenizer.encode('21=?10+1='), [5, 19, 15, 21, 13, 19]);
    assert.deepEqual(team.tokenizer.idsContaining('='), [14, 19], "math's trigger also ends inside the merged token 1=");
    assert.equal(pretrainedVersion(team.models.policy!, 'policy').spec.vocabSize, 48);
    assert.equal(team.chatTemplate, undefined, 'this directory has no chat template');
  });

  it("frames the team's turns with the directory's chat template, ending assistant turns with its EOS", () => {
    readCheckpointTokenizers();
    const chatDir = qwenWithTokenizer();
    const template = '{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>{% endif %}';
    fs.writeFileSync(path.join(chatDir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<|im_end|>', chat_template: template }));
    const team = loadTeam('math', { policy: 'transformer', checkpoint: chatDir, checkpointTokenizer: true });
    assert.equal(team.tokenizer.eosId, 2);
    // <|im_start|> 1 + 1 <|im_end|> <|im_start|>
    assert.deepEqual(team.tokenizer.encode(team.chatTemplate!.open([{ role: 'user', content: '1+1' }])), [1, 4, 20, 2, 1]);
  });
});

describe('version 0 of a checkpoint model', () => {
  const model = (dir: string) => loadTeam('math', { policy: 'transformer', checkpoint: dir }).models.policy!;

  for (const name of ['qwen2-tiny', 'llama-tiny']) {
    it(`${name}: the checkpoint's θ as float32 bytes and its spec (rope bound lowered to the team's maxSeq), the same bytes on a retry`, () => {
      const dir = path.join(HF, name);
      const v = pretrainedVersion(model(dir), 'policy');
      const ckpt = loadHfCheckpoint(dir, { maxSeq: 48 });
      assert.deepEqual(v.spec, ckpt.spec);
      assert.equal(v.spec.maxSeq, 48);
      assert.ok(sameBits(decodeWeights(v.weights, ckpt.theta.length), ckpt.theta));
      assert.equal(v.sha256, sha256Hex(v.weights));
      assert.equal(v.optimizerState.length, 0, 'a fresh optimizer');
      assert.equal(pretrainedVersion(model(dir), 'policy').sha256, v.sha256);
    });
  }

  it('refuses what cannot be this model, naming the file and field', () => {
    // gpt2-tiny has learned positions for 32 tokens; math's transformer needs 48
    assert.throws(
      () => pretrainedVersion(model(path.join(HF, 'gpt2-tiny')), 'policy'),
      /model policy: maxSeq 48 is more than the checkpoint's 32 \(.*gpt2-tiny\/config\.json n_positions/,
    );
    assert.throws(
      () => pretrainedVersion(model(path.join(HF, 'missing')), 'policy'),
      /model policy: checkpoint .*missing: .*missing\/config\.json: cannot read \(ENOENT\)/,
    );
    const big = { ...model(QWEN), tokenizer: charTokenizer([...Array(60)].map((_, i) => String.fromCharCode(65 + i)).join('')) };
    assert.throws(() => pretrainedVersion(big, 'policy'), /qwen2-tiny\/config\.json: vocab_size 48 is smaller than the team's tokenizer \(63 ids\)/);
  });

  it('a truncated model.safetensors fails at once, not retried, naming the file and the tensor field', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-truncated-'));
    for (const f of fs.readdirSync(QWEN)) fs.copyFileSync(path.join(QWEN, f), path.join(dir, f));
    const file = path.join(dir, 'model.safetensors');
    fs.truncateSync(file, fs.statSync(file).size - 100);
    assert.throws(
      () => pretrainedVersion(model(dir), 'policy'),
      (e: unknown) =>
        e instanceof ApplicationFailure &&
        e.nonRetryable &&
        e.type === 'BadCheckpoint' &&
        e.message.startsWith(`model policy: checkpoint ${dir}: ${file}: tensor "`) &&
        /: data_offsets \[\d+, \d+\] reach past the file's \d+ data bytes \(the file is truncated\?\)$/.test(e.message),
    );
    fs.truncateSync(file, 12); // inside the header
    assert.throws(
      () => pretrainedVersion(model(dir), 'policy'),
      (e: unknown) => e instanceof ApplicationFailure && e.nonRetryable && e.message.includes(`${file}: header length`),
    );
  });
});
