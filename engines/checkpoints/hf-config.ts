/**
 * Hugging Face `config.json` ↔ transformer family options. Model types
 * `gpt2`, `llama`, `qwen2` and `qwen3`; anything the family cannot compute exactly
 * (another activation, rope scaling, sliding windows, …) is refused with a
 * `HfConfigError` naming the config.json field, so a loaded checkpoint is
 * never silently a different model.
 */
import { TRANSFORMER_LIMITS, type TransformerSpec } from '../families/transformer/spec';

export const HF_MODEL_TYPES = ['gpt2', 'llama', 'qwen2', 'qwen3'] as const;
export type HfModelType = (typeof HF_MODEL_TYPES)[number];

export class HfConfigError extends Error {
  constructor(
    file: string,
    readonly issues: ReadonlyArray<{ field: string; message: string }>,
  ) {
    super(`${file}: ${issues.map((i) => `${i.field}: ${i.message}`).join('; ')}`);
    this.name = 'HfConfigError';
  }
}

/** What a config maps to: the family's options plus which projections really have biases (the rest are zero). */
export interface HfModel {
  modelType: HfModelType;
  /** transformer options (vocabSize included), ready for normalizeTransformerSpec; no headDim when heads do not divide the width (normalize names it) */
  options: Omit<TransformerSpec, 'family' | 'headDim'> & { headDim?: number };
  /** projections with biases in the checkpoint; with options.bias the others are loaded as zeros */
  biases: { qkv: boolean; o: boolean; mlp: boolean };
}

type Config = Record<string, unknown>;

