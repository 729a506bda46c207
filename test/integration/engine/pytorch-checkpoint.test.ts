/**
 * The PyTorch engine loads Hugging Face checkpoint directories of its own four
 * layouts itself (engines/pytorch/checkpoint.py: its own safetensors reader)
 * from a spec `{ checkpoint: dir }`, and writes versions back in the same
 * layout. Checked against the built-in engine's TypeScript loader and writer
 * (engines/checkpoints/) and the built-in engine, both as real processes:
 *
 * - the checkpoints: the four tiny fixtures (gpt2 F32; llama BF16 sharded,
 *   GQA, untied head; qwen2 F16 with q/k/v biases, tied head; qwen3 BF16 with
 *   head_dim 8 ≠ hidden/heads, q/k norms, GQA, tied head) and, written
 *   here with random weights by exportHfCheckpoint, gpt2 / llama / qwen2 / qwen3
 *   at width 64 (4 heads, 2 layers, vocabulary 96);
 * - InitModel gives the same normalized spec and the same θ bytes (sha256) as
 *   loadHfCheckpoint; `maxSeq` lowers a rope model's bound as it does there;
 * - every log-softmax row (every vocabulary entry of every position) of Score
 *   equals the built-in engine's (the same bytes loaded with LoadVersion)
 *   within 1e-4, and the fixtures' float64 PyTorch logits
 *   (test/fixtures/hf/reference-logits.json) within 1e-4;
 * - `checkpoint.py export` of an exported version writes the same
 *   model.safetensors bytes and the same config.json as exportHfCheckpoint,
 *   and the directory loads back to the same sha256;
 * - an Update of qwen3-tiny in both engines moves the q/k norm gains alike,
 *   and the trained version exports and loads back to the same bytes;
 * - bad specs and directories are INVALID_REQUEST naming the field, and
 *   load nothing; configs these layouts cannot compute (a GELU llama, Qwen3
 *   with a sliding window or YaRN) load through transformers instead (hf.py,
 *   checked against transformers in pytorch-transformers.test.ts); Health
 *   names the loaders.
 *
 * Skips (saying why) where the PyTorch engine cannot run.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { exportHfCheckpoint, loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec } from '../../../engines/families/transformer/spec';
import { EngineClient } from '../../../engines/protocol/client';
import { decodeWeights, encodeWeights, sha256Hex } from '../../../engines/protocol/version-bytes';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';

const engine = pytorchEngine();
const skip = 'missing' in engine ? engine.missing : false;
const FIXTURES = path.resolve(__dirname, '../../fixtures/hf');
const CHECKPOINT_PY = path.resolve(__dirname, '../../../engines/pytorch/checkpoint.py');
const TOL = 1e-4;
const PYTHON = 'missing' in engine ? '' : engine.command[0]!;

let torchProc: SpawnedEngine | undefined;
let builtin: SpawnedEngine | undefined;
let torch: EngineClient;
let onnx: EngineClient;
let tmp: string;

/** A checkpoint of `model_type`'s layout at width 64 with seeded random weights, written by the built-in engine's writer. */
function writeCheckpoint(name: string, options: Omit<TransformerSpec, 'family' | 'headDim' | 'qkNorm'> & Partial<TransformerSpec>, source?: string): string {
  const spec = normalizeTransformerSpec({ family: 'transformer', ...options });
  const dir = path.join(tmp, name);
  const src = source ? { dir: source, config: JSON.parse(fs.readFileSync(path.join(source, 'config.json'), 'utf8')) } : undefined;
  exportHfCheckpoint(dir, spec, initTransformerWeights(spec, 7), src);
  return dir;
}

