/**
 * A LoRA version (engines/families/transformer/lora.ts) as a PEFT adapter directory:
 * adapter_config.json + adapter_model.safetensors, keys
 * `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r], the modules named
 * as the base's Hugging Face layout names them (tensorMap: `model.layers.0.self_attn.q_proj` for
 * llama / qwen, `transformer.h.0.attn.c_proj` for GPT-2). PEFT's shapes are the adapter's own, so the
 * values are copied as they are. GPT-2 fuses q, k and v into c_attn, which has no adapter of its own
 * here: such targets are refused (the merged checkpoint carries them).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { adapterLayout, baseSpecOf } from '../families/transformer/lora';
import type { TransformerSpec } from '../families/transformer/spec';
import { hfConfigFor, parseHfConfig } from './hf-config';
import { HfCheckpointError, tensorMap } from './hf-layout';
import { writeSafetensors, type Tensor } from './safetensors';

export function exportPeftAdapter(out: string, spec: TransformerSpec, adapter: Float32Array, baseModel?: string): { files: string[] } {
  const lora = spec.lora;
  if (!lora) throw new HfCheckpointError('export: not a LoRA model');
  const { slots, total } = adapterLayout(spec);
  if (adapter.length !== total) throw new HfCheckpointError(`export: the adapter has ${adapter.length} values, the spec needs ${total}`);
  const { family: _family, ...options } = baseSpecOf(spec);
  const model = parseHfConfig(hfConfigFor(options, undefined, { qkv: false, o: false, mlp: false }), 'export config.json');
  const modules = new Map(
    tensorMap(model, options)
      .filter((e) => e.slots.length === 1 && e.name.endsWith('.weight'))
      .map((e) => [e.slots[0]!, e.name.slice(0, -'.weight'.length)]),
  );
  const tensors: Array<[string, Tensor]> = [];
  const targetModules = new Set<string>();
  for (const s of slots) {
    const module = modules.get(`l${s.layer}.w${s.target}`);
    if (!module)
      throw new HfCheckpointError(
        `export: LoRA target ${JSON.stringify(s.target)} has no weight of its own in the ${model.modelType} layout (it fuses q, k and v into c_attn); export the merged checkpoint instead`,
      );
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
    fan_in_fan_out: model.modelType === 'gpt2',
    inference_mode: true,
  };
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(path.join(out, 'adapter_config.json'), JSON.stringify(config, null, 2) + '\n');
  fs.writeFileSync(path.join(out, 'adapter_model.safetensors'), writeSafetensors(tensors, 'F32', { format: 'pt' }));
  return { files: ['adapter_config.json', 'adapter_model.safetensors'] };
}
