/**
 * The PyTorch engine computes any causal LM that the pinned transformers has, with transformers' own modules
 * (engines/pytorch/hf.py): checkpoints written here by transformers itself (from_config + save_pretrained,
 * test/helpers/hf_checkpoints.py) in seven architectures — llama, qwen2, qwen3, mistral, gemma2 (sliding window,
 * attention and final logit soft-caps), phi3 (fused qkv and gate/up), olmo2 — and Qwen3's real 151,669-token
 * vocabulary with its tokenizer.json. For each, through the engine as a process:
 *
 * - InitModel {checkpoint: dir} gives the spec {hf: config.json, maxSeq} (llama, qwen2 and qwen3 still load into
 *   the engine's own layout, the built-in engine's bytes, and are checked against transformers here too; a llama
 *   with YaRN rope scaling and a GELU MLP, which that layout cannot compute, goes to transformers), and
 *   LoadVersion of that spec (no directory) with the exported bytes gives the same sha256;
 * - Score's log-probs equal transformers' own forward (eager attention, float32) within 1e-4, and greedy Generate's
 *   tokens are transformers' argmax continuation (the reference: test/helpers/hf_reference.py);
 * - Generate's log-probs are Score's bit for bit (the same row steps);
 * - an Update raises the log-probs of positively-advantaged tokens and lowers the others';
 * - a bad hf spec is INVALID_REQUEST naming the field.
 *
 * Skips where the engine's Python environment cannot be made (stack/python-environment.ts says why).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';

const engine = pytorchEngine();
const skip = 'missing' in engine ? engine.missing : false;
const PYTHON = 'missing' in engine ? '' : engine.command[0]!;
const HELPERS = path.resolve(__dirname, '../../helpers');
const ARCHS = ['llama', 'qwen2', 'qwen3', 'mistral', 'gemma2', 'phi3', 'olmo2', 'llama-yarn', 'qwen3-vocab'];
const TOL = 1e-4;
const PROMPTS = [
  [1, 5, 9, 13, 2, 7, 30, 31, 40, 41, 3],
  [40, 3, 3, 0, 47, 22],
];
const NEW_TOKENS = 6;

type Reference = Record<string, { score: number[][]; greedy: number[][] }>;

let proc: SpawnedEngine | undefined;
let client: EngineClient;
let tmp: string;
let dirs: Record<string, string>;
let reference: Reference;

function python(args: string[]): string {
  const r = spawnSync(PYTHON, args, { encoding: 'utf8', timeout: 600_000, maxBuffer: 64 * 2 ** 20 });
  assert.equal(r.status, 0, `${args[0]} failed: ${r.stderr}`);
  return r.stdout;
}

before(async () => {
  if ('missing' in engine) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pytorch-hf-'));
  dirs = JSON.parse(python([path.join(HELPERS, 'hf_checkpoints.py'), tmp, ...ARCHS])) as Record<string, string>;
  reference = JSON.parse(python([path.join(HELPERS, 'hf_reference.py'), JSON.stringify({ dirs, prompts: PROMPTS, newTokens: NEW_TOKENS })])) as Reference;
  proc = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: engine.command, startTimeoutMs: 180_000 });
  client = await EngineClient.connect(proc.listening.address);
});

after(() => {
  client?.close();
  proc?.child.kill('SIGTERM');
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

describe('the PyTorch engine runs transformers models', { skip }, () => {
  it('seven architectures and a real vocabulary: Score and greedy Generate equal transformers; bytes round-trip', async () => {
    for (const arch of ARCHS) {
      const key = `hf-${arch}`;
      const info = await client.initModel({ modelKey: key, spec: { family: 'transformer', vocabSize: 0, checkpoint: dirs[arch]! }, seed: 0 });
      const spec = info.spec as { family: string; vocabSize: number; hf?: { model_type?: string }; maxSeq?: number };
      // the model types of the engine's own layouts load as family specs (the built-in engine's bytes); the rest as hf
      const own = ['llama', 'qwen2', 'qwen3', 'qwen3-vocab'].includes(arch);
      assert.equal(spec.hf?.model_type, own ? undefined : arch.replace('-yarn', ''), `${arch}: the spec carries config.json`);
      if (arch === 'qwen3-vocab') assert.equal(spec.vocabSize, 151_669);

      const scored = await client.score({
        modelKey: key,
        version: 0,
        sequences: PROMPTS.map((p) => ({ context: p.slice(0, 1), tokens: p.slice(1) })),
      });
      scored.sequences.forEach((s, i) => {
        const want = reference[arch]!.score[i]!;
        const gap = Math.max(...s.logprobs.map((x, t) => Math.abs(x - want[t]!)));
        assert.ok(gap < TOL, `${arch}: prompt ${i} Score differs from transformers by ${gap}`);
      });

      const gen = await client.generate({
        modelKey: key,
        version: 0,
        sequences: PROMPTS.map((p, i) => ({ context: p, seed: String(i) })),
        sampling: { temperature: 0, maxTokens: NEW_TOKENS },
      });
      gen.sequences.forEach((s, i) => assert.deepEqual(s.tokens, reference[arch]!.greedy[i], `${arch}: prompt ${i} greedy tokens`));
      const sampled = await client.generate({
        modelKey: key,
        version: 0,
        sequences: PROMPTS.map((p, i) => ({ context: p, seed: String(100 + i) })),
        sampling: { temperature: 1, maxTokens: NEW_TOKENS },
      });
      const rescored = await client.score({
        modelKey: key,
        version: 0,
        sequences: sampled.sequences.map((s, i) => ({ context: PROMPTS[i]!, tokens: s.tokens })),
      });
      sampled.sequences.forEach((s, i) => assert.deepEqual(s.logprobs, rescored.sequences[i]!.logprobs, `${arch}: Generate's log-probs are Score's`));

      // the version's bytes load back under the resolved spec alone (no directory)
      const ex = await client.exportVersion({ modelKey: key, version: 0 });
      const back = await client.loadVersion({ modelKey: `${key}-back`, version: 0, spec: info.spec, weights: ex.weights, optimizerState: ex.optimizerState });
      assert.equal(back.weightsSha256, info.weightsSha256, `${arch}: LoadVersion of the exported bytes`);
    }
  });

  it('an Update moves log-probs the way the advantages point', async () => {
    for (const arch of ['gemma2', 'phi3']) {
      const key = `hf-${arch}`;
      const V = 512;
      const samples = [0, 1].map((i) => {
        const toks = [3 + i, 17, 5 + 2 * i, 40, 9];
        return {
          context: [1, 7 + i, 20],
          tokens: toks,
          lossMask: toks.map(() => 1),
          advantages: toks.map(() => (i === 0 ? 1 : -1)),
          oldLogprobs: toks.map(() => -Math.log(V)),
          lossWeights: toks.map(() => 1 / 10),
        };
      });
      const before = await client.score({ modelKey: key, version: 0, sequences: samples.map((s) => ({ context: s.context, tokens: s.tokens })) });
      const res = await client.update({ modelKey: key, baseVersion: 0, requestId: `${arch}-u1`, samples, settings: { lr: 0.01, innerSteps: 2 } });
      assert.equal(Number(res.info?.version), 1);
      const after_ = await client.score({ modelKey: key, version: 1, sequences: samples.map((s) => ({ context: s.context, tokens: s.tokens })) });
      const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
      const up = sum(after_.sequences[0]!.logprobs) - sum(before.sequences[0]!.logprobs);
      const down = sum(after_.sequences[1]!.logprobs) - sum(before.sequences[1]!.logprobs);
      assert.ok(up > 0, `${arch}: the positively-advantaged sample's log-prob moved by ${up}`);
      assert.ok(down < 0, `${arch}: the negatively-advantaged sample's log-prob moved by ${down}`);
    }
  });

  it('bad transformers specs are INVALID_REQUEST naming the field', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ hf: { model_type: 'no-such-model' } }, /spec\.hf: model_type: "no-such-model" is not a model type/],
      [{ hf: { model_type: 'vit' } }, /spec\.hf: model_type: "vit" has no causal LM/],
      [{ hf: 'llama' }, /spec\.hf: must be a config\.json object/],
      [
        { hf: { model_type: 'llama', vocab_size: 64, hidden_size: 32, num_attention_heads: 4, num_hidden_layers: 1, intermediate_size: 64 }, width: 8 },
        /spec\.width: comes from the checkpoint's config/,
      ],
      [
        {
          hf: {
            model_type: 'llama',
            vocab_size: 64,
            hidden_size: 32,
            num_attention_heads: 4,
            num_hidden_layers: 1,
            intermediate_size: 64,
            max_position_embeddings: 64,
          },
          maxSeq: 65,
        },
        /spec\.maxSeq: must be an integer in \[1, 64\]/,
      ],
    ];
    for (const [config, message] of cases) {
      await assert.rejects(
        client.loadVersion({
          modelKey: 'bad-hf',
          version: 0,
          spec: { family: 'transformer', vocabSize: 0, ...config },
          weights: new Uint8Array(0),
          optimizerState: new Uint8Array(0),
        }),
        (e: { reason: string; message: string }) => {
          assert.equal(e.reason, 'INVALID_REQUEST', e.message);
          assert.match(e.message, message);
          return true;
        },
      );
    }
  });
});
