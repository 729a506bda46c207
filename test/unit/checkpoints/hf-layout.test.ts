/**
 * HF-layout directories: load → export → load is bit-identical (θ and spec),
 * export is deterministic, what the family cannot express is refused naming
 * the config.json field, and malformed safetensors files get clear errors.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { parseHfConfig } from '../../../engines/checkpoints/hf-config';
import { exportHfCheckpoint, loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { readSafetensors, representable, writeSafetensors } from '../../../engines/checkpoints/safetensors';
import { normalizeTransformerSpec, paramLayout } from '../../../engines/families/transformer/spec';
import { sessionFactory } from '../../../engines/onnx/device';
import { TransformerRuntime } from '../../../engines/onnx/transformer/runtime';
import { sameBits } from '../engine/helpers';

const FIXTURES = path.join(__dirname, '../../fixtures/hf');
const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-hf-'));

describe('HF layout: load → export → load', () => {
  for (const [name, dtype, modelType] of [
    ['gpt2-tiny', 'F32', 'gpt2'],
    ['llama-tiny', 'BF16', 'llama'],
    ['qwen2-tiny', 'F16', 'qwen2'],
    ['qwen3-tiny', 'BF16', 'qwen3'],
  ] as const) {
    it(`${name}: bit-identical θ and spec, source dtype kept, tokenizer files copied, bytes deterministic`, () => {
      const src = tmp();
      for (const f of fs.readdirSync(path.join(FIXTURES, name))) fs.copyFileSync(path.join(FIXTURES, name, f), path.join(src, f));
      fs.writeFileSync(path.join(src, 'tokenizer_config.json'), '{"eos_token": "<|endoftext|>"}');
      fs.writeFileSync(path.join(src, 'notes.txt'), 'not part of the model');
      const a = loadHfCheckpoint(src);
      assert.equal(a.dtype, dtype);
      const out = tmp();
      const written = exportHfCheckpoint(out, a.spec, a.theta, a);
      assert.equal(written.dtype, dtype, 'values loaded from the dtype fit it exactly');
      assert.deepEqual(fs.readdirSync(out).sort(), ['config.json', 'model.safetensors', 'tokenizer_config.json']);
      assert.equal(fs.readFileSync(path.join(out, 'tokenizer_config.json'), 'utf8'), '{"eos_token": "<|endoftext|>"}');
      const b = loadHfCheckpoint(out);
      assert.equal(b.model.modelType, modelType);
      assert.deepEqual(b.spec, a.spec);
      assert.ok(sameBits(a.theta, b.theta), 'θ differs after the round trip');
      const again = tmp();
      exportHfCheckpoint(again, b.spec, b.theta, b);
      assert.deepEqual(fs.readFileSync(path.join(again, 'model.safetensors')), fs.readFileSync(path.join(out, 'model.safetensors')));
      assert.deepEqual(
        JSON.parse(fs.readFileSync(path.join(again, 'config.json'), 'utf8')),
        JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8')),
      );
    });
  }

  it('trained weights that leave the dtype are written as F32, still bit-identical', () => {
    const a = loadHfCheckpoint(path.join(FIXTURES, 'llama-tiny'));
    const theta = a.theta.map((x) => x * 1.0001);
    const out = tmp();
    assert.equal(exportHfCheckpoint(out, a.spec, theta, a).dtype, 'F32');
    const b = loadHfCheckpoint(out);
    assert.ok(sameBits(theta, b.theta));
    assert.equal(JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8')).torch_dtype, 'float32');
  });

  it('a qwen2 model whose o_proj / MLP biases became non-zero is written as llama with both bias flags, and reloads the same', () => {
    const a = loadHfCheckpoint(path.join(FIXTURES, 'qwen2-tiny'));
    const bo = paramLayout(a.spec).slots.find((s) => s.name === 'l1.bo')!;
    const theta = a.theta.slice();
    theta[bo.offset + 3] = 0.25;
    const out = tmp();
    exportHfCheckpoint(out, a.spec, theta, a);
    const config = JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8'));
    assert.equal(config.model_type, 'llama');
    assert.equal(config.attention_bias, true);
    assert.equal(config.mlp_bias, false);
    assert.equal(config.rope_theta, 1_000_000, 'the source config fields carry over');
    const b = loadHfCheckpoint(out);
    assert.deepEqual(b.spec, a.spec);
    assert.ok(sameBits(theta, b.theta));
  });

  it('qwen3-tiny: a built-in engine update moves every q/k norm gain; the trained model exports as qwen3 and reloads bit-identical', async () => {
    const a = loadHfCheckpoint(path.join(FIXTURES, 'qwen3-tiny'));
    const rt = new TransformerRuntime(a.spec, sessionFactory('cpu', { intraOpThreads: 1 }));
    const P = a.theta.length;
    const samples = [0, 1, 2].map((i) => ({
      context: [1, 7 + i, 20],
      tokens: [3 + i, 17, 5 + 2 * i, 40],
      lossMask: [1, 1, 1, 1],
      advantages: [1, -1, 0.5, i - 1],
      oldLogprobs: [-3, -3, -3, -3],
      lossWeights: [0.1, 0.1, 0.1, 0.1],
      refLogprobs: [],
    }));
    const settings = { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, clipLow: 0.2, clipHigh: 0.28, dualClip: 3 };
    const { state } = await rt.update({ theta: a.theta, m: new Float32Array(P), v: new Float32Array(P), step: 0 }, samples, {
      ...settings,
      klCoef: 0,
      klType: 'low_var_kl',
      entropyCoef: 0,
      innerSteps: 1,
    });
    const norms = paramLayout(a.spec).slots.filter((s) => /\.ln[qk]_g$/.test(s.name));
    assert.equal(norms.length, 4);
    for (const slot of norms)
      for (let i = slot.offset; i < slot.offset + slot.size; i++)
        // AdamW's first step moves every weight with a non-zero gradient by ≈ lr
        assert.ok(Math.abs(state.theta[i]! - a.theta[i]!) > 1e-3, `${slot.name}[${i - slot.offset}] did not move`);
    const out = tmp();
    assert.equal(exportHfCheckpoint(out, a.spec, state.theta, a).dtype, 'F32', 'trained values leave BF16');
    const config = JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8'));
    assert.deepEqual([config.model_type, config.head_dim, config.attention_bias], ['qwen3', 8, false]);
    const b = loadHfCheckpoint(out);
    assert.deepEqual(b.spec, a.spec);
    assert.ok(sameBits(state.theta, b.theta));
  });

  it('a free head dimension without q/k norms has no Hugging Face layout: export refuses it', () => {
    const spec = normalizeTransformerSpec({ vocabSize: 8, width: 8, heads: 2, headDim: 6, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false });
    assert.throws(
      () => exportHfCheckpoint(tmp(), spec, new Float32Array(paramLayout(spec).total)),
      /headDim 6 ≠ width \/ heads is written only as qwen3, which needs qkNorm/,
    );
  });

  it('refuses a checkpoint whose tensors do not fit its config, naming the tensor', () => {
    const dir = tmp();
    fs.copyFileSync(path.join(FIXTURES, 'gpt2-tiny/model.safetensors'), path.join(dir, 'model.safetensors'));
    const config = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'gpt2-tiny/config.json'), 'utf8'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, n_inner: 32 }));
    assert.throws(() => loadHfCheckpoint(dir), /tensor transformer\.h\.0\.mlp\.c_fc\.weight has shape \[16,64\], config\.json implies \[16,32\]/);
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, n_layer: 1 }));
    assert.throws(() => loadHfCheckpoint(dir), /tensor transformer\.h\.1\.ln_1\.weight has no place/);
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, n_layer: 3 }));
    assert.throws(() => loadHfCheckpoint(dir), /tensor transformer\.h\.2\.ln_1\.weight is missing/);
    fs.rmSync(path.join(dir, 'model.safetensors'));
    assert.throws(() => loadHfCheckpoint(dir), /neither model\.safetensors nor model\.safetensors\.index\.json/);
  });

  it('checks a sharded index against its shards', () => {
    const dir = tmp();
    const src = path.join(FIXTURES, 'llama-tiny');
    for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(dir, f));
    const index = JSON.parse(fs.readFileSync(path.join(dir, 'model.safetensors.index.json'), 'utf8'));
    index.weight_map['model.norm.weight'] = 'model-00001-of-00002.safetensors';
    fs.writeFileSync(path.join(dir, 'model.safetensors.index.json'), JSON.stringify(index));
    assert.throws(() => loadHfCheckpoint(dir), /tensor model\.norm\.weight is not listed for this shard/);
    index.weight_map['model.norm.weight'] = '../elsewhere.safetensors';
    fs.writeFileSync(path.join(dir, 'model.safetensors.index.json'), JSON.stringify(index));
    assert.throws(() => loadHfCheckpoint(dir), /weight_map: "\.\.\/elsewhere\.safetensors" is not a file name/);
  });
});

describe('HF config.json: what the family cannot express is refused by field', () => {
  const llama = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'llama-tiny/config.json'), 'utf8'));
  const gpt2 = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'gpt2-tiny/config.json'), 'utf8'));
  const qwen3 = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'qwen3-tiny/config.json'), 'utf8'));
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ ...llama, model_type: 'mistral' }, /model_type: "mistral" is not supported \(supported: gpt2, llama, qwen2, qwen3\)/],
    [{ ...qwen3, use_sliding_window: true }, /use_sliding_window: true is not supported: sliding-window attention/],
    [{ ...qwen3, rope_scaling: { rope_type: 'yarn', factor: 4 } }, /rope_scaling: .* rope scaling is not implemented/],
    [
      { ...qwen3, layer_types: ['full_attention', 'sliding_attention'] },
      /layer_types: .* not supported: sliding-window attention is not implemented \(every layer must be full_attention\)/,
    ],
    [{ ...qwen3, head_dim: 0 }, /head_dim: must be a positive integer, got 0/],
    [
      { ...qwen3, rope_parameters: { rope_type: 'yarn', rope_theta: 1e6, factor: 4 } },
      /rope_parameters: .* is not supported: only \{"rope_type": "default", "rope_theta": θ\}/,
    ],
    [{ ...qwen3, rope_parameters: { rope_type: 'default', rope_theta: 5e5 } }, /rope_parameters: .* agreeing with rope_theta/],
    [{ ...llama, rope_scaling: { type: 'linear', factor: 2 } }, /rope_scaling: .* rope scaling is not implemented/],
    [{ ...llama, hidden_act: 'gelu' }, /hidden_act: "gelu" is not supported/],
    [{ ...llama, head_dim: 8 }, /head_dim: 8 is not supported: the head dimension must be hidden_size \/ num_attention_heads = 4/],
    [{ ...llama, model_type: 'qwen2', use_sliding_window: true }, /use_sliding_window: true is not supported/],
    [{ ...gpt2, activation_function: 'relu' }, /activation_function: "relu" is not supported/],
    [{ ...gpt2, scale_attn_by_inverse_layer_idx: true }, /scale_attn_by_inverse_layer_idx: true/],
    [{ ...gpt2, n_embd: undefined }, /n_embd: required/],
    [{ ...llama, num_attention_heads: 2.5 }, /num_attention_heads: must be a positive integer, got 2.5/],
  ];
  for (const [config, message] of cases)
    it(message.source, () =>
      assert.throws(
        () => parseHfConfig(config, '/m/config.json'),
        (e: Error) => e.name === 'HfConfigError' && /^\/m\/config\.json: /.test(e.message) && message.test(e.message),
      ),
    );

  it("Qwen3-0.6B's config.json: 596,049,920 parameters, 440,466,432 of them in the layers (hand count)", () => {
    // the published config's fields (Qwen/Qwen3-0.6B), weights not needed
    const config = {
      architectures: ['Qwen3ForCausalLM'],
      attention_bias: false,
      attention_dropout: 0.0,
      bos_token_id: 151643,
      eos_token_id: 151645,
      head_dim: 128,
      hidden_act: 'silu',
      hidden_size: 1024,
      initializer_range: 0.02,
      intermediate_size: 3072,
      max_position_embeddings: 40960,
      max_window_layers: 28,
      model_type: 'qwen3',
      num_attention_heads: 16,
      num_hidden_layers: 28,
      num_key_value_heads: 8,
      rms_norm_eps: 1e-6,
      rope_scaling: null,
      rope_theta: 1000000,
      sliding_window: null,
      tie_word_embeddings: true,
      torch_dtype: 'bfloat16',
      use_cache: true,
      use_sliding_window: false,
      vocab_size: 151936,
    };
    const spec = normalizeTransformerSpec({ family: 'transformer', ...parseHfConfig(config).options });
    assert.deepEqual([spec.headDim, spec.qkNorm, spec.bias, spec.tiedHead, spec.maxSeq], [128, true, false, true, 32768]);
    // per layer: ln1 1024 + q 1024·2048 + k, v 1024·1024 each + q/k norms 2·128 + o 2048·1024 + ln2 1024 + MLP 3·1024·3072
    const perLayer = 1024 + 2 * 2_097_152 + 2 * 1_048_576 + 256 + 1024 + 9_437_184;
    assert.equal(perLayer, 15_730_944);
    assert.equal(paramLayout(spec).total, 151_936 * 1024 + 28 * perLayer + 1024);
    assert.equal(paramLayout(spec).total, 596_049_920);
  });

  it('maps the layouts onto the family', () => {
    assert.deepEqual(parseHfConfig(llama).biases, { qkv: false, o: false, mlp: false });
    const q = parseHfConfig({ ...llama, model_type: 'qwen2' });
    assert.equal(q.options.bias, true);
    assert.deepEqual(q.biases, { qkv: true, o: false, mlp: false });
    assert.equal(parseHfConfig({ ...llama, max_position_embeddings: 131072 }).options.maxSeq, 32768, "rope models are bounded by the family's maxSeq");
    assert.equal(parseHfConfig(gpt2).options.mlpWidth, 64, 'n_inner null → 4·n_embd');
    const q3 = parseHfConfig(qwen3);
    assert.deepEqual([q3.options.headDim, q3.options.qkNorm, q3.options.bias], [8, true, false]);
    assert.deepEqual(parseHfConfig({ ...qwen3, attention_bias: true }).biases, { qkv: true, o: true, mlp: false }, "Qwen3's attention_bias covers o_proj");
    assert.equal(parseHfConfig({ ...qwen3, head_dim: undefined }).options.headDim, 128, "transformers' Qwen3 default");
    const { rope_theta: _theta, ...newer } = qwen3;
    assert.equal(
      parseHfConfig({ ...newer, rope_parameters: { rope_type: 'default', rope_theta: 5e5 } }).options.ropeTheta,
      5e5,
      'rope_theta inside rope_parameters',
    );
    assert.equal(parseHfConfig(llama).options.headDim, 4, 'llama: hidden_size / num_attention_heads');
    assert.equal(parseHfConfig({ ...llama, hidden_size: 18 }).options.headDim, undefined, 'left to the family, which names heads');
  });
});

describe('safetensors: validated reads', () => {
  const good = writeSafetensors(
    [
      ['a', { shape: [2, 3], data: Float32Array.from([1, 2, 3, 4, 5, 6]) }],
      ['b', { shape: [1], data: Float32Array.from([-0.5]) }],
    ],
    'F32',
    { format: 'pt' },
  );
  /** A file with this header (object) and n data bytes. */
  const file = (header: unknown, n: number) => {
    const json = new TextEncoder().encode(typeof header === 'string' ? header : JSON.stringify(header));
    const out = new Uint8Array(8 + json.length + n);
    new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
    out.set(json, 8);
    return out;
  };

  it('reads what it writes, in every dtype, and aligns data to 8 bytes', () => {
    const r = readSafetensors(good, 'good');
    assert.deepEqual([...r.tensors.get('a')!.data], [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(r.tensors.get('a')!.shape, [2, 3]);
    assert.deepEqual(r.metadata, { format: 'pt' });
    assert.equal(Number(Buffer.from(good).readBigUInt64LE(0)) % 8, 0);
    // hand-computed bit patterns: 1.5 = 0x3FC0 (bf16) = 0x3E00 (f16); 2^-24 is the smallest f16 subnormal (0x0001)
    const values = Float32Array.from([1.5, -2, 0, 65504, 2 ** -24, -Infinity]);
    for (const dtype of ['F16', 'BF16', 'F32', 'F64'] as const) {
      if (dtype === 'BF16') continue;
      const back = readSafetensors(writeSafetensors([['x', { shape: [6], data: values }]], dtype)).tensors.get('x')!.data;
      assert.ok(sameBits(back, values), dtype);
    }
    const f16 = writeSafetensors([['x', { shape: [2], data: Float32Array.from([1.5, 2 ** -24]) }]], 'F16');
    assert.deepEqual([...f16.subarray(f16.length - 4)], [0x00, 0x3e, 0x01, 0x00]);
    const bf16 = writeSafetensors([['x', { shape: [1], data: Float32Array.from([1.5]) }]], 'BF16');
    assert.deepEqual([...bf16.subarray(bf16.length - 2)], [0xc0, 0x3f]);
    assert.equal(representable(Float32Array.from([1 + 2 ** -10]), 'F16'), true);
    assert.equal(representable(Float32Array.from([1 + 2 ** -11]), 'F16'), false);
    assert.equal(representable(Float32Array.from([1 + 2 ** -8]), 'BF16'), false);
    assert.throws(
      () => writeSafetensors([['x', { shape: [1], data: Float32Array.from([0.1]) }]], 'BF16'),
      /tensor x: value 0\.1.* not exactly representable as BF16/,
    );
  });

  const bad: Array<[string, Uint8Array, RegExp]> = [
    ['too short', new Uint8Array(5), /5 bytes: too short/],
    [
      'header length beyond the file',
      (() => {
        const b = good.slice();
        new DataView(b.buffer).setBigUint64(0, 1n << 40n, true);
        return b;
      })(),
      /header length 1099511627776 exceeds the file/,
    ],
    ['header not JSON', file('{"a": ', 0), /header is not UTF-8 JSON/],
    ['header an array', file([], 0), /header must be a JSON object/],
    ['unknown dtype', file({ a: { dtype: 'I8', shape: [1], data_offsets: [0, 1] } }, 1), /tensor "a": dtype "I8" is not supported/],
    ['negative shape', file({ a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, 4), /tensor "a": shape must be an array of non-negative integers/],
    [
      'offsets past the data',
      file({ a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } }, 4),
      /tensor "a": data_offsets \[0, 8\] reach past the file's 4 data bytes \(the file is truncated\?\)/,
    ],
    ['offsets reversed', file({ a: { dtype: 'F32', shape: [0], data_offsets: [4, 0] } }, 4), /data_offsets \[4, 0\]: begin is after end/],
    ['shape × dtype ≠ bytes', file({ a: { dtype: 'F16', shape: [3], data_offsets: [0, 4] } }, 4), /shape \[3\] × F16 is 6 bytes but data_offsets span 4/],
    [
      'overlapping tensors',
      file({ a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'F32', shape: [1], data_offsets: [4, 8] } }, 8),
      /tensors "a" and "b" overlap/,
    ],
    ['metadata not strings', file({ __metadata__: { n: 1 } }, 0), /__metadata__\.n must be a string/],
    [
      'truncated file',
      good.subarray(0, good.length - 1),
      /tensor "b": data_offsets \[24, 28\] reach past the file's 27 data bytes \(the file is truncated\?\)/,
    ],
  ];
  for (const [what, bytes, message] of bad) {
    it(`refuses: ${what}`, () =>
      assert.throws(
        () => readSafetensors(bytes, '/m/model.safetensors'),
        (e: Error) => e.name === 'SafetensorsError' && e.message.startsWith('/m/model.safetensors: ') && message.test(e.message),
      ));
  }
});
