/**
 * A Hugging Face-layout model directory ↔ a transformer spec + flat θ
 * (spec.ts's paramLayout). Reads config.json, model.safetensors or a sharded
 * model.safetensors.index.json; writes the same layout back, with the
 * tokenizer files of the source directory copied, so a trained version can be
 * served by transformers / vLLM / SGLang.
 *
 * One table (`tensorMap`) says which checkpoint tensor fills which θ slots, so
 * load and export cannot disagree. HF linear weights are [out, in] and θ's are
 * [in, out] (transposed); GPT-2's Conv1D weights are already [in, out] and its
 * fused c_attn is split by columns into wq, wk, wv.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec } from '../families/transformer/spec';
import { hfConfigFor, parseHfConfig, type HfModel } from './hf-config';
import { readSafetensors, representable, SafetensorsError, writeSafetensors, type Dtype, type SafetensorsFile, type Tensor } from './safetensors';

export class HfCheckpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HfCheckpointError';
  }
}

interface Entry {
  name: string;
  /** the tensor's shape in the checkpoint */
  shape: number[];
  /** θ slots it fills, concatenated along the last dimension */
  slots: string[];
  /** stored [out, in]; θ holds [in, out] */
  transpose: boolean;
}

/** Buffers some writers include that are not parameters (causal masks, rope tables). */
const IGNORED = /(^|\.)attn\.(bias|masked_bias)$|rotary_emb\.inv_freq$/;

export function tensorMap(model: HfModel, s: Omit<TransformerSpec, 'family'>): Entry[] {
  const D = s.width;
  const hd = s.headDim;
  const entries: Entry[] = [];
  const add = (name: string, shape: number[], slots: string[], transpose = false) => entries.push({ name, shape, slots, transpose });
  if (model.modelType === 'gpt2') {
    const p = 'transformer.';
    add(`${p}wte.weight`, [s.vocabSize, D], ['tok_emb']);
    add(`${p}wpe.weight`, [s.maxSeq, D], ['pos_emb']);
    for (let l = 0; l < s.layers; l++) {
      const h = `${p}h.${l}.`;
      const L = `l${l}.`;
      add(`${h}ln_1.weight`, [D], [`${L}ln1_g`]);
      add(`${h}ln_1.bias`, [D], [`${L}ln1_b`]);
      add(`${h}attn.c_attn.weight`, [D, 3 * D], [`${L}wq`, `${L}wk`, `${L}wv`]);
      add(`${h}attn.c_attn.bias`, [3 * D], [`${L}bq`, `${L}bk`, `${L}bv`]);
      add(`${h}attn.c_proj.weight`, [D, D], [`${L}wo`]);
      add(`${h}attn.c_proj.bias`, [D], [`${L}bo`]);
      add(`${h}ln_2.weight`, [D], [`${L}ln2_g`]);
      add(`${h}ln_2.bias`, [D], [`${L}ln2_b`]);
      add(`${h}mlp.c_fc.weight`, [D, s.mlpWidth], [`${L}w1`]);
      add(`${h}mlp.c_fc.bias`, [s.mlpWidth], [`${L}b1`]);
      add(`${h}mlp.c_proj.weight`, [s.mlpWidth, D], [`${L}w2`]);
      add(`${h}mlp.c_proj.bias`, [D], [`${L}b2`]);
    }
    add(`${p}ln_f.weight`, [D], ['lnf_g']);
    add(`${p}ln_f.bias`, [D], ['lnf_b']);
  } else {
    add('model.embed_tokens.weight', [s.vocabSize, D], ['tok_emb']);
    for (let l = 0; l < s.layers; l++) {
      const h = `model.layers.${l}.`;
      const L = `l${l}.`;
      add(`${h}input_layernorm.weight`, [D], [`${L}ln1_g`]);
      const proj = (name: string, slot: string, out: number, inp: number, bias: boolean) => {
        add(`${h}${name}.weight`, [out, inp], [`${L}w${slot}`], true);
        if (bias) add(`${h}${name}.bias`, [out], [`${L}b${slot}`]);
      };
      proj('self_attn.q_proj', 'q', s.heads * hd, D, model.biases.qkv);
      proj('self_attn.k_proj', 'k', s.kvHeads * hd, D, model.biases.qkv);
      proj('self_attn.v_proj', 'v', s.kvHeads * hd, D, model.biases.qkv);
      if (s.qkNorm) {
        add(`${h}self_attn.q_norm.weight`, [hd], [`${L}lnq_g`]);
        add(`${h}self_attn.k_norm.weight`, [hd], [`${L}lnk_g`]);
      }
      proj('self_attn.o_proj', 'o', D, s.heads * hd, model.biases.o);
      add(`${h}post_attention_layernorm.weight`, [D], [`${L}ln2_g`]);
      proj('mlp.gate_proj', 'g', s.mlpWidth, D, model.biases.mlp);
      proj('mlp.up_proj', 'u', s.mlpWidth, D, model.biases.mlp);
      proj('mlp.down_proj', 'd', D, s.mlpWidth, model.biases.mlp);
    }
    add('model.norm.weight', [D], ['lnf_g']);
  }
  if (!s.tiedHead) add('lm_head.weight', [s.vocabSize, D], ['head'], true);
  return entries;
}

