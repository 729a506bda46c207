/**
 * A LoRA version (engines/families/transformer/lora.ts) as a PEFT adapter directory:
 * adapter_config.json + adapter_model.safetensors, keys
 * `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r], the modules named
 * as the base's Hugging Face layout names them (tensorMap: `model.layers.0.self_attn.q_proj` for
 * llama / qwen, `transformer.h.0.attn.c_proj` for GPT-2). PEFT's shapes are the adapter's own, so the
 * values are copied as they are. GPT-2 fuses q, k and v into c_attn, which has no adapter of its own
 * here: such targets are refused (the merged checkpoint carries them).
 *
 * An adapter over a transformers-layout model (a spec with `hf`, served by the PyTorch engine alone) targets
 * the model's linear modules by PEFT's own names (`q_proj`, `gate_up_proj`); its layout, the targeted modules
 * with their widths in the adapter's order, is the engine's (`python engines/pytorch/hf.py targets SPEC`,
 * spec.target_shapes), read by whoever has the spec: exportHfPeftAdapter / importHfPeftAdapter take it.
 *
 * importPeftAdapter reads such a directory back into an adapter of a LoRA spec (a PEFT adapter as a
 * model's version 0): its r, lora_alpha, target modules and orientation must be the spec's, and every
 * tensor present with its shape; anything else is an HfCheckpointError naming the file and the field.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { adapterLayout, baseSpecOf } from '../families/transformer/lora';
import type { LoraSpec, TransformerSpec } from '../families/transformer/spec';
import { hfConfigFor, parseHfConfig } from './hf-config';
import { HfCheckpointError, tensorMap } from './hf-layout';
import { readSafetensors, SafetensorsError, writeSafetensors, type Tensor } from './safetensors';

/** One matrix of an adapter: the module it adapts, and its place in the adapter's bytes. */
export interface PeftSlot {
  module: string;
  matrix: 'A' | 'B';
  offset: number;
  /** [r, in] for A, [out, r] for B */
  shape: [number, number];
  /** the lora.targets name it comes from (for messages) */
  target: string;
}

/** An adapter's PEFT view: its slots, length, and whether the base stores its weights [in, out] (GPT-2's Conv1D). */
interface PeftLayout {
  slots: PeftSlot[];
  total: number;
  fanInFanOut: boolean;
}

/** A targeted linear module of a transformers-layout model: [module name, fan in, fan out] (the engine's spec.target_shapes). */
export type HfTarget = [string, number, number];

/** The `lora` of a spec with `hf`: its targets are module names (`q_proj`), not the family's projections. */
export type HfLora = Pick<LoraSpec, 'rank' | 'alpha'> & { targets: readonly string[] };

/** The Hugging Face module of each targeted matrix (`l0.wq` → `model.layers.0.self_attn.q_proj`), and the layout's model type. */
function familyLayout(spec: TransformerSpec, what: string): PeftLayout {
  const { family: _family, ...options } = baseSpecOf(spec);
  const model = parseHfConfig(hfConfigFor(options, undefined, { qkv: false, o: false, mlp: false }), 'export config.json');
  const modules = new Map(
    tensorMap(model, options)
      .filter((e) => e.slots.length === 1 && e.name.endsWith('.weight'))
      .map((e) => [e.slots[0]!, e.name.slice(0, -'.weight'.length)]),
  );
  const { slots, total } = adapterLayout(spec);
  return {
    total,
    fanInFanOut: model.modelType === 'gpt2',
    slots: slots.map((s) => {
      const module = modules.get(`l${s.layer}.w${s.target}`);
      if (!module)
        throw new HfCheckpointError(
          `${what}: LoRA target ${JSON.stringify(s.target)} has no weight of its own in the ${model.modelType} layout (it fuses q, k and v into c_attn); export the merged checkpoint instead`,
        );
      return { module, matrix: s.matrix, offset: s.offset, shape: s.shape, target: s.target };
    }),
  };
}

/** The slots of an adapter of rank r over a transformers-layout model's targeted modules, A [r, in] then B [out, r] each. */
function hfLayout(lora: HfLora, targets: readonly HfTarget[]): PeftLayout {
  const slots: PeftSlot[] = [];
  let offset = 0;
  for (const [module, fanIn, fanOut] of targets) {
    for (const [matrix, shape] of [
      ['A', [lora.rank, fanIn]],
      ['B', [fanOut, lora.rank]],
    ] as const) {
      slots.push({ module, matrix, offset, shape: [shape[0], shape[1]], target: module.slice(module.lastIndexOf('.') + 1) });
      offset += shape[0] * shape[1];
    }
  }
  return { slots, total: offset, fanInFanOut: false };
}

