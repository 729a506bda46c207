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
 * - a bad hf spec is INVALID_REQUEST naming the field;
 * - LoRA over such a model (mistral, gemma2, phi3: targets named as PEFT names the modules, phi3's fused qkv_proj and
 *   gate_up_proj among them): version 0 scores as the base bit for bit; with B drawn non-zero, Score equals PEFT's
 *   own forward (PeftModel.from_pretrained of the adapter exported by exportHfPeftAdapter, unmerged and merged;
 *   test/helpers/peft_logprobs.py) within 1e-4; the export imports back bit for bit, and an adapter PEFT itself wrote
 *   (test/helpers/peft_write.py) imports as version 0 and scores as PEFT's forward; two adapters' Generate calls
 *   share a device run (Stats.mixed_adapter_runs) and give each sequence the bits it gets alone, their log-probs
 *   Score's bit for bit; an Update changes the adapter only (the base's bytes stay), in the advantages' direction.
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
import { exportHfPeftAdapter, importHfPeftAdapter, type HfLora, type HfTarget } from '../../../engines/checkpoints/peft';
import { decodeWeights, encodeWeights } from '../../../engines/protocol/version-bytes';

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
const ENGINE_DIR = path.resolve(__dirname, '../../../engines/pytorch');
// LoRA targets by PEFT's module names: every projection, a few, and phi3's fused ones
const LORA_ARCHS: Record<string, string[]> = {
  mistral: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
  gemma2: ['q_proj', 'v_proj', 'down_proj'],
  phi3: ['qkv_proj', 'o_proj', 'gate_up_proj', 'down_proj'],
};

type Reference = Record<string, { score: number[][]; greedy: number[][] }>;