function checkpoints(): Record<string, string> {
  const shape = { vocabSize: 96, width: 64, layers: 2, heads: 4, maxSeq: 64 };
  const rope = { ...shape, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', ropeTheta: 10_000, normEps: 1e-6 } as const;
  return {
    'gpt2-tiny': path.join(FIXTURES, 'gpt2-tiny'),
    'llama-tiny': path.join(FIXTURES, 'llama-tiny'),
    'qwen2-tiny': path.join(FIXTURES, 'qwen2-tiny'),
    'qwen3-tiny': path.join(FIXTURES, 'qwen3-tiny'),
    'gpt2-64': writeCheckpoint('gpt2-64', {
      ...shape,
      kvHeads: 4,
      mlpWidth: 256,
      positions: 'learned',
      ropeTheta: 10_000,
      norm: 'layernorm',
      normEps: 1e-5,
      mlp: 'gelu',
      bias: true,
      tiedHead: true,
    }),
    'llama-64': writeCheckpoint('llama-64', { ...rope, kvHeads: 2, mlpWidth: 176, bias: false, tiedHead: false }),
    // q/k/v biases only (a qwen2 source config keeps the qwen2 layout): zero o/mlp biases stay unwritten
    'qwen2-64': writeCheckpoint('qwen2-64', { ...rope, kvHeads: 1, mlpWidth: 128, bias: true, tiedHead: true }, path.join(FIXTURES, 'qwen2-tiny')),
    // head_dim 32 ≠ 64 / 4, written as qwen3 (q/k norms) without a source config
    'qwen3-64': writeCheckpoint('qwen3-64', { ...rope, kvHeads: 2, headDim: 32, qkNorm: true, mlpWidth: 128, bias: false, tiedHead: true }),
  };
}

/** Every log-softmax row of `prompt`'s positions, by Score: one sequence per (position, vocabulary entry). */
async function logSoftmaxRows(c: EngineClient, modelKey: string, prompt: number[], V: number): Promise<number[][]> {
  const sequences = prompt.flatMap((_, p) => Array.from({ length: V }, (_, v) => ({ context: prompt.slice(0, p + 1), tokens: [v] })));
  const res = await c.score({ modelKey, version: 0, sequences });
  return prompt.map((_, p) => Array.from({ length: V }, (_, v) => res.sequences[p * V + v]!.logprobs[0]!));
}

function logSoftmax(row: number[]): number[] {
  const m = Math.max(...row);
  const z = Math.log(row.reduce((s, x) => s + Math.exp(x - m), 0)) + m;
  return row.map((x) => x - z);
}

function maxDiff(a: number[][], b: number[][]): number {
  let d = 0;
  a.forEach((row, p) => row.forEach((x, v) => (d = Math.max(d, Math.abs(x - b[p]![v]!)))));
  return d;
}

before(async () => {
  if ('missing' in engine) return; // skipped
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-pytorch-ckpt-'));
  // The PyTorch engine keeps the built-in engine's launch contract (spawnEngine's `command`).
  torchProc = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: engine.command, startTimeoutMs: 120_000 });
  builtin = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  torch = await EngineClient.connect(torchProc.listening.address);
  onnx = await EngineClient.connect(builtin.listening.address);
});

