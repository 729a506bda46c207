/**
 * The "transformer" policy family: a decoder-only transformer whose options
 * express both the GPT-2 layout (learned positions, LayerNorm, GELU, biases,
 * tied head) and the Llama/Qwen layout (RoPE, RMSNorm, SwiGLU, grouped-query
 * attention, no biases, untied head; Qwen3 adds a free head dimension and
 * per-head q/k RMSNorm). This file holds the config (zod, errors
 * by field path), its defaults and limits, and the flat parameter layout θ
 * shared by every graph, the reference, init and the weights format.
 */
import { z } from 'zod';
import { issuesFromZod, type FieldIssue } from '../../../infra/issues';
import { lazily } from '../../../infra/lazily';
import { ModelSpecError } from '../model-family';

export const POSITIONS = ['learned', 'rope'] as const;
export const NORMS = ['layernorm', 'rmsnorm'] as const;
export const MLPS = ['gelu', 'swiglu'] as const;

/** Per-field bounds keep a typo from allocating gigabytes inside the engine. */
export const TRANSFORMER_LIMITS = {
  vocabSize: 262_144,
  width: 8192,
  layers: 128,
  heads: 256,
  headDim: 1024,
  mlpWidth: 65_536,
  maxSeq: 32_768,
  /**
   * A typo's bound, not a fit: whether a spec fits is the engine's memory check (memory.ts, its --memory-bytes),
   * which refuses it naming the field. 1e10 admits the checkpoints users train (Qwen2.5-1.5B, 7B).
   */
  params: 10_000_000_000,
  /** LoRA rank r */
  loraRank: 4096,
};

/**
 * LoRA target names: the linear maps of one layer, by their slot names in paramLayout (`l0.wq` is target `q`).
 * GELU MLPs have `1` (up) and `2` (down); SwiGLU MLPs `g` (gate), `u` (up) and `d` (down).
 */
export const LORA_TARGETS = ['q', 'k', 'v', 'o', '1', '2', 'g', 'u', 'd'] as const;

const count = (max: number, min = 1) => z.number().int('must be an integer').min(min, `must be ≥ ${min}`).max(max, `must be ≤ ${max}`);
const oneOf = <T extends string>(values: readonly T[]) =>
  z.enum(values as unknown as [T, ...T[]], { error: (iss) => `unknown option ${JSON.stringify(iss.input)}; known: ${values.join(', ')}` });

const schema = lazily(() =>
  z
    .object({
      family: z.literal('transformer').default('transformer'),
      /** V: token ids are 0..V−1 (the team's tokenizer). */
      vocabSize: count(TRANSFORMER_LIMITS.vocabSize, 2),
      /** D: residual stream width. */
      width: count(TRANSFORMER_LIMITS.width).default(128),
      layers: count(TRANSFORMER_LIMITS.layers).default(2),
      /** query heads. */
      heads: count(TRANSFORMER_LIMITS.heads).default(4),
      /** key/value heads (grouped-query attention when < heads); default = heads. */
      kvHeads: count(TRANSFORMER_LIMITS.heads).optional(),
      /** hd: width of one attention head; default width / heads (Qwen3 sets it freely: q/k/v are heads·hd wide). */
      headDim: count(TRANSFORMER_LIMITS.headDim).optional(),
      /** F: MLP hidden width; default 4·width. */
      mlpWidth: count(TRANSFORMER_LIMITS.mlpWidth).optional(),
      positions: oneOf(POSITIONS).default('learned'),
      /** RoPE base θ: frequencies θ^(−2i/headDim). */
      ropeTheta: z.number().gt(1, 'must be > 1').default(10_000),
      norm: oneOf(NORMS).default('layernorm'),
      normEps: z.number().gt(0, 'must be > 0').max(1, 'must be ≤ 1').default(1e-5),
      /** RMSNorm (gain [hd], eps normEps) of every query and key head after its projection, before RoPE (Qwen3). */
      qkNorm: z.boolean().default(false),
      mlp: oneOf(MLPS).default('gelu'),
      /** biases on the q/k/v/o and MLP projections (GPT-2: yes, Llama: no). */
      bias: z.boolean().default(true),
      /** output head = token embeddingᵀ. */
      tiedHead: z.boolean().default(true),
      /** longest sequence (context + generated tokens) the model accepts: at least a context token and a generated one. */
      maxSeq: count(TRANSFORMER_LIMITS.maxSeq, 2).default(256),
      /**
       * A LoRA model (engines/families/transformer/lora.ts): these fields are its frozen base's, the version
       * bytes are the adapter's A and B only. The base's version 0 is drawn from `baseSeed` (the run sets it
       * to the base model's init seed), or is the Hugging Face directory `baseCheckpoint`.
       */
      lora: lazyLora(),
    })
    .strict(),
);