/** A checkpoint's tensor name as tensorMap spells it (GPT-2 files often omit `transformer.`). */
function canonicalName(model: HfModel, name: string): string {
  return model.modelType === 'gpt2' && !name.startsWith('transformer.') && name !== 'lm_head.weight' ? `transformer.${name}` : name;
}

export interface HfCheckpoint {
  dir: string;
  model: HfModel;
  spec: TransformerSpec;
  theta: Float32Array;
  /** config.json as read */
  config: Record<string, unknown>;
  /** dtype of the weights files (the first tensor's) */
  dtype: Dtype;
}

function readJson(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new HfCheckpointError(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HfCheckpointError(`${file}: not JSON (${(e as Error).message})`);
  }
}

/** One weights file, read and validated; what is wrong with it (unreadable, truncated, malformed) is an HfCheckpointError naming the file. */
function readWeightsFile(file: string): SafetensorsFile {
  let b: Buffer;
  try {
    b = fs.readFileSync(file);
  } catch (e) {
    throw new HfCheckpointError(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  try {
    return readSafetensors(new Uint8Array(b.buffer, b.byteOffset, b.byteLength), file);
  } catch (e) {
    if (e instanceof SafetensorsError) throw new HfCheckpointError(e.message);
    throw e;
  }
}

/** The weights files of dir: model.safetensors, or the shards its index names (each checked to hold what the index says). */
function readWeights(dir: string): { tensors: Map<string, Tensor & { dtype: Dtype }> } {
  const single = path.join(dir, 'model.safetensors');
  const indexFile = path.join(dir, 'model.safetensors.index.json');
  if (fs.existsSync(single)) return readWeightsFile(single);
  if (!fs.existsSync(indexFile))
    throw new HfCheckpointError(
      `${dir}: neither model.safetensors nor model.safetensors.index.json (PyTorch .bin weights are not read: convert them to safetensors)`,
    );
  const index = readJson(indexFile);
  const map = index.weight_map as Record<string, unknown> | undefined;
  if (typeof map !== 'object' || map === null) throw new HfCheckpointError(`${indexFile}: weight_map must be an object of tensor name → file`);
  const shards = new Set(Object.values(map));
  for (const shard of shards) {
    if (typeof shard !== 'string' || shard.includes('/') || shard.includes('\\'))
      throw new HfCheckpointError(`${indexFile}: weight_map: ${JSON.stringify(shard)} is not a file name in ${dir}`);
  }
  const tensors = new Map<string, Tensor & { dtype: Dtype }>();
  for (const shard of shards as Set<string>) {
    const file = path.join(dir, shard);
    for (const [name, t] of readWeightsFile(file).tensors) {
      if (map[name] !== shard) throw new HfCheckpointError(`${file}: tensor ${name} is not listed for this shard in ${indexFile}`);
      tensors.set(name, t);
    }
  }
  for (const name of Object.keys(map)) if (!tensors.has(name)) throw new HfCheckpointError(`${indexFile}: tensor ${name} is missing from ${map[name]}`);
  return { tensors };
}

/** Load dir (config.json + safetensors weights) as a transformer spec and θ; maxSeq may lower a rope model's context bound. */
export function loadHfCheckpoint(dir: string, opts: { maxSeq?: number } = {}): HfCheckpoint {
  const configFile = path.join(dir, 'config.json');
  const config = readJson(configFile);
  const model = parseHfConfig(config, configFile);
  if (opts.maxSeq !== undefined && model.options.positions === 'rope') model.options.maxSeq = Math.min(model.options.maxSeq, opts.maxSeq);
  const spec = normalizeTransformerSpec({ family: 'transformer', ...model.options }, configFile);
  const layout = paramLayout(spec);
  const slots = new Map(layout.slots.map((s) => [s.name, s]));
  const theta = new Float32Array(layout.total);
  const { tensors } = readWeights(dir);
  const byName = new Map([...tensors].map(([n, t]) => [canonicalName(model, n), t]));
  const entries = tensorMap(model, spec);
  const used = new Set<string>();
  for (const e of entries) {
    const t = byName.get(e.name);
    if (!t) throw new HfCheckpointError(`${dir}: tensor ${e.name} is missing (config.json model_type ${model.modelType})`);
    if (t.shape.join() !== e.shape.join()) throw new HfCheckpointError(`${dir}: tensor ${e.name} has shape [${t.shape}], config.json implies [${e.shape}]`);
    used.add(e.name);
    scatter(
      e,
      t.data,
      e.slots.map((n) => slots.get(n)!),
      theta,
    );
  }
  // a tied head may also be stored; anything else unread would be a different model
  for (const name of byName.keys()) {
    if (used.has(name) || IGNORED.test(name) || (spec.tiedHead && name === 'lm_head.weight')) continue;
    throw new HfCheckpointError(`${dir}: tensor ${name} has no place in a ${model.modelType} transformer of this config`);
  }
  return { dir, model, spec, theta, config, dtype: tensors.values().next().value?.dtype ?? 'F32' };
}

/** Rows × columns of a tensor seen as a matrix (vectors are one row). */
function matrix(shape: number[]): [number, number] {
  return shape.length === 1 ? [1, shape[0]!] : [shape[0]!, shape[1]!];
}

/** Copy a checkpoint tensor into its θ slots. */
function scatter(e: Entry, data: Float32Array, slots: Array<{ offset: number; size: number; shape: number[] }>, theta: Float32Array) {
  const [rows, cols] = matrix(e.shape);
  if (e.transpose) {
    const s = slots[0]!; // θ [in = cols, out = rows]
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) theta[s.offset + c * rows + r] = data[r * cols + c]!;
    return;
  }
  let col = 0;
  for (const s of slots) {
    const w = s.size / rows;
    for (let r = 0; r < rows; r++) theta.set(data.subarray(r * cols + col, r * cols + col + w), s.offset + r * w);
    col += w;
  }
}

/** The inverse of scatter. */
function gather(e: Entry, slots: Array<{ offset: number; size: number }>, theta: Float32Array): Float32Array {
  const [rows, cols] = matrix(e.shape);
  const data = new Float32Array(rows * cols);
  if (e.transpose) {
    const s = slots[0]!;
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) data[r * cols + c] = theta[s.offset + c * rows + r]!;
    return data;
  }
  let col = 0;
  for (const s of slots) {
    const w = s.size / rows;
    for (let r = 0; r < rows; r++) data.set(theta.subarray(s.offset + r * w, s.offset + (r + 1) * w), r * cols + col);
    col += w;
  }
  return data;
}