after(() => {
  torch?.close();
  onnx?.close();
  torchProc?.child.kill('SIGTERM');
  builtin?.child.kill('SIGTERM');
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

describe('the PyTorch engine loads and writes Hugging Face checkpoints', { skip }, () => {
  it('same spec and θ bytes as the built-in loader; Score rows equal the built-in engine and PyTorch float64 within 1e-4', async () => {
    const reference = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'reference-logits.json'), 'utf8')) as {
      prompts: number[][];
      models: Record<string, number[][][]>;
    };
    for (const [name, dir] of Object.entries(checkpoints())) {
      const ckpt = loadHfCheckpoint(dir);
      const weights = encodeWeights(ckpt.theta);
      const info = await torch.initModel({ modelKey: `ck-${name}`, spec: { family: 'transformer', vocabSize: 0, checkpoint: dir }, seed: 0 });
      assert.deepEqual(info.spec, ckpt.spec, name);
      assert.equal(info.weightsSha256, sha256Hex(weights), `${name}: θ bytes differ from loadHfCheckpoint's`);
      assert.equal(info.paramCount, ckpt.theta.length);
      // idempotent: the same directory again is the same version 0
      const again = await torch.initModel({ modelKey: `ck-${name}`, spec: { family: 'transformer', vocabSize: 0, checkpoint: dir }, seed: 5 });
      assert.equal(again.weightsSha256, info.weightsSha256);
      await onnx.loadVersion({ modelKey: `ck-${name}`, version: 0, spec: ckpt.spec, weights, optimizerState: new Uint8Array(0) });

      const V = ckpt.spec.vocabSize;
      const prompts = reference.models[name] ? reference.prompts : [[1, 5, 9, 13]];
      let vsBuiltin = 0;
      let vsTorch64 = 0;
      for (const [i, prompt] of prompts.entries()) {
        const [a, b] = await Promise.all([logSoftmaxRows(torch, `ck-${name}`, prompt, V), logSoftmaxRows(onnx, `ck-${name}`, prompt, V)]);
        vsBuiltin = Math.max(vsBuiltin, maxDiff(a, b));
        const want = reference.models[name]?.[i];
        if (want) vsTorch64 = Math.max(vsTorch64, maxDiff(a, want.map(logSoftmax)));
      }
      console.log(
        `${name} (${ckpt.dtype}, ${ckpt.theta.length} params): max |Δ log-softmax| vs built-in ${vsBuiltin.toExponential(2)}` +
          (reference.models[name] ? `, vs float64 PyTorch ${vsTorch64.toExponential(2)}` : ''),
      );
      assert.ok(vsBuiltin < TOL, `${name}: |Δ| vs the built-in engine ${vsBuiltin}`);
      assert.ok(vsTorch64 < TOL, `${name}: |Δ| vs float64 PyTorch ${vsTorch64}`);
    }
  });

  it('maxSeq lowers a rope model’s bound as the built-in loader does', async () => {
    const dir = path.join(FIXTURES, 'llama-tiny');
    const info = await torch.initModel({ modelKey: 'ck-short', spec: { family: 'transformer', vocabSize: 0, checkpoint: dir, maxSeq: 16 }, seed: 0 });
    const ckpt = loadHfCheckpoint(dir, { maxSeq: 16 });
    assert.equal((info.spec as TransformerSpec).maxSeq, 16);
    assert.deepEqual(info.spec, ckpt.spec);
    assert.equal(info.weightsSha256, sha256Hex(encodeWeights(ckpt.theta)));
  });

  it('checkpoint.py export writes what exportHfCheckpoint writes, and it loads back to the same bytes', async () => {
    for (const name of ['gpt2-tiny', 'llama-tiny', 'qwen2-tiny', 'qwen3-tiny']) {
      const src = path.join(FIXTURES, name);
      const key = `ck-${name}`;
      const info = await torch.initModel({ modelKey: key, spec: { family: 'transformer', vocabSize: 0, checkpoint: src }, seed: 0 });
      const exported = await torch.exportVersion({ modelKey: key, version: 0, destinationUri: `file://${path.join(tmp, 'blobs')}` });
      const weightsFile = new URL(exported.weightsRef!.uri).pathname;
      const { family: _f, ...config } = info.spec as TransformerSpec;
      const ours = path.join(tmp, `export-${name}`);
      const r = spawnSync(PYTHON, [CHECKPOINT_PY, 'export', '--weights', weightsFile, '--spec', JSON.stringify(config), '--out', ours, '--from', src], {
        encoding: 'utf8',
      });
      assert.equal(r.status, 0, r.stderr);
      const theirs = path.join(tmp, `export-ts-${name}`);
      const source = loadHfCheckpoint(src);
      const ts = exportHfCheckpoint(theirs, source.spec, source.theta, { dir: src, config: source.config });
      assert.deepEqual(JSON.parse(r.stdout).files, ts.files);
      assert.equal(JSON.parse(r.stdout).dtype, ts.dtype, `${name}: written as ${ts.dtype} by the built-in writer`);
      assert.ok(
        fs.readFileSync(path.join(ours, 'model.safetensors')).equals(fs.readFileSync(path.join(theirs, 'model.safetensors'))),
        `${name}: model.safetensors bytes differ`,
      );
      assert.deepEqual(
        JSON.parse(fs.readFileSync(path.join(ours, 'config.json'), 'utf8')),
        JSON.parse(fs.readFileSync(path.join(theirs, 'config.json'), 'utf8')),
      );
      const back = await torch.initModel({ modelKey: `${key}-back`, spec: { family: 'transformer', vocabSize: 0, checkpoint: ours }, seed: 0 });
      assert.equal(back.weightsSha256, info.weightsSha256, `${name}: exported directory loads back to other bytes`);
    }
  });

  it('qwen3-tiny: an Update moves the q/k norm gains alike in both engines; the trained version exports and loads back', async () => {
    const src = path.join(FIXTURES, 'qwen3-tiny');
    const key = 'ck-qwen3-update';
    const ckpt = loadHfCheckpoint(src);
    const V = ckpt.spec.vocabSize;
    await torch.initModel({ modelKey: key, spec: { family: 'transformer', vocabSize: 0, checkpoint: src }, seed: 0 });
    await onnx.loadVersion({ modelKey: key, version: 0, spec: ckpt.spec, weights: encodeWeights(ckpt.theta), optimizerState: new Uint8Array(0) });
    const samples = [0, 1, 2].map((i) => {
      const toks = [3 + i, 17, 5 + 2 * i, 40, 9];
      return {
        context: [1, 7 + i, 20],
        tokens: toks,
        lossMask: toks.map(() => 1),
        advantages: toks.map((_, t) => (i % 2 === 0 ? 1 : -1) * (0.5 + 0.1 * t)),
        oldLogprobs: toks.map(() => -Math.log(V)),
        lossWeights: toks.map(() => 1 / 15),
      };
    });
    const req = { modelKey: key, baseVersion: 0, requestId: 'q3-u1', samples, settings: { lr: 0.01, innerSteps: 2 } };
    const [a, b] = await Promise.all([torch.update(req), onnx.update(req)]);
    const [ea, eb] = await Promise.all([torch.exportVersion({ modelKey: key, version: 1 }), onnx.exportVersion({ modelKey: key, version: 1 })]);
    const ta = decodeWeights(ea.weights, ckpt.theta.length);
    const tb = decodeWeights(eb.weights, ckpt.theta.length);
    for (const slot of paramLayout(ckpt.spec).slots.filter((s) => /\.ln[qk]_g$/.test(s.name))) {
      let moved = Infinity;
      let gap = 0;
      for (let i = slot.offset; i < slot.offset + slot.size; i++) {
        moved = Math.min(moved, Math.abs(ta[i]! - ckpt.theta[i]!));
        gap = Math.max(gap, Math.abs(ta[i]! - tb[i]!));
      }
      // AdamW moves every weight with a non-zero gradient by about lr per step
      assert.ok(moved > 1e-3, `${slot.name}: the smallest move is ${moved}`);
      assert.ok(gap < 0.05 * 0.01 * 2, `${slot.name}: engines differ by ${gap}`);
    }
    assert.equal(a.info.version, 1);
    assert.equal(b.tokens, a.tokens);
    // the trained version, written by checkpoint.py and loaded back by both loaders
    const weightsFile = path.join(tmp, 'q3-v1.weights');
    fs.writeFileSync(weightsFile, ea.weights);
    const { family: _f, ...config } = ckpt.spec;
    const out = path.join(tmp, 'q3-trained');
    const r = spawnSync(PYTHON, [CHECKPOINT_PY, 'export', '--weights', weightsFile, '--spec', JSON.stringify(config), '--out', out, '--from', src], {
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8')).model_type, 'qwen3');
    const back = await torch.initModel({ modelKey: `${key}-back`, spec: { family: 'transformer', vocabSize: 0, checkpoint: out }, seed: 0 });
    assert.equal(back.weightsSha256, a.info.weightsSha256, 'the trained version loads back to other bytes (PyTorch loader)');
    assert.ok(
      sha256Hex(encodeWeights(loadHfCheckpoint(out).theta)) === a.info.weightsSha256,
      'the trained version loads back to other bytes (built-in loader)',
    );
  });

  it('bad specs and directories: INVALID_REQUEST naming the field, nothing loaded; what the own layouts cannot compute, transformers does', async () => {
    const gelu = path.join(tmp, 'bad-act');
    fs.cpSync(path.join(FIXTURES, 'llama-tiny'), gelu, { recursive: true });
    const cfg = JSON.parse(fs.readFileSync(path.join(gelu, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(gelu, 'config.json'), JSON.stringify({ ...cfg, hidden_act: 'gelu' }));
    const truncated = path.join(tmp, 'truncated');
    fs.cpSync(path.join(FIXTURES, 'qwen2-tiny'), truncated, { recursive: true });
    const sliding = path.join(tmp, 'qwen3-sliding');
    fs.cpSync(path.join(FIXTURES, 'qwen3-tiny'), sliding, { recursive: true });
    const q3 = JSON.parse(fs.readFileSync(path.join(sliding, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(sliding, 'config.json'), JSON.stringify({ ...q3, use_sliding_window: true, sliding_window: 4 }));
    const yarn = path.join(tmp, 'qwen3-yarn');
    fs.cpSync(path.join(FIXTURES, 'qwen3-tiny'), yarn, { recursive: true });
    fs.writeFileSync(path.join(yarn, 'config.json'), JSON.stringify({ ...q3, rope_parameters: { rope_type: 'yarn', rope_theta: 1e6, factor: 4 } }));
    const st = path.join(truncated, 'model.safetensors');
    fs.truncateSync(st, fs.statSync(st).size - 100);
    const cases: Array<[string, Record<string, unknown>, RegExp]> = [
      ['relative', { checkpoint: 'fixtures/hf/llama-tiny' }, /spec\.checkpoint: must be an absolute directory path/],
      ['shape option', { checkpoint: path.join(FIXTURES, 'llama-tiny'), width: 32 }, /spec\.width: comes from the checkpoint's config\.json/],
      ['missing dir', { checkpoint: path.join(tmp, 'nowhere') }, /spec\.checkpoint: .*nowhere\/config\.json: cannot read/],
      ['maxSeq', { checkpoint: path.join(FIXTURES, 'gpt2-tiny'), maxSeq: 64 }, /spec\.maxSeq: 64 is more than the checkpoint's 32/],
    ];
    for (const [what, config, message] of cases) {
      await assert.rejects(
        torch.initModel({ modelKey: `bad-${what}`, spec: { family: 'transformer', vocabSize: 0, ...config }, seed: 0 }),
        (e: { reason: string; message: string }) => {
          assert.equal(e.reason, 'INVALID_REQUEST', `${what}: ${e.message}`);
          assert.match(e.message, message, what);
          return true;
        },
      );
      await assert.rejects(
        torch.score({ modelKey: `bad-${what}`, version: 0, sequences: [{ context: [1], tokens: [2] }] }),
        (e: { reason: string }) => e.reason === 'MODEL_NOT_LOADED',
      );
    }
    // valid configs the engine's own layouts cannot compute go to transformers (hf.py) instead
    for (const [what, dir] of [
      ['activation', gelu],
      ['qwen3 sliding window', sliding],
      ['qwen3 yarn', yarn],
    ] as const) {
      const info = await torch.initModel({ modelKey: `hf-${what}`, spec: { family: 'transformer', vocabSize: 0, checkpoint: dir }, seed: 0 });
      const spec = info.spec as { hf?: { model_type?: string } };
      assert.ok(spec.hf?.model_type, `${what}: loads through transformers (spec.hf), got ${JSON.stringify(info.spec).slice(0, 200)}`);
    }
    const h = await torch.health();
    assert.match(
      h.capabilities?.engine ?? '',
      /checkpoints: own safetensors loader for model types gpt2\/llama\/qwen2\/qwen3; transformers for every other causal LM/,
    );
  });
});