/** The `lora` object, its targets of the given kind. */
const loraObject = <T extends z.ZodType<string>>(target: T) =>
  z
    .object({
      rank: count(TRANSFORMER_LIMITS.loraRank),
      alpha: z.number().gt(0, 'must be > 0').max(1e6, 'must be ≤ 1000000'),
      targets: z.array(target).min(1, 'name at least one projection'),
      baseSeed: count(Number.MAX_SAFE_INTEGER, 0).optional(),
      baseCheckpoint: z.string().startsWith('/', 'must be an absolute directory path').optional(),
    })
    .strict()
    .refine((l) => l.baseSeed === undefined || l.baseCheckpoint === undefined, {
      path: ['baseCheckpoint'],
      message: 'name the base by baseSeed or by baseCheckpoint, not both',
    });

export const lazyLora = lazily(() => loraObject(oneOf(LORA_TARGETS)).optional());

/**
 * The `lora` object of a model over a checkpoint: its targets are checked against the directory's layout where the
 * directory is read (the engine): the family's projections (q, k, v, o, ...) when the directory loads into the
 * family's layout (gpt2, llama, qwen2, qwen3), else the model's linear modules by their transformers / PEFT names
 * (q_proj, gate_up_proj, ...: a transformers-layout model, engines/pytorch/hf.py).
 */
const checkpointLora = lazily(() => loraObject(z.string().min(1, 'must be a projection or module name')));

/** Problems of a `lora` object alone (paths under `prefix`), for an adapter over a checkpoint (its targets are checked where the directory is read). */
export function loraIssues(input: unknown, prefix: string): FieldIssue[] {
  const parsed = checkpointLora().safeParse(input);
  return parsed.success ? [] : issuesFromZod(parsed.error, { prefix, unknownKey: 'unknown option', root: prefix });
}

export type LoraSpec = NonNullable<z.output<ReturnType<typeof schema>>['lora']>;
export type TransformerSpec = Required<Omit<z.output<ReturnType<typeof schema>>, 'lora'>> & { lora?: LoraSpec };

/** A bad config: every issue names its field (`spec.heads: …`). */
export class TransformerSpecError extends ModelSpecError {
  constructor(issues: FieldIssue[]) {
    super(issues);
    this.name = 'TransformerSpecError';
  }
}

/** Validate, fill defaults and check the cross-field rules; throws TransformerSpecError. */
export function normalizeTransformerSpec(input: unknown, prefix = 'spec'): TransformerSpec {
  const parsed = schema().safeParse(input);
  if (!parsed.success) throw new TransformerSpecError(issuesFromZod(parsed.error, { prefix, unknownKey: 'unknown option', root: prefix }));
  const s = parsed.data;
  const issues: FieldIssue[] = [];
  const at = (field: string, message: string) => issues.push({ path: `${prefix}.${field}`, message });
  // without headDim, heads must divide width (the default head dimension is width / heads)
  if (s.headDim === undefined && s.width % s.heads !== 0) at('heads', `must divide width (${s.width} is not a multiple of ${s.heads}), or set headDim`);
  const spec: TransformerSpec = {
    ...s,
    kvHeads: s.kvHeads ?? s.heads,
    mlpWidth: s.mlpWidth ?? 4 * s.width,
    headDim: s.headDim ?? Math.floor(s.width / s.heads),
  };
  if (issues.length === 0 && spec.positions === 'rope' && spec.headDim % 2 !== 0) {
    at(
      s.headDim === undefined ? 'positions' : 'headDim',
      `rope needs an even head dimension (${s.headDim === undefined ? 'width / heads' : 'headDim'} = ${spec.headDim})`,
    );
  }
  if (spec.heads % spec.kvHeads !== 0) at('kvHeads', `must divide heads (${spec.heads} is not a multiple of ${spec.kvHeads})`);
  if (issues.length === 0) {
    const total = paramLayout(spec).total;
    if (total > TRANSFORMER_LIMITS.params) {
      at('width', `${total} parameters exceed the limit of ${TRANSFORMER_LIMITS.params} (reduce width, layers, mlpWidth or vocabSize)`);
    }
  }
  if (issues.length === 0 && s.lora) spec.lora = { ...s.lora, targets: loraTargets(spec, s.lora.targets, (m) => at('lora.targets', m)) };
  if (issues.length > 0) throw new TransformerSpecError(issues);
  return spec;
}