export function parseHfConfig(config: unknown, file = 'config.json'): HfModel {
  const issues: Array<{ field: string; message: string }> = [];
  const bad = (field: string, message: string) => issues.push({ field, message });
  if (typeof config !== 'object' || config === null || Array.isArray(config))
    throw new HfConfigError(file, [{ field: '(root)', message: 'must be a JSON object' }]);
  const c = config as Config;
  const int = (field: string, fallback?: number): number => {
    const v = c[field] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      bad(field, v === undefined ? 'required' : `must be a positive integer, got ${JSON.stringify(v)}`);
      return 1;
    }
    return v;
  };
  const num = (field: string, fallback: number): number => {
    const v = c[field] ?? fallback;
    if (typeof v !== 'number' || !(v > 0)) {
      bad(field, `must be a positive number, got ${JSON.stringify(v)}`);
      return fallback;
    }
    return v;
  };
  const flag = (field: string, fallback: boolean): boolean => {
    const v = c[field] ?? fallback;
    if (typeof v !== 'boolean') {
      bad(field, `must be true or false, got ${JSON.stringify(v)}`);
      return fallback;
    }
    return v;
  };
  const refuse = (field: string, ok: (v: unknown) => boolean, why: string) => {
    if (field in c && !ok(c[field])) bad(field, `${JSON.stringify(c[field])} is not supported: ${why}`);
  };
  // newer transformers write rope_theta inside rope_parameters: read there, or the default would be silently another model
  const ropeTheta = (): number => {
    const rp = c.rope_parameters;
    if (rp == null) return num('rope_theta', 10_000);
    const p = rp as Config;
    const plain =
      typeof rp === 'object' &&
      !Array.isArray(rp) &&
      (p.rope_type ?? 'default') === 'default' &&
      Object.keys(p).every((k) => k === 'rope_type' || k === 'rope_theta') &&
      typeof p.rope_theta === 'number' &&
      p.rope_theta > 0 &&
      (c.rope_theta == null || c.rope_theta === p.rope_theta);
    if (!plain) bad('rope_parameters', `${JSON.stringify(rp)} is not supported: only {"rope_type": "default", "rope_theta": θ} agreeing with rope_theta`);
    return plain ? (p.rope_theta as number) : 10_000;
  };
  // given explicitly, so a spec and its normalized JSON normalize to the same key order
  const evenHeads = (width: number, heads: number) => (width % heads === 0 ? { headDim: width / heads } : {});
  const modelType = c.model_type;
  if (!HF_MODEL_TYPES.includes(modelType as HfModelType)) {
    throw new HfConfigError(file, [
      { field: 'model_type', message: `${JSON.stringify(modelType)} is not supported (supported: ${HF_MODEL_TYPES.join(', ')})` },
    ]);
  }
  let model: HfModel;
  if (c.model_type === 'gpt2') {
    const width = int('n_embd');
    refuse('activation_function', (v) => v === 'gelu_new', "only GPT-2's tanh GELU (gelu_new) is implemented");
    refuse('scale_attn_weights', (v) => v === true, 'attention is always scaled by 1/√headDim');
    refuse('scale_attn_by_inverse_layer_idx', (v) => v === false, 'per-layer attention scaling is not implemented');
    const positions = int('n_positions');
    const heads = int('n_head');
    model = {
      modelType: 'gpt2',
      options: {
        vocabSize: int('vocab_size'),
        width,
        layers: int('n_layer'),
        heads,
        kvHeads: heads,
        ...evenHeads(width, heads),
        mlpWidth: c.n_inner == null ? 4 * width : int('n_inner'),
        positions: 'learned',
        ropeTheta: 10_000,
        norm: 'layernorm',
        normEps: num('layer_norm_epsilon', 1e-5),
        qkNorm: false,
        mlp: 'gelu',
        bias: true,
        tiedHead: flag('tie_word_embeddings', true),
        maxSeq: positions,
      },
      biases: { qkv: true, o: true, mlp: true },
    };
    if (positions > TRANSFORMER_LIMITS.maxSeq) bad('n_positions', `must be ≤ ${TRANSFORMER_LIMITS.maxSeq} (learned positions are stored for every one)`);
  } else {
    const modelType = c.model_type as 'llama' | 'qwen2' | 'qwen3';
    const qwen3 = modelType === 'qwen3';
    const heads = int('num_attention_heads');
    const width = int('hidden_size');
    refuse('hidden_act', (v) => v === 'silu', 'only SwiGLU (silu) MLPs are implemented');
    refuse('rope_scaling', (v) => v === null, 'rope scaling is not implemented');
    if (!qwen3) refuse('head_dim', (v) => v === null || v === width / heads, `the head dimension must be hidden_size / num_attention_heads = ${width / heads}`);
    refuse('partial_rotary_factor', (v) => v === 1, 'rope on every head dimension only');
    refuse('use_sliding_window', (v) => v === false, 'sliding-window attention is not implemented');
    refuse(
      'layer_types',
      (v) => v === null || (Array.isArray(v) && v.every((t) => t === 'full_attention')),
      'sliding-window attention is not implemented (every layer must be full_attention)',
    );
    // Llama's and Qwen3's attention_bias covers q/k/v and o_proj; Qwen2 has q/k/v biases only
    const attentionBias = modelType === 'qwen2' ? true : flag('attention_bias', false);
    const mlpBias = modelType === 'llama' ? flag('mlp_bias', false) : false;
    model = {
      modelType,
      options: {
        vocabSize: int('vocab_size'),
        width,
        layers: int('num_hidden_layers'),
        heads,
        kvHeads: int('num_key_value_heads', heads),
        // Qwen3's head dimension is its own field (transformers' default 128), with q/k RMSNorm per head
        ...(qwen3 ? { headDim: int('head_dim', 128) } : evenHeads(width, heads)),
        mlpWidth: int('intermediate_size'),
        positions: 'rope',
        ropeTheta: ropeTheta(),
        norm: 'rmsnorm',
        normEps: num('rms_norm_eps', 1e-6),
        qkNorm: qwen3,
        mlp: 'swiglu',
        bias: attentionBias || mlpBias,
        tiedHead: flag('tie_word_embeddings', false),
        // rope has no table, so the family's bound applies; teams may ask for less
        maxSeq: Math.min(int('max_position_embeddings', 2048), TRANSFORMER_LIMITS.maxSeq),
      },
      biases: { qkv: attentionBias, o: modelType !== 'qwen2' && attentionBias, mlp: mlpBias },
    };
  }
  if (issues.length > 0) throw new HfConfigError(file, issues);
  return model;
}

