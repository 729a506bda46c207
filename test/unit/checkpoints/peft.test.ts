/**
 * LoRA export (engines/checkpoints/peft.ts, cli export-model): the PEFT adapter's keys, shapes and
 * config for the llama layout, and the merged checkpoint against PEFT's own merge rule in the
 * Hugging Face orientation (W[out, in] + (lora_alpha / r)·B·A, from the files just written).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { exportHfCheckpoint, loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { exportPeftAdapter, importPeftAdapter } from '../../../engines/checkpoints/peft';
import { readSafetensors } from '../../../engines/checkpoints/safetensors';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { adapterLayout, baseSpecOf, mergeLora } from '../../../engines/families/transformer/lora';
import { normalizeTransformerSpec } from '../../../engines/families/transformer/spec';

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-peft-'));
/** A safetensors file's tensors (a plain Uint8Array: a Buffer's slice() is a view, not the copy readSafetensors wants) */
function tensors(file: string) {
  const b = fs.readFileSync(file);
  return readSafetensors(new Uint8Array(b.buffer, b.byteOffset, b.byteLength)).tensors;
}
const llama = { vocabSize: 16, width: 16, layers: 2, heads: 2, kvHeads: 1, maxSeq: 16, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false };

test('PEFT adapter (llama layout): keys, shapes, values and adapter_config.json', () => {
  const spec = normalizeTransformerSpec({ ...llama, lora: { rank: 2, alpha: 6, targets: ['q', 'k', 'd'] } });
  const { total } = adapterLayout(spec);
  const adapter = Float32Array.from({ length: total }, (_, i) => Math.sin(i));
  const out = tmp();
  try {
    exportPeftAdapter(out, spec, adapter, '/models/base');
    const config = JSON.parse(fs.readFileSync(path.join(out, 'adapter_config.json'), 'utf8'));
    assert.deepEqual(
      { ...config },
      {
        peft_type: 'LORA',
        task_type: 'CAUSAL_LM',
        base_model_name_or_path: '/models/base',
        r: 2,
        lora_alpha: 6,
        lora_dropout: 0,
        target_modules: ['self_attn.q_proj', 'self_attn.k_proj', 'mlp.down_proj'],
        bias: 'none',
        fan_in_fan_out: false,
        inference_mode: true,
      },
    );
    const file = { tensors: tensors(path.join(out, 'adapter_model.safetensors')) };
    // D 16, hd 8, kvHeads 1: q_proj [16 → 16], k_proj [16 → 8]; F 64: down_proj [64 → 16]
    const shapes = Object.fromEntries([...file.tensors].map(([k, t]) => [k, t.shape]));
    const want: Record<string, number[]> = {};
    for (const l of [0, 1]) {
      const p = `base_model.model.model.layers.${l}.`;
      Object.assign(want, {
        [`${p}self_attn.q_proj.lora_A.weight`]: [2, 16],
        [`${p}self_attn.q_proj.lora_B.weight`]: [16, 2],
        [`${p}self_attn.k_proj.lora_A.weight`]: [2, 16],
        [`${p}self_attn.k_proj.lora_B.weight`]: [8, 2],
        [`${p}mlp.down_proj.lora_A.weight`]: [2, 64],
        [`${p}mlp.down_proj.lora_B.weight`]: [16, 2],
      });
    }
    assert.deepEqual(shapes, want);
    const joined = [...file.tensors.values()].flatMap((t) => [...t.data]);
    assert.deepEqual(joined, [...adapter], 'the tensors are the adapter values in layout order');
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test("merged checkpoint = PEFT's merge of the adapter written beside it", () => {
  const spec = normalizeTransformerSpec({ ...llama, lora: { rank: 3, alpha: 4, targets: ['v', 'u'] } });
  const base = initTransformerWeights(baseSpecOf(spec), 5);
  const adapter = Float32Array.from({ length: adapterLayout(spec).total }, (_, i) => Math.cos(i * 0.7) * 0.1);
  const root = tmp();
  try {
    exportHfCheckpoint(path.join(root, 'base'), baseSpecOf(spec), base);
    exportHfCheckpoint(path.join(root, 'merged'), baseSpecOf(spec), mergeLora(spec, base, adapter));
    exportPeftAdapter(path.join(root, 'adapter'), spec, adapter);
    const read = (d: string, f: string) => tensors(path.join(root, d, f));
    const b = read('base', 'model.safetensors');
    const m = read('merged', 'model.safetensors');
    const a = read('adapter', 'adapter_model.safetensors');
    const config = JSON.parse(fs.readFileSync(path.join(root, 'adapter', 'adapter_config.json'), 'utf8'));
    const scale = config.lora_alpha / config.r;
    let checked = 0;
    for (const [name, w] of b) {
      const module = name.replace(/\.weight$/, '');
      const A = a.get(`base_model.model.${module}.lora_A.weight`);
      const B = a.get(`base_model.model.${module}.lora_B.weight`);
      const merged = m.get(name)!;
      if (!A || !B) {
        assert.deepEqual(merged.data, w.data, `${name} is not targeted`);
        continue;
      }
      const [out, inp] = w.shape as [number, number];
      const r = A.shape[0]!;
      for (let o = 0; o < out; o++)
        for (let i = 0; i < inp; i++) {
          let d = 0;
          for (let k = 0; k < r; k++) d += B.data[o * r + k]! * A.data[k * inp + i]!;
          assert.ok(Math.abs(merged.data[o * inp + i]! - (w.data[o * inp + i]! + scale * d)) <= 1e-6, `${name}[${o}, ${i}]`);
        }
      checked++;
    }
    assert.equal(checked, 4, 'v_proj and up_proj of both layers');
    assert.equal(loadHfCheckpoint(path.join(root, 'merged')).spec.width, 16);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('GPT-2 layout: q, k, v have no tensor of their own (c_attn), so the adapter export refuses them', () => {
  const spec = normalizeTransformerSpec({ vocabSize: 16, width: 16, layers: 1, heads: 2, maxSeq: 16, lora: { rank: 2, alpha: 2, targets: ['q', '2'] } });
  const out = tmp();
  try {
    assert.throws(
      () => exportPeftAdapter(out, spec, new Float32Array(adapterLayout(spec).total)),
      /LoRA target "q" has no weight of its own in the gpt2 layout/,
    );
    const o2 = normalizeTransformerSpec({ ...spec, lora: { rank: 2, alpha: 2, targets: ['o', '1', '2'] } });
    exportPeftAdapter(out, o2, new Float32Array(adapterLayout(o2).total));
    const config = JSON.parse(fs.readFileSync(path.join(out, 'adapter_config.json'), 'utf8'));
    assert.deepEqual([config.target_modules, config.fan_in_fan_out], [['attn.c_proj', 'mlp.c_fc', 'mlp.c_proj'], true]);
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test('PEFT adapter import: the exported adapter imports bit for bit; one that is not the model is refused naming the file and field', () => {
  const spec = normalizeTransformerSpec({ ...llama, lora: { rank: 2, alpha: 6, targets: ['q', 'k', 'd'] } });
  const { total } = adapterLayout(spec);
  const adapter = Float32Array.from({ length: total }, (_, i) => Math.cos(i));
  const out = tmp();
  try {
    exportPeftAdapter(out, spec, adapter);
    assert.deepEqual(importPeftAdapter(out, spec), adapter);
    const config = path.join(out, 'adapter_config.json');
    const refused = (other: Parameters<typeof normalizeTransformerSpec>[0], message: RegExp) =>
      assert.throws(() => importPeftAdapter(out, normalizeTransformerSpec(other)), message);
    refused({ ...llama, lora: { rank: 4, alpha: 6, targets: ['q', 'k', 'd'] } }, /adapter_config\.json: r: 2, the model's is 4/);
    refused({ ...llama, lora: { rank: 2, alpha: 2, targets: ['q', 'k', 'd'] } }, /adapter_config\.json: lora_alpha: 6, the model's is 2/);
    refused(
      { ...llama, lora: { rank: 2, alpha: 6, targets: ['q', 'k', 'v', 'd'] } },
      /tensor base_model\.model\.model\.layers\.0\.self_attn\.v_proj\.lora_A\.weight is missing/,
    );
    refused(
      { ...llama, lora: { rank: 2, alpha: 6, targets: ['q', 'd'] } },
      /tensor base_model\.model\.model\.layers\.0\.self_attn\.k_proj\.lora_A\.weight has no place in the model's adapter/,
    );
    fs.writeFileSync(config, JSON.stringify({ ...JSON.parse(fs.readFileSync(config, 'utf8')), use_dora: true }));
    assert.throws(() => importPeftAdapter(out, spec), /use_dora: true, the model's is false \(DoRA is not LoRA\)/);
    assert.throws(() => importPeftAdapter(path.join(out, 'nowhere'), spec), /nowhere\/adapter_config\.json: cannot read/);
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});