/** The targets in layer order (q k v o, then the MLP's), each once; `bad` hears of one this layout lacks. */
function loraTargets(s: TransformerSpec, targets: readonly string[], bad: (message: string) => void): LoraSpec['targets'] {
  const have = new Set(
    paramLayout(s)
      .slots.filter((x) => /^l0\.w/.test(x.name))
      .map((x) => x.name.slice(4)),
  );
  for (const t of targets) if (!have.has(t)) bad(`${JSON.stringify(t)} is not a projection of this model (it has: ${[...have].join(', ')})`);
  for (const t of new Set(targets)) if (targets.indexOf(t) !== targets.lastIndexOf(t)) bad(`${JSON.stringify(t)} is named twice`);
  return LORA_TARGETS.filter((t) => targets.includes(t));
}

export function headDim(s: TransformerSpec): number {
  return s.headDim;
}

export interface ParamSlot {
  name: string;
  offset: number;
  shape: number[];
  size: number;
  /** drives init only; AdamW treats every slot alike */
  kind: 'embedding' | 'position' | 'matrix' | 'residual-out' | 'bias' | 'gain';
}

export interface ParamLayout {
  slots: ParamSlot[];
  total: number;
}

/**
 * Flat θ, matrices stored [in, out] (y = x·W):
 *   tok_emb [V, D]; pos_emb [maxSeq, D] (learned only);
 *   per layer l: ln1_g [D], ln1_b [D] (LayerNorm only); wq [D, H·hd], bq; wk [D, Hkv·hd], bk;
 *     wv [D, Hkv·hd], bv; lnq_g [hd], lnk_g [hd] (qkNorm only); wo [H·hd, D], bo; ln2_g, ln2_b;
 *     GELU: w1 [D, F], b1, w2 [F, D], b2 — SwiGLU: wg [D, F], bg, wu [D, F], bu, wd [F, D], bd
 *     (b* only with bias);
 *   lnf_g, lnf_b; head [D, V] (untied only).
 * Slot names carry the layer as `l<i>.`: `l0.wq`.
 */
export function paramLayout(s: TransformerSpec): ParamLayout {
  const D = s.width;
  const hd = s.headDim;
  const slots: ParamSlot[] = [];
  let offset = 0;
  const add = (name: string, shape: number[], kind: ParamSlot['kind']) => {
    const size = shape.reduce((a, b) => a * b, 1);
    slots.push({ name, offset, shape, size, kind });
    offset += size;
  };
  const norm = (name: string) => {
    add(`${name}_g`, [D], 'gain');
    if (s.norm === 'layernorm') add(`${name}_b`, [D], 'bias');
  };
  const linear = (layer: string, name: string, fanIn: number, fanOut: number, kind: ParamSlot['kind'] = 'matrix') => {
    add(`${layer}w${name}`, [fanIn, fanOut], kind);
    if (s.bias) add(`${layer}b${name}`, [fanOut], 'bias');
  };
  add('tok_emb', [s.vocabSize, D], 'embedding');
  if (s.positions === 'learned') add('pos_emb', [s.maxSeq, D], 'position');
  for (let l = 0; l < s.layers; l++) {
    const p = `l${l}.`;
    norm(`${p}ln1`);
    linear(p, 'q', D, s.heads * hd);
    linear(p, 'k', D, s.kvHeads * hd);
    linear(p, 'v', D, s.kvHeads * hd);
    if (s.qkNorm) {
      add(`${p}lnq_g`, [hd], 'gain');
      add(`${p}lnk_g`, [hd], 'gain');
    }
    linear(p, 'o', s.heads * hd, D, 'residual-out');
    norm(`${p}ln2`);
    const mlp: [string, number, number, ParamSlot['kind']][] =
      s.mlp === 'gelu'
        ? [
            ['1', D, s.mlpWidth, 'matrix'],
            ['2', s.mlpWidth, D, 'residual-out'],
          ]
        : [
            ['g', D, s.mlpWidth, 'matrix'],
            ['u', D, s.mlpWidth, 'matrix'],
            ['d', s.mlpWidth, D, 'residual-out'],
          ];
    for (const [n, i, o, kind] of mlp) linear(p, n, i, o, kind);
  }
  norm('lnf');
  if (!s.tiedHead) add('head', [D, s.vocabSize], 'matrix');
  return { slots, total: offset };
}

/** Canonical JSON (fixed key order) used to compare specs. */
export function transformerSpecKey(s: TransformerSpec): string {
  return JSON.stringify([
    s.family,
    s.vocabSize,
    s.width,
    s.layers,
    s.heads,
    s.kvHeads,
    s.headDim,
    s.mlpWidth,
    s.positions,
    s.ropeTheta,
    s.norm,
    s.normEps,
    s.qkNorm,
    s.mlp,
    s.bias,
    s.tiedHead,
    s.maxSeq,
    ...(s.lora ? [[s.lora.rank, s.lora.alpha, s.lora.targets, s.lora.baseSeed ?? null, s.lora.baseCheckpoint ?? null]] : []),
  ]);
}