function writePeft(out: string, lora: HfLora, layout: PeftLayout, adapter: Float32Array, baseModel?: string): { files: string[] } {
  if (adapter.length !== layout.total) throw new HfCheckpointError(`export: the adapter has ${adapter.length} values, the spec needs ${layout.total}`);
  const tensors: Array<[string, Tensor]> = [];
  const targetModules = new Set<string>();
  for (const s of layout.slots) {
    // the module's last two names match it alone (attn.c_proj, not mlp.c_proj)
    targetModules.add(s.module.split('.').slice(-2).join('.'));
    tensors.push([
      `base_model.model.${s.module}.lora_${s.matrix}.weight`,
      { shape: s.shape, data: adapter.slice(s.offset, s.offset + s.shape[0] * s.shape[1]) },
    ]);
  }
  const config = {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: baseModel ?? null,
    r: lora.rank,
    lora_alpha: lora.alpha,
    lora_dropout: 0,
    target_modules: [...targetModules],
    bias: 'none',
    // GPT-2's Conv1D weights are stored [in, out]
    fan_in_fan_out: layout.fanInFanOut,
    inference_mode: true,
  };
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(path.join(out, 'adapter_config.json'), JSON.stringify(config, null, 2) + '\n');
  fs.writeFileSync(path.join(out, 'adapter_model.safetensors'), writeSafetensors(tensors, 'F32', { format: 'pt' }));
  return { files: ['adapter_config.json', 'adapter_model.safetensors'] };
}

function readPeft(dir: string, lora: HfLora, layout: (what: string) => PeftLayout): Float32Array {
  const configFile = path.join(dir, 'adapter_config.json');
  const weightsFile = path.join(dir, 'adapter_model.safetensors');
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(fs.readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new HfCheckpointError(`${configFile}: cannot read (${(e as Error).message})`);
  }
  const { slots, total, fanInFanOut } = layout(configFile);
  const issues: string[] = [];
  const expect = (field: string, ok: boolean, want: string) => {
    if (!ok) issues.push(`${field}: ${JSON.stringify(config[field])}, the model's is ${want}`);
  };
  expect('peft_type', config.peft_type === 'LORA', '"LORA"');
  expect('r', config.r === lora.rank, String(lora.rank));
  expect('lora_alpha', config.lora_alpha === lora.alpha, String(lora.alpha));
  expect('fan_in_fan_out', Boolean(config.fan_in_fan_out) === fanInFanOut, String(fanInFanOut));
  expect('use_dora', !config.use_dora, 'false (DoRA is not LoRA)');
  expect('use_rslora', !config.use_rslora, 'false (rsLoRA scales by α/√r)');
  if (issues.length) throw new HfCheckpointError(`${configFile}: ${issues.join('; ')}`);
  let tensors: ReturnType<typeof readSafetensors>['tensors'];
  try {
    const b = fs.readFileSync(weightsFile);
    tensors = readSafetensors(new Uint8Array(b.buffer, b.byteOffset, b.byteLength), weightsFile).tensors;
  } catch (e) {
    if (e instanceof SafetensorsError) throw new HfCheckpointError(e.message);
    throw new HfCheckpointError(`${weightsFile}: cannot read (${(e as Error).message})`);
  }
  const adapter = new Float32Array(total);
  const used = new Set<string>();
  for (const s of slots) {
    // PEFT writes `base_model.model.<module>.lora_A.weight`; older versions name the adapter (`.lora_A.default.weight`)
    const names = [`base_model.model.${s.module}.lora_${s.matrix}.weight`, `base_model.model.${s.module}.lora_${s.matrix}.default.weight`];
    const name = names.find((n) => tensors.has(n));
    const t = name === undefined ? undefined : tensors.get(name);
    if (name === undefined || !t)
      throw new HfCheckpointError(`${weightsFile}: tensor ${names[0]} is missing (the model's lora.targets has ${JSON.stringify(s.target)})`);
    if (t.shape.length !== 2 || t.shape[0] !== s.shape[0] || t.shape[1] !== s.shape[1])
      throw new HfCheckpointError(`${weightsFile}: tensor ${name} has shape [${t.shape.join(', ')}], the model's is [${s.shape.join(', ')}]`);
    adapter.set(t.data, s.offset);
    used.add(name);
  }
  const extra = [...tensors.keys()].filter((n) => !used.has(n));
  if (extra.length)
    throw new HfCheckpointError(
      `${weightsFile}: tensor ${extra[0]} has no place in the model's adapter (lora.targets ${JSON.stringify(lora.targets)})${extra.length > 1 ? ` (+${extra.length - 1} more)` : ''}`,
    );
  return adapter;
}

export function exportPeftAdapter(out: string, spec: TransformerSpec, adapter: Float32Array, baseModel?: string): { files: string[] } {
  if (!spec.lora) throw new HfCheckpointError('export: not a LoRA model');
  return writePeft(out, spec.lora, familyLayout(spec, 'export'), adapter, baseModel);
}

/** A PEFT adapter directory (adapter_config.json + adapter_model.safetensors) as the adapter of LoRA spec `spec`. */
export function importPeftAdapter(dir: string, spec: TransformerSpec): Float32Array {
  const lora = spec.lora;
  if (!lora) throw new HfCheckpointError(`${dir}: the model is not a LoRA model`);
  return readPeft(dir, lora, (what) => familyLayout(spec, what));
}

/** An adapter over a transformers-layout model (`lora` of a spec with `hf`, `targets` the engine's layout of it) as a PEFT adapter directory. */
export function exportHfPeftAdapter(out: string, lora: HfLora, targets: readonly HfTarget[], adapter: Float32Array, baseModel?: string): { files: string[] } {
  return writePeft(out, lora, hfLayout(lora, targets), adapter, baseModel);
}

/** A PEFT adapter directory as the adapter of `lora` over a transformers-layout model whose targeted modules are `targets`. */
export function importHfPeftAdapter(dir: string, lora: HfLora, targets: readonly HfTarget[]): Float32Array {
  return readPeft(dir, lora, () => hfLayout(lora, targets));
}
