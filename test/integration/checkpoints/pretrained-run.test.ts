/**
 * A team trained from a pretrained checkpoint against the real stack (Temporal
 * dev server, PostgreSQL, pool worker with its CPU engine): `math` with a
 * transformer policy and `teamOptions.checkpoint` — what `troupe train math
 * --model DIR` sets — on the tiny random qwen2 and qwen3 fixtures. Version 0 is the
 * checkpoint's θ (not a seeded init), the weights move with each step, the last
 * version exports as an HF directory that loads back bit-identical, and a
 * checkpoint that cannot be the model fails the run with the field named. With
 * the directory's own tokenizer.json the team's contexts are its ids, in
 * batched rollouts; durable ones are refused naming `rollout`.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadStepEpisodes } from '../../../activities/store/trajectories';
import { getVersion, listVersions } from '../../../activities/store/versions';
import { exportModelVersion } from '../../../activities/store/model-export';
import { loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { paramLayout } from '../../../engines/families/transformer/spec';
import { decodeWeights, encodeWeights, sha256Hex } from '../../../engines/protocol/version-bytes';
import type { trainingRun } from '../../../workflows';
import { qwenWithTokenizer } from '../../unit/checkpoints/pretrained-dir';
import { sameBits } from '../../unit/engine/helpers';
import { startHarness, type Harness } from '../../../testing/stack';

const HF = path.resolve(__dirname, '../../fixtures/hf');

describe('training from a pretrained checkpoint', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });

  const run = (workflowId: string, dir: string, more: { checkpointTokenizer?: boolean; rollout?: 'durable' } = {}) =>
    h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId,
      args: [
        {
          team: 'math',
          teamOptions: { policy: 'transformer', checkpoint: dir, checkpointTokenizer: more.checkpointTokenizer },
          rollout: more.rollout,
          steps: 2,
          groupsPerStep: 2,
          groupSize: 4,
          evalEvery: 0,
          evalTasks: 2,
          seed: 5,
        },
      ],
    });
  const messages = (e: unknown) => {
    let text = '';
    for (let c = e as Error | undefined; c; c = c.cause as Error | undefined) text += ` ${c.message}`;
    return text;
  };

  it('version 0 is the checkpoint, each step moves the weights, the last version exports and loads back', async () => {
    const dir = path.join(HF, 'qwen2-tiny');
    const summary = await run('pretrained-qwen2', dir);
    assert.equal(summary.status, 'completed');
    assert.deepEqual(summary.versions, { policy: 2 });

    const ckpt = loadHfCheckpoint(dir, { maxSeq: 48 }); // math's transformer bounds its sequences at 48
    const versions = await listVersions(h.db.sql, 'pretrained-qwen2');
    assert.deepEqual(
      versions.map((v) => v.version),
      [0, 1, 2],
    );
    assert.equal(versions[0]!.sha256, sha256Hex(encodeWeights(ckpt.theta)), "version 0 is the checkpoint's θ");
    assert.equal(new Set(versions.map((v) => v.sha256)).size, 3, 'every step changed the weights');
    const v0 = await getVersion(h.db.sql, h.db.checkpoints, 'pretrained-qwen2', 'policy', 0);
    assert.deepEqual(v0!.spec, ckpt.spec);

    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pretrained-')), 'v2');
    await exportModelVersion(h.db.sql, h.db.checkpoints, { runId: 'pretrained-qwen2', model: 'policy', version: 2, out, from: dir });
    const last = await getVersion(h.db.sql, h.db.checkpoints, 'pretrained-qwen2', 'policy', 2);
    const back = loadHfCheckpoint(out);
    // training moves the o_proj/MLP biases qwen2 holds as zeros, so the export is the llama layout with those biases (docs/pretrained-models.md, "Export")
    assert.equal(back.model.modelType, 'llama');
    assert.deepEqual(back.model.biases, { qkv: true, o: true, mlp: true });
    assert.ok(sameBits(back.theta, decodeWeights(last!.weights, ckpt.theta.length)));
  });

  it('qwen3: trains from its checkpoint, the q/k norm gains move, the last version exports as qwen3 and loads back', async () => {
    const dir = path.join(HF, 'qwen3-tiny');
    const summary = await run('pretrained-qwen3', dir);
    assert.equal(summary.status, 'completed');
    const ckpt = loadHfCheckpoint(dir, { maxSeq: 48 });
    const versions = await listVersions(h.db.sql, 'pretrained-qwen3');
    assert.equal(versions[0]!.sha256, sha256Hex(encodeWeights(ckpt.theta)), "version 0 is the checkpoint's θ");
    assert.equal(new Set(versions.map((v) => v.sha256)).size, 3, 'every step changed the weights');
    const last = await getVersion(h.db.sql, h.db.checkpoints, 'pretrained-qwen3', 'policy', 2);
    const theta = decodeWeights(last!.weights, ckpt.theta.length);
    for (const slot of paramLayout(ckpt.spec).slots.filter((s) => /\.ln[qk]_g$/.test(s.name)))
      assert.ok(
        !sameBits(theta.subarray(slot.offset, slot.offset + slot.size), ckpt.theta.subarray(slot.offset, slot.offset + slot.size)),
        `${slot.name} did not move`,
      );
    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pretrained-')), 'v2');
    await exportModelVersion(h.db.sql, h.db.checkpoints, { runId: 'pretrained-qwen3', model: 'policy', version: 2, out, from: dir });
    const back = loadHfCheckpoint(out, { maxSeq: 48 }); // config.json keeps max_position_embeddings 64
    assert.equal(back.model.modelType, 'qwen3');
    assert.deepEqual(back.spec, ckpt.spec);
    assert.ok(sameBits(back.theta, theta));
  });

  it('a checkpoint that cannot be the model fails the run, naming the field', async () => {
    // gpt2-tiny's learned positions reach 32 tokens; math's transformer needs 48
    await assert.rejects(run('pretrained-gpt2', path.join(HF, 'gpt2-tiny')), (e) =>
      /maxSeq 48 is more than the checkpoint's 32 .*n_positions/.test(messages(e)),
    );
    assert.deepEqual(await listVersions(h.db.sql, 'pretrained-gpt2'), []);
  });

  it("with the directory's tokenizer.json: contexts are its ids (batched); durable rollouts are refused naming rollout", async () => {
    const dir = qwenWithTokenizer();
    const summary = await run('pretrained-own-tokenizer', dir, { checkpointTokenizer: true });
    assert.equal(summary.status, 'completed');
    assert.deepEqual(summary.versions, { policy: 2 });
    const episodes = await loadStepEpisodes(h.db.sql, 'pretrained-own-tokenizer', 1, 'train');
    assert.equal(episodes.length, 8);
    // math's character tokenizer starts a context with BOS 1; this tokenizer has none and starts with its end-of-text 0
    for (const e of episodes) for (const t of e.trajectory.turns) assert.equal(t.contextTokens[0], 0);
    await assert.rejects(run('pretrained-own-tokenizer-durable', dir, { checkpointTokenizer: true, rollout: 'durable' }), (e) =>
      /rollout: .*tokenizer\.json of its checkpoint .*use "batched"/.test(messages(e)),
    );
  });
});