/**
 * The config.json for options, starting from the source checkpoint's config
 * when there is one (its other fields — token ids, torch_dtype, architectures —
 * stay). `biases` says which biases are non-zero: Qwen2 cannot hold an o_proj
 * or MLP bias, so such weights are written as Llama with both bias flags.
 * q/k norms are written as Qwen3 (the one layout with them).
 */
export function hfConfigFor(options: Omit<TransformerSpec, 'family'>, base: Config | undefined, nonZero: HfModel['biases']): Config {
  const o = options;
  if (o.qkNorm) {
    if (o.positions !== 'rope' || o.norm !== 'rmsnorm' || o.mlp !== 'swiglu')
      throw new Error('export: q/k norms are written as qwen3, which needs rope, rmsnorm and swiglu');
    return {
      ...(base?.model_type === 'qwen3' ? base : { architectures: ['Qwen3ForCausalLM'], hidden_act: 'silu' }),
      model_type: 'qwen3',
      ...ropeFields(o, base),
      head_dim: o.headDim,
      attention_bias: nonZero.qkv || nonZero.o,
    };
  }
  if (o.headDim * o.heads !== o.width) throw new Error(`export: headDim ${o.headDim} ≠ width / heads is written only as qwen3, which needs qkNorm`);
  if (o.positions === 'learned') {
    if (o.norm !== 'layernorm' || o.mlp !== 'gelu' || !o.bias || o.kvHeads !== o.heads)
      throw new Error('export: learned positions are written as gpt2, which needs layernorm, gelu, biases and kvHeads = heads');
    return {
      ...(base?.model_type === 'gpt2' ? base : { architectures: ['GPT2LMHeadModel'], activation_function: 'gelu_new' }),
      model_type: 'gpt2',
      vocab_size: o.vocabSize,
      n_embd: o.width,
      n_layer: o.layers,
      n_head: o.heads,
      n_inner: o.mlpWidth,
      n_positions: o.maxSeq,
      n_ctx: o.maxSeq,
      layer_norm_epsilon: o.normEps,
      tie_word_embeddings: o.tiedHead,
    };
  }
  if (o.norm !== 'rmsnorm' || o.mlp !== 'swiglu') throw new Error('export: rope models are written as llama/qwen2, which need rmsnorm and swiglu');
  const asQwen2 = base?.model_type === 'qwen2' && !nonZero.o && !nonZero.mlp;
  const sameFamily = base?.model_type === (asQwen2 ? 'qwen2' : 'llama');
  const out: Config = {
    ...(sameFamily ? base : { architectures: [asQwen2 ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'], hidden_act: 'silu' }),
    model_type: asQwen2 ? 'qwen2' : 'llama',
    ...ropeFields(o, base),
  };
  if (!asQwen2) {
    out.attention_bias = nonZero.qkv || nonZero.o;
    out.mlp_bias = nonZero.mlp;
    if (!sameFamily) out.architectures = ['LlamaForCausalLM'];
  }
  return out;
}

/** The shape fields every rope layout (llama, qwen2, qwen3) writes alike. */
function ropeFields(o: Omit<TransformerSpec, 'family'>, base: Config | undefined): Config {
  return {
    vocab_size: o.vocabSize,
    hidden_size: o.width,
    num_hidden_layers: o.layers,
    num_attention_heads: o.heads,
    num_key_value_heads: o.kvHeads,
    intermediate_size: o.mlpWidth,
    rope_theta: o.ropeTheta,
    rms_norm_eps: o.normEps,
    tie_word_embeddings: o.tiedHead,
    max_position_embeddings: typeof base?.max_position_embeddings === 'number' ? base.max_position_embeddings : o.maxSeq,
  };
}