/** Two Update samples over the checkpoints' 512-token vocabulary: the first advantaged, the second not. */
function advantageSamples() {
  return [0, 1].map((i) => {
    const toks = [3 + i, 17, 5 + 2 * i, 40, 9];
    return {
      context: [1, 7 + i, 20],
      tokens: toks,
      lossMask: toks.map(() => 1),
      advantages: toks.map(() => (i === 0 ? 1 : -1)),
      oldLogprobs: toks.map(() => -Math.log(512)),
      lossWeights: toks.map(() => 1 / 10),
    };
  });
}

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
      const samples = advantageSamples();
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

  it('LoRA over transformers models: PEFT both ways, Generate = Score, mixed adapters, adapter-only Updates', async () => {
    const maxGap = (a: number[], b: number[]) => Math.max(...a.map((x, i) => Math.abs(x - b[i]!)));
    const scoreOf = async (modelKey: string, version: number) =>
      (await client.score({ modelKey, version, sequences: PROMPTS.map((p) => ({ context: p.slice(0, 1), tokens: p.slice(1) })) })).sequences.map(
        (s) => s.logprobs,
      );
    // PEFT's log-probs of PROMPTS' tokens after the first, from its full log-softmax rows
    const peft = (dir: string, adapter: string) => {
      const rows = JSON.parse(python([path.join(HELPERS, 'peft_logprobs.py'), JSON.stringify({ base: dir, adapter, prompts: PROMPTS })])) as Record<
        'adapter' | 'merged',
        number[][][]
      >;
      const pick = (r: number[][][]) => PROMPTS.map((p, i) => p.slice(1).map((t, k) => r[i]![k]![t]!));
      return { adapter: pick(rows.adapter), merged: pick(rows.merged) };
    };
    await assert.rejects(
      client.initModel({
        modelKey: 'lora-bad',
        spec: { family: 'transformer', vocabSize: 0, checkpoint: dirs.mistral!, lora: { rank: 4, alpha: 8, targets: ['q', 'nope'] } },
        seed: 0,
      }),
      (e: { reason: string; message: string }) =>
        e.reason === 'INVALID_REQUEST' &&
        /spec\.lora\.targets: "nope" is not a linear module of this model \(it has: q, k, v, o, g, u, d, q_proj, k_proj/.test(e.message),
    );
    for (const [arch, targets] of Object.entries(LORA_ARCHS)) {
      const dir = dirs[arch]!;
      const base = await client.initModel({ modelKey: `hf-${arch}`, spec: { family: 'transformer', vocabSize: 0, checkpoint: dir }, seed: 0 });
      const init = (k: string, seed: number) =>
        client.initModel({
          modelKey: `lora-${arch}-${k}`,
          spec: { family: 'transformer', vocabSize: 0, checkpoint: dir, lora: { rank: 4, alpha: 8, targets } },
          seed,
        });
      const a = await init('a', 1);
      const spec = a.spec as { hf?: object; lora?: HfLora & { baseCheckpoint?: string } };
      assert.ok(spec.hf, `${arch}: an adapter over the transformers spec`);
      assert.equal(spec.lora?.baseCheckpoint, dir);
      const layout = JSON.parse(python([path.join(ENGINE_DIR, 'hf.py'), 'targets', JSON.stringify(a.spec)])) as HfTarget[];
      assert.deepEqual([...new Set(layout.map((t) => t[0].split('.').pop()))].sort(), [...targets].sort(), `${arch}: every target's modules`);
      const P = layout.reduce((n, [, i, o]) => n + 4 * (i + o), 0);
      assert.equal(Number(a.paramCount), P, `${arch}: the version holds the adapter alone`);
      assert.deepEqual(await scoreOf(a.modelKey, 0), await scoreOf(base.modelKey, 0), `${arch}: version 0 (B = 0) scores as the base bit for bit`);

      // B drawn non-zero, so that a wrong module, orientation or scale shows
      const drawn = (phi: Float32Array, k: number) => {
        let at = 0;
        for (const [, i, o] of layout) {
          at += 4 * i;
          for (let j = at; j < at + 4 * o; j++) phi[j] = 0.3 * Math.sin(1.7 * j + 0.5 + k);
          at += 4 * o;
        }
        return phi;
      };
      const v0 = await client.exportVersion({ modelKey: a.modelKey, version: 0 });
      const phiA = drawn(decodeWeights(v0.weights, P), 1);
      await client.loadVersion({ modelKey: a.modelKey, version: 1, spec: a.spec, weights: encodeWeights(phiA), optimizerState: v0.optimizerState });
      const b = await init('b', 2);
      const phiB = drawn(decodeWeights((await client.exportVersion({ modelKey: b.modelKey, version: 0 })).weights, P), 2);
      await client.loadVersion({ modelKey: b.modelKey, version: 1, spec: b.spec, weights: encodeWeights(phiB), optimizerState: v0.optimizerState });

      // export: PEFT loads it onto the transformers model and computes what the engine does; it imports back
      const out = path.join(tmp, `adapter-${arch}`);
      exportHfPeftAdapter(out, spec.lora!, layout, phiA, dir);
      const ours = await scoreOf(a.modelKey, 1);
      const theirs = peft(dir, out);
      const baseLp = await scoreOf(base.modelKey, 0);
      ours.forEach((lp, i) => {
        assert.ok(maxGap(lp, theirs.adapter[i]!) < TOL, `${arch}: prompt ${i} differs from PEFT's forward by ${maxGap(lp, theirs.adapter[i]!)}`);
        assert.ok(maxGap(lp, theirs.merged[i]!) < TOL, `${arch}: prompt ${i} differs from PEFT's merged model by ${maxGap(lp, theirs.merged[i]!)}`);
        assert.ok(maxGap(lp, baseLp[i]!) > 1e-3, `${arch}: the adapter changes prompt ${i}'s log-probs`);
      });
      console.log(
        `${arch} LoRA (${P} adapter values): max |Δ log-prob| vs PEFT ${Math.max(...ours.map((lp, i) => maxGap(lp, theirs.adapter[i]!))).toExponential(2)} unmerged, ` +
          `${Math.max(...ours.map((lp, i) => maxGap(lp, theirs.merged[i]!))).toExponential(2)} merged; vs the base ${Math.max(...ours.map((lp, i) => maxGap(lp, baseLp[i]!))).toExponential(2)}`,
      );
      assert.deepEqual(importHfPeftAdapter(out, spec.lora!, layout), phiA, `${arch}: the exported adapter imports back`);
      // an adapter PEFT itself wrote, as a model's version 0
      const written = path.join(tmp, `peft-${arch}`);
      python([path.join(HELPERS, 'peft_write.py'), JSON.stringify({ base: dir, out: written, r: 4, alpha: 8, targets, fanInFanOut: false, seed: 7 })]);
      const imported = importHfPeftAdapter(written, spec.lora!, layout);
      await client.loadVersion({
        modelKey: `lora-${arch}-peft`,
        version: 0,
        spec: a.spec,
        weights: encodeWeights(imported),
        optimizerState: v0.optimizerState,
      });
      const want = peft(dir, written).adapter;
      (await scoreOf(`lora-${arch}-peft`, 0)).forEach((lp, i) =>
        assert.ok(maxGap(lp, want[i]!) < TOL, `${arch}: the imported adapter's prompt ${i} differs from PEFT's by ${maxGap(lp, want[i]!)}`),
      );

      // two adapters in one Generate run: each sequence gets the bits it gets alone, its log-probs Score's
      const call = (m: string, k: number) => ({
        modelKey: m,
        version: 1,
        sampling: { temperature: 1, maxTokens: NEW_TOKENS },
        sequences: PROMPTS.map((p, i) => ({ context: p.slice(0, 3 + k), seed: String(10 * k + i) })),
      });
      const alone = [await client.generate(call(a.modelKey, 0)), await client.generate(call(b.modelKey, 1))];
      // a long call on the base first, on the device before the two adapter calls arrive, so that they queue behind it
      // and then share a run (the engine has no batching window; up to 3 tries, should the blocker end first)
      let mixed = false;
      let together: Awaited<ReturnType<typeof client.generate>>[] = [];
      for (let attempt = 0; attempt < 3 && !mixed; attempt++) {
        const before = await client.stats();
        let done = false;
        const blocker = client
          .generate({
            modelKey: base.modelKey,
            version: 0,
            sampling: { temperature: 1, maxTokens: 100 },
            sequences: Array.from({ length: 48 }, (_, i) => ({ context: [1 + i], seed: String(i) })),
          })
          .finally(() => (done = true));
        while (!done && (await client.stats()).queueDepth < 1) await new Promise((r) => setTimeout(r, 5));
        together = await Promise.all([client.generate(call(a.modelKey, 0)), client.generate(call(b.modelKey, 1))]);
        await blocker;
        mixed = (await client.stats()).mixedAdapterRuns > before.mixedAdapterRuns;
      }
      assert.ok(mixed, `${arch}: the two adapters never shared a run in 3 tries`);
      for (const [k, m] of [a.modelKey, b.modelKey].entries()) {
        together[k]!.sequences.forEach((s, i) => {
          assert.deepEqual(s.tokens, alone[k]!.sequences[i]!.tokens, `${arch}: ${m} sequence ${i}: tokens beside another adapter`);
          assert.deepEqual(s.logprobs, alone[k]!.sequences[i]!.logprobs, `${arch}: ${m} sequence ${i}: log-probs beside another adapter`);
        });
        const rescored = await client.score({
          modelKey: m,
          version: 1,
          sequences: alone[k]!.sequences.map((s, i) => ({ context: call(m, k).sequences[i]!.context, tokens: s.tokens })),
        });
        rescored.sequences.forEach((s, i) => assert.deepEqual(s.logprobs, alone[k]!.sequences[i]!.logprobs, `${arch}: ${m} sequence ${i}: Generate = Score`));
      }

      // an Update trains the adapter only
      const samples = advantageSamples();
      const seqs = samples.map((s) => ({ context: s.context, tokens: s.tokens }));
      const pre = await client.score({ modelKey: a.modelKey, version: 1, sequences: seqs });
      const otherBefore = await scoreOf(b.modelKey, 1);
      const res = await client.update({ modelKey: a.modelKey, baseVersion: 1, requestId: `lora-${arch}-u`, samples, settings: { lr: 0.01, innerSteps: 2 } });
      assert.equal(Number(res.info?.version), 2);
      assert.equal(Number(res.info?.paramCount), P, `${arch}: the updated version holds the adapter alone`);
      const v2 = decodeWeights((await client.exportVersion({ modelKey: a.modelKey, version: 2 })).weights, P);
      assert.ok(
        v2.some((x, i) => x !== phiA[i]),
        `${arch}: the Update changed the adapter`,
      );
      const baseAfter = await client.exportVersion({ modelKey: base.modelKey, version: 0 });
      assert.equal(baseAfter.info?.weightsSha256, base.weightsSha256, `${arch}: the base's bytes are untouched`);
      assert.deepEqual(await scoreOf(b.modelKey, 1), otherBefore, `${arch}: the other adapter scores as before`);
      const post = await client.score({ modelKey: a.modelKey, version: 2, sequences: seqs });
      const sum = (xs: number[]) => xs.reduce((x, y) => x + y, 0);
      assert.ok(sum(post.sequences[0]!.logprobs) > sum(pre.sequences[0]!.logprobs), `${arch}: the positively-advantaged sample's log-prob rose`);
      assert.ok(sum(post.sequences[1]!.logprobs) < sum(pre.sequences[1]!.logprobs), `${arch}: the negatively-advantaged sample's log-prob fell`);
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
    const llama = { model_type: 'llama', vocab_size: 64, hidden_size: 32, num_attention_heads: 4, num_hidden_layers: 1, intermediate_size: 64 };
    const lora = { rank: 4, alpha: 8, targets: ['q_proj'], baseCheckpoint: '/nowhere' };
    cases.push(
      [{ hf: llama, lora: { ...lora, rank: 0 } }, /spec\.lora\.rank: must be ≥ 1/],
      [{ hf: llama, lora: { ...lora, alpha: -1 } }, /spec\.lora\.alpha: must be > 0/],
      [{ hf: llama, lora: { ...lora, targets: ['q_proj', 'lm_head'] } }, /spec\.lora\.targets: "lm_head" is not a linear module of this model/],
      [{ hf: llama, lora: { ...lora, targets: [] } }, /spec\.lora\.targets: name at least one/],
      [{ hf: llama, lora: { ...lora, baseCheckpoint: undefined } }, /spec\.lora\.baseCheckpoint: required over a transformers model/],
      [
        { hf: llama, lora: { ...lora, baseCheckpoint: undefined, baseSeed: 1 } },
        /spec\.lora\.baseSeed: a transformers model \(spec\.hf\) has no seeded version 0/,
      ],
      [{ hf: llama, lora: { ...lora, dropout: 0.1 } }, /spec\.lora\.dropout: unknown option/],
      // the family's projection names name the Llama layout's modules: once each
      [{ hf: llama, lora: { ...lora, targets: ['q', 'q_proj'] } }, /spec\.lora\.targets: "q" and "q_proj" name the same module/],
    );
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
