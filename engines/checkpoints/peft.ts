/**
 * A LoRA version (engines/families/transformer/lora.ts) as a PEFT adapter directory:
 * adapter_config.json + adapter_model.safetensors, keys
 * `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r], the modules named
 * as the base's Hugging Face layout names them (tensorMap: `model.layers.0.self_attn.q_proj` for
 * llama / qwen, `transformer.h.0.attn.c_proj` for GPT-2). PEFT's shapes are the adapter's own, so the
 * values are copied as they are. GPT-2 fuses q, k and v into c_attn, which has no adapter of its own
 * here: such targets are refused (the merged checkpoint carries them).
 *
 * importPeftAdapter reads such a directory back into an adapter of a LoRA spec (a PEFT adapter as a
 * model's version 0): its r, lora_alpha, target modules and orientation must be the spec's, and every
 * tensor present with its shape; anything else is an HfCheckpointError naming the file and the field.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { adapterLayout, baseSpecOf } from '../families/transformer/lora';
import type { TransformerSpec } from '../families/transformer/spec';
import { hfConfigFor, parseHfConfig } from './hf-config';
import { HfCheckpointError, tensorMap } from './hf-layout';
import { readSafetensors, SafetensorsError, writeSafetensors, type Tensor } from './safetensors';

/** The Hugging Face module of each targeted matrix (`l0.wq` → `model.layers.0.self_attn.q_proj`), and the layout's model type. */
function adapterModules(spec: TransformerSpec): { modelType: string; modules: Map<string, string> } {
  const { family: _family, ...options } = baseSpecOf(spec);
  const model = parseHfConfig(hfConfigFor(options, undefined, { qkv: false, o: false, mlp: false }), 'export config.json');
  const modules = new Map(
    tensorMap(model, options)
      .filter((e) => e.slots.length === 1 && e.name.endsWith('.weight'))
      .map((e) => [e.slots[0]!, e.name.slice(0, -'.weight'.length)]),
  );
  return { modelType: model.modelType, modules };
}

function moduleOf(modules: Map<string, string>, modelType: string, layer: number, target: string, what: string): string {
  const module = modules.get(`l${layer}.w${target}`);
  if (!module)
    throw new HfCheckpointError(
      `${what}: LoRA target ${JSON.stringify(target)} has no weight of its own in the ${modelType} layout (it fuses q, k and v into c_attn); export the merged checkpoint instead`,
    );
  return module;
}

export function exportPeftAdapter(out: string, spec: TransformerSpec, adapter: Float32Array, baseModel?: string): { files: string[] } {
  const lora = spec.lora;
  if (!lora) throw new HfCheckpointError('export: not a LoRA model');
  const { slots, total } = adapterLayout(spec);
  if (adapter.length !== total) throw new HfCheckpointError(`export: the adapter has ${adapter.length} values, the spec needs ${total}`);
  const { modelType, modules } = adapterModules(spec);
  const tensors: Array<[string, Tensor]> = [];
  const targetModules = new Set<string>();
  for (const s of slots) {
    const module = moduleOf(modules, modelType, s.layer, s.target, 'export');
    // the module's last two names match it alone (attn.c_proj, not mlp.c_proj)
    targetModules.add(module.split('.').slice(-2).join('.'));
    tensors.push([`base_model.model.${module}.lora_${s.matrix}.weight`, { shape: s.shape, data: adapter.slice(s.offset, s.offset + s.size) }]);
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
    fan_in_fan_out: modelType === 'gpt2',
    inference_mode: true,
  };
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(path.join(out, 'adapter_config.json'), JSON.stringify(config, null, 2) + '\n');
  fs.writeFileSync(path.join(out, 'adapter_model.safetensors'), writeSafetensors(tensors, 'F32', { format: 'pt' }));
  return { files: ['adapter_config.json', 'adapter_model.safetensors'] };
}

/** A PEFT adapter directory (adapter_config.json + adapter_model.safetensors) as the adapter of LoRA spec `spec`. */
export function importPeftAdapter(dir: string, spec: TransformerSpec): Float32Array {
  const lora = spec.lora;
  if (!lora) throw new HfCheckpointError(`${dir}: the model is not a LoRA model`);
  const configFile = path.join(dir, 'adapter_config.json');
  const weightsFile = path.join(dir, 'adapter_model.safetensors');
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(fs.readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new HfCheckpointError(`${configFile}: cannot read (${(e as Error).message})`);
  }
  const { modelType, modules } = adapterModules(spec);
  const issues: string[] = [];
  const expect = (field: string, ok: boolean, want: string) => {
    if (!ok) issues.push(`${field}: ${JSON.stringify(config[field])}, the model's is ${want}`);
  };
  expect('peft_type', config.peft_type === 'LORA', '"LORA"');
  expect('r', config.r === lora.rank, String(lora.rank));
  expect('lora_alpha', config.lora_alpha === lora.alpha, String(lora.alpha));
  expect('fan_in_fan_out', Boolean(config.fan_in_fan_out) === (modelType === 'gpt2'), String(modelType === 'gpt2'));
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
  const { slots, total } = adapterLayout(spec);
  const adapter = new Float32Array(total);
  const used = new Set<string>();
  for (const s of slots) {
    const module = moduleOf(modules, modelType, s.layer, s.target, configFile);
    // PEFT writes `base_model.model.<module>.lora_A.weight`; older versions name the adapter (`.lora_A.default.weight`)
    const names = [`base_model.model.${module}.lora_${s.matrix}.weight`, `base_model.model.${module}.lora_${s.matrix}.default.weight`];
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