/** Files of a source directory that describe the tokenizer and generation, copied as they are. */
export const TOKENIZER_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'generation_config.json',
  'vocab.json',
  'merges.txt',
  'chat_template.jinja',
];

const TORCH_DTYPE: Record<string, Dtype> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' };
const TORCH_NAME: Record<Dtype, string> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16', F64: 'float64' };

/**
 * Write spec + θ as an HF-layout directory: config.json (the source's, with
 * the shape fields rewritten), model.safetensors in the source dtype when every
 * value fits it exactly (else F32), and the source's tokenizer files.
 */
export function exportHfCheckpoint(
  out: string,
  spec: TransformerSpec,
  theta: Float32Array,
  source?: { dir: string; config: Record<string, unknown> },
): { files: string[]; dtype: Dtype } {
  const layout = paramLayout(spec);
  if (theta.length !== layout.total) throw new HfCheckpointError(`export: θ has ${theta.length} values, the spec needs ${layout.total}`);
  const slots = new Map(layout.slots.map((s) => [s.name, s]));
  const nonZero = (pattern: RegExp) => layout.slots.some((s) => pattern.test(s.name) && theta.subarray(s.offset, s.offset + s.size).some((x) => x !== 0));
  const { family: _family, ...options } = spec;
  const config = hfConfigFor(options, source?.config, { qkv: nonZero(/\.b[qkv]$/), o: nonZero(/\.bo$/), mlp: nonZero(/\.b[gud12]$/) });
  const model = parseHfConfig(config, 'export config.json');
  const entries = tensorMap(model, spec);
  const covered = new Set(entries.flatMap((e) => e.slots));
  for (const s of layout.slots) {
    if (!covered.has(s.name) && theta.subarray(s.offset, s.offset + s.size).some((x) => x !== 0))
      throw new HfCheckpointError(`export: ${s.name} is non-zero but ${model.modelType} has no such tensor`);
  }
  const tensors: Array<[string, Tensor]> = entries.map((e) => [
    e.name,
    {
      shape: e.shape,
      data: gather(
        e,
        e.slots.map((n) => slots.get(n)!),
        theta,
      ),
    },
  ]);
  const wanted = TORCH_DTYPE[String(config.torch_dtype)] ?? 'F32';
  const dtype = tensors.every(([, t]) => representable(t.data, wanted)) ? wanted : 'F32';
  config.torch_dtype = TORCH_NAME[dtype];
  fs.mkdirSync(out, { recursive: true });
  const files = ['config.json', 'model.safetensors'];
  fs.writeFileSync(path.join(out, 'config.json'), JSON.stringify(config, null, 2) + '\n');
  fs.writeFileSync(path.join(out, 'model.safetensors'), writeSafetensors(tensors, dtype, { format: 'pt' }));
  if (source) files.push(...copyTokenizerFiles(source.dir, out));
  return { files, dtype };
}

/** Copies the tokenizer files of `dir` that `out` does not have yet; returns their names. */
export function copyTokenizerFiles(dir: string, out: string): string[] {
  return TOKENIZER_FILES.filter((f) => {
    const from = path.join(dir, f);
    if (!fs.existsSync(from) || fs.existsSync(path.join(out, f))) return false;
    fs.copyFileSync(from, path.join(out, f));
    return true;
  });
}

/** A spec that names a checkpoint: the engines' InitModel form `{family: "transformer", checkpoint: "/abs/dir", maxSeq?}`. */
export interface CheckpointSpec {
  dir: string;
  maxSeq?: number;
}

/**
 * The checkpoint a spec input names (engine.proto: a "transformer" config with `checkpoint`), or undefined;
 * the shape comes from its config.json, so any other option is refused naming it (as engines/pytorch/checkpoint.py).
 */
export function checkpointSpecOf(input: unknown, prefix = 'spec'): CheckpointSpec | undefined {
  if (typeof input !== 'object' || input === null || !('checkpoint' in input)) return undefined;
  const o = input as Record<string, unknown>;
  if (o.family !== 'transformer') return undefined;
  const issues: string[] = [];
  if (typeof o.checkpoint !== 'string' || !path.isAbsolute(o.checkpoint))
    issues.push(`${prefix}.checkpoint: must be an absolute directory path, got ${JSON.stringify(o.checkpoint)}`);
  for (const [k, v] of Object.entries(o))
    if (!['checkpoint', 'maxSeq', 'family', 'vocabSize'].includes(k) && v !== undefined)
      issues.push(`${prefix}.${k}: comes from the checkpoint's config.json; leave it out`);
  const m = o.maxSeq;
  if (m !== undefined && !(Number.isInteger(m) && (m as number) >= 1)) issues.push(`${prefix}.maxSeq: must be a positive integer, got ${JSON.stringify(m)}`);
  if (issues.length) throw new HfCheckpointError(issues.join('; '));
  return { dir: o.checkpoint as string, ...(m !== undefined ? { maxSeq: m as number } : {}) };
}
