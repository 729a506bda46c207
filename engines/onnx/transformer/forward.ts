/**
 * The transformer forward pass over whole sequences as ONNX nodes (plain ops
 * only: onnxruntime-node has no gradient ops, and contrib ops such as
 * com.microsoft Attention would have no backward). It keeps the values the
 * hand-built backward (backward.ts) needs. Works for float32 and float64 θ.
 *
 * Shapes: tokens [B, S]; residual stream h [B, S, D]; query heads
 * [B, Hkv, G, S, hd] (G = heads / kvHeads query heads share one kv head: query
 * head h = kv·G + g reads kv head ⌊h / G⌋), keys/values [B, Hkv, 1, S, hd] —
 * MatMul broadcasts them over G, which is grouped-query attention without
 * copying. Row reductions over the width use MatMul with a constant column
 * (GEMM rows are computed independently of their neighbours).
 *
 * Per layer (pre-norm): h ← h + Wo·attn(norm1(h)); h ← h + mlp(norm2(h));
 * then norm_f. The head (logits = nf·head, tied: nf·tok_embᵀ, and log-softmax)
 * is vocabulary-sized per position, so `forward` stops at nf: callers take
 * logits of the positions they need (generate: the last one) or in chunks of
 * rows (head.ts: score and update).
 */
import { type FloatType, type Graph, int, ints } from '../graph/builder';
import { headDim, paramLayout, type TransformerSpec } from '../../families/transformer/spec';

/** Shared helpers for the forward and backward builders of one spec and float type. */
export class Ops {
  readonly hd: number;
  readonly group: number;
  private readonly consts = new Map<string, string>();

  constructor(
    readonly g: Graph,
    readonly spec: TransformerSpec,
    readonly ft: FloatType,
  ) {
    this.hd = headDim(spec);
    this.group = spec.heads / spec.kvHeads;
  }

  c(v: number): string {
    return this.g.constant(this.ft, v);
  }
  i64(vals: number[]): string {
    return this.g.constant('int64', vals);
  }
  op(type: string, inputs: string[], attrs: Parameters<Graph['op']>[2] = {}): string {
    return this.g.op(type, inputs, attrs);
  }
  /** [n, 1] column of 1/n: x·col is the mean over the last axis. */
  meanCol(n: number): string {
    const key = `mean${n}`;
    let v = this.consts.get(key);
    if (!v) this.consts.set(key, (v = this.g.constant(this.ft, new Array(n).fill(1 / n), [n, 1])));
    return v;
  }
  /** [..., n] → [-1, n] */
  rows(x: string, n: number): string {
    return this.op('Reshape', [x, this.i64([-1, n])]);
  }
  transpose(x: string, perm: number[]): string {
    return this.op('Transpose', [x], { perm: ints(perm) });
  }
  /** swap the last two axes of a 5-D tensor */
  swapLast(x: string): string {
    return this.transpose(x, [0, 1, 2, 4, 3]);
  }
  /** [B, S, n·group·hd] → [B, n, group, S, hd] */
  toHeads(x: string, n: number, group: number): string {
    return this.transpose(this.op('Reshape', [x, this.i64([0, 0, n, group, this.hd])]), [0, 2, 3, 1, 4]);
  }
  /** [B, n, group, S, hd] → [B, S, n·group·hd] */
  fromHeads(x: string): string {
    return this.op('Reshape', [this.transpose(x, [0, 3, 1, 2, 4]), this.i64([0, 0, -1])]);
  }
  /** last-axis halves of a head vector */
  halves(x: string): [string, string] {
    const h = this.hd / 2;
    const ax = this.i64([-1]);
    return [this.op('Slice', [x, this.i64([0]), this.i64([h]), ax]), this.op('Slice', [x, this.i64([h]), this.i64([this.hd]), ax])];
  }
  concatLast(a: string, b: string): string {
    return this.op('Concat', [a, b], { axis: int(-1) });
  }
}

export interface Weights {
  get(name: string): string;
  has(name: string): boolean;
  /** A LoRA spec's sampling graphs (lora-graph.ts): the adapter's term s·(x·Aᵀ)·Bᵀ of map `n` of `layer`, if targeted. */
  adapterTerm?(o: Ops, x: string, layer: string, n: string): string | undefined;
}

/** Cut the flat θ vector into named, shaped parameter tensors (Slice + Reshape). */
export function sliceParams(g: Graph, spec: TransformerSpec, theta: string): Weights {
  const byName = new Map<string, string>();
  const axis0 = g.constant('int64', [0]);
  for (const slot of paramLayout(spec).slots) {
    const flat = g.op('Slice', [theta, g.constant('int64', [slot.offset]), g.constant('int64', [slot.offset + slot.size]), axis0]);
    byName.set(slot.name, g.op('Reshape', [flat, g.constant('int64', slot.shape)], {}, slot.name.replace('.', '_')));
  }
  return {
    get: (name) => {
      const v = byName.get(name);
      if (!v) throw new Error(`transformer graph: no parameter ${name}`);
      return v;
    },
    has: (name) => byName.has(name),
  };
}

/** RoPE tables [maxSeq, hd] (angles computed in float64 on the host; halves repeated, rotate-half convention). */
export function ropeTables(spec: TransformerSpec): { cos: number[]; sin: number[] } {
  const hd = headDim(spec);
  const half = hd / 2;
  const cos: number[] = [];
  const sin: number[] = [];
  for (let p = 0; p < spec.maxSeq; p++) {
    for (let i = 0; i < hd; i++) {
      const angle = p * Math.pow(spec.ropeTheta, (-2 * (i % half)) / hd);
      cos.push(Math.cos(angle));
      sin.push(Math.sin(angle));
    }
  }
  return { cos, sin };
}

/** Where each token sits: its position id, which keys it sees, and its rotation. */
export interface Positions {
  /** int64 position ids, broadcastable to [B, S] */
  ids: string;
  /** bool, broadcastable to the scores [B, Hkv, G, S, keys]: query i sees key j */
  mask: string;
  /** cos / sin broadcastable to the heads [B, Hkv, G, S, hd] (rope only) */
  cos?: string;
  sin?: string;
}

/** The RoPE tables as graph constants [maxSeq, hd] (a Loop body can read its parent's). */
export function ropeConstants(o: Ops): { cos: string; sin: string } {
  const t = ropeTables(o.spec);
  return { cos: o.g.constant(o.ft, t.cos, [o.spec.maxSeq, o.hd]), sin: o.g.constant(o.ft, t.sin, [o.spec.maxSeq, o.hd]) };
}

/** RoPE cos / sin at position ids [B', S] → [B', 1, 1, S, hd] (none for learned positions). */
export function rotationAt(o: Ops, ids: string, tables?: { cos: string; sin: string }): Pick<Positions, 'cos' | 'sin'> {
  if (o.spec.positions !== 'rope') return {};
  const t = tables ?? ropeConstants(o);
  const at = (table: string) => o.op('Unsqueeze', [o.op('Gather', [table, ids], { axis: int(0) }), o.i64([1, 2])]);
  return { cos: at(t.cos), sin: at(t.sin) };
}

/** Positions 0..S−1 of right-padded sequences (padding sits after every real token, so the causal mask hides it). */
export function sequencePositions(o: Ops, tokens: string): Positions {
  const g = o.g;
  const seqLen = g.op('Gather', [g.op('Shape', [tokens]), g.constant('int64', 1)], { axis: int(0) });
  const range = g.op('Range', [g.constant('int64', 0), seqLen, g.constant('int64', 1)]);
  const ids = g.op('Unsqueeze', [range, o.i64([0])]); // [1, S]
  const mask = g.op('GreaterOrEqual', [g.op('Unsqueeze', [range, o.i64([1])]), ids]); // [S, S]: j ≤ i
  return { ids, mask, ...rotationAt(o, ids) };
}

export interface NormSaved {
  /** normalized input before the gain */
  xhat: string;
  /** 1 / (std or rms) [..., 1] */
  rstd: string;
}

export interface LayerSaved {
  ln1: NormSaved;
  n1: string;
  /** rotated (and, with qkNorm, normalized) query / key heads and value heads */
  q: string;
  k: string;
  v: string;
  /** the q / k head norms (qkNorm only) */
  qn?: NormSaved;
  kn?: NormSaved;
  /** attention probabilities [B, Hkv, G, S, S] */
  p: string;
  /** attention output before Wo [B, S, H·hd] */
  ctx: string;
  ln2: NormSaved;
  n2: string;
  /** MLP pre-activations: GELU: [z, tanh(c·(z + a·z³))]; SwiGLU: [gate, up] */
  pre: [string, string];
  /** MLP activation fed to the down projection */
  act: string;
}

export interface ForwardValues {
  layers: LayerSaved[];
  lnf: NormSaved;
  /** final-norm output [B, S, D] (the head's input) */
  nf: string;
}

/** The spec's norm over the last axis of x (width D); the q/k head norms pass their width hd and 'rmsnorm'. */
export function norm(o: Ops, w: Weights, x: string, name: string, width = o.spec.width, kind = o.spec.norm): { y: string; saved: NormSaved } {
  const col = o.meanCol(width);
  const centred = kind === 'layernorm' ? o.op('Sub', [x, o.op('MatMul', [x, col])]) : x;
  const ms = o.op('MatMul', [o.op('Mul', [centred, centred]), col]);
  const rstd = o.op('Reciprocal', [o.op('Sqrt', [o.op('Add', [ms, o.c(o.spec.normEps)])])]);
  const xhat = o.op('Mul', [centred, rstd]);
  let y = o.op('Mul', [xhat, w.get(`${name}_g`)]);
  if (kind === 'layernorm') y = o.op('Add', [y, w.get(`${name}_b`)]);
  return { y, saved: { xhat, rstd } };
}

/** x·W (+ b), then + the adapter's term where a LoRA spec targets the map (PEFT's order: the base layer, then LoRA). */
export function linear(o: Ops, w: Weights, x: string, layer: string, n: string): string {
  let y = o.op('MatMul', [x, w.get(`${layer}w${n}`)]);
  if (w.has(`${layer}b${n}`)) y = o.op('Add', [y, w.get(`${layer}b${n}`)]);
  const adapted = w.adapterTerm?.(o, x, layer, n);
  return adapted ? o.op('Add', [y, adapted]) : y;
}

/** x·cos + rotate_half(x)·sin, rotate_half(x) = [−x₂, x₁] */
export function rotate(o: Ops, x: string, pos: Positions): string {
  const [x1, x2] = o.halves(x);
  return o.op('Add', [o.op('Mul', [x, pos.cos!]), o.op('Mul', [o.concatLast(o.op('Neg', [x2]), x1), pos.sin!])]);
}

export const GELU_C = Math.sqrt(2 / Math.PI);
export const GELU_A = 0.044715;

/** GPT-2's tanh GELU: 0.5·x·(1 + tanh(c·(x + a·x³))); returns [y, tanh(...)] (Erf has no float64 kernel). */
export function gelu(o: Ops, z: string): { y: string; t: string } {
  const z3 = o.op('Mul', [o.op('Mul', [z, z]), z]);
  const t = o.op('Tanh', [o.op('Mul', [o.c(GELU_C), o.op('Add', [z, o.op('Mul', [o.c(GELU_A), z3])])])]);
  return { y: o.op('Mul', [o.op('Mul', [o.c(0.5), z]), o.op('Add', [o.c(1), t])]), t };
}

/** Query, key and value heads of normalized input n1 [B, S, D]; with qkNorm q and k are RMS-normalized per head, then rotated when rope. */
export function projectHeads(
  o: Ops,
  w: Weights,
  n1: string,
  layer: string,
  pos: Positions,
): { q: string; k: string; v: string; qn?: NormSaved; kn?: NormSaved } {
  const s = o.spec;
  let q = o.toHeads(linear(o, w, n1, layer, 'q'), s.kvHeads, o.group);
  let k = o.toHeads(linear(o, w, n1, layer, 'k'), s.kvHeads, 1);
  const v = o.toHeads(linear(o, w, n1, layer, 'v'), s.kvHeads, 1);
  let saved: { qn?: NormSaved; kn?: NormSaved } = {};
  if (s.qkNorm) {
    const qn = norm(o, w, q, `${layer}lnq`, o.hd, 'rmsnorm');
    const kn = norm(o, w, k, `${layer}lnk`, o.hd, 'rmsnorm');
    [q, k, saved] = [qn.y, kn.y, { qn: qn.saved, kn: kn.saved }];
  }
  if (s.positions === 'rope') {
    q = rotate(o, q, pos);
    k = rotate(o, k, pos);
  }
  return { q, k, v, ...saved };
}

/** scale·q·kᵀ with masked keys at −∞ (probability exactly 0); keys [B, Hkv, 1, keys, hd] → [B, Hkv, G, S, keys]. */
export function maskedScores(o: Ops, q: string, k: string, mask: string): string {
  const scores = o.op('Mul', [o.op('MatMul', [q, o.swapLast(k)]), o.c(1 / Math.sqrt(o.hd))]);
  return o.op('Where', [mask, scores, o.c(-Infinity)]);
}

/** softmax(scale·q·kᵀ, masked)·v; keys / values [B, Hkv, 1, keys, hd] → ctx [B, S, H·hd]. */
export function attend(o: Ops, q: string, k: string, v: string, mask: string): { p: string; ctx: string } {
  const p = o.op('Softmax', [maskedScores(o, q, k, mask)], { axis: int(-1) });
  return { p, ctx: o.fromHeads(o.op('MatMul', [p, v])) };
}

function mlp(o: Ops, w: Weights, n2: string, layer: string): { pre: [string, string]; act: string; out: string } {
  if (o.spec.mlp === 'gelu') {
    const z = linear(o, w, n2, layer, '1');
    const { y: act, t } = gelu(o, z);
    return { pre: [z, t], act, out: linear(o, w, act, layer, '2') };
  }
  const gate = linear(o, w, n2, layer, 'g');
  const up = linear(o, w, n2, layer, 'u');
  const act = o.op('Mul', [o.op('Mul', [gate, o.op('Sigmoid', [gate])]), up]); // silu(gate)·up
  return { pre: [gate, up], act, out: linear(o, w, act, layer, 'd') };
}

/** Token (+ learned position) embeddings [B, S, D]. */
export function embed(o: Ops, w: Weights, tokens: string, pos: Positions): string {
  const h = o.op('Gather', [w.get('tok_emb'), tokens], { axis: int(0) });
  return o.spec.positions === 'learned' ? o.op('Add', [h, o.op('Gather', [w.get('pos_emb'), pos.ids], { axis: int(0) })]) : h;
}

/**
 * One pre-norm layer: h + Wo·attention(norm1(h)), then + mlp(norm2(·)). `attention` maps the
 * normalized input to the attention output before Wo (full sequence, or one token over a cache).
 */
export function block(o: Ops, w: Weights, h: string, layer: string, attention: (n1: string) => string) {
  const n1 = norm(o, w, h, `${layer}ln1`);
  const ctx = attention(n1.y);
  const h1 = o.op('Add', [h, linear(o, w, ctx, layer, 'o')]);
  const n2 = norm(o, w, h1, `${layer}ln2`);
  const m = mlp(o, w, n2.y, layer);
  return { h: o.op('Add', [h1, m.out]), n1, ctx, n2, m };
}

/** The head as [D, V] (tied: tok_embᵀ). */
export function headMatrix(o: Ops, w: Weights): string {
  return o.spec.tiedHead ? o.op('Transpose', [w.get('tok_emb')]) : w.get('head');
}

/** Logits nf·head and their log-softmax over the last axis, for every row of nf. */
export function logitsOf(o: Ops, w: Weights, nf: string, head = headMatrix(o, w)): { logits: string; logp: string } {
  const logits = o.op('MatMul', [nf, head]);
  return { logits, logp: o.op('LogSoftmax', [logits], { axis: int(-1) }) };
}

/** Final norm, logits (tied: nf·tok_embᵀ) and log-softmax over the last axis. */
export function headLogits(o: Ops, w: Weights, h: string): { logits: string; logp: string } {
  return logitsOf(o, w, norm(o, w, h, 'lnf').y);
}

/** tokens: int64 [B, S] → layers' saved values and nf; `lastOnly`: nf of the last position only ([B, 1, D], for a prefill). */
export function forward(o: Ops, w: Weights, tokens: string, pos: Positions, lastOnly = false): ForwardValues {
  let h = embed(o, w, tokens, pos);
  const layers: LayerSaved[] = [];
  for (let l = 0; l < o.spec.layers; l++) {
    let heads!: ReturnType<typeof projectHeads> & { p: string };
    const r = block(o, w, h, `l${l}.`, (n1) => {
      const qkv = projectHeads(o, w, n1, `l${l}.`, pos);
      const a = attend(o, qkv.q, qkv.k, qkv.v, pos.mask);
      heads = { ...qkv, p: a.p };
      return a.ctx;
    });
    h = r.h;
    layers.push({ ln1: r.n1.saved, n1: r.n1.y, ...heads, ctx: r.ctx, ln2: r.n2.saved, n2: r.n2.y, pre: r.m.pre, act: r.m.act });
  }
  if (lastOnly) h = o.op('Slice', [h, o.i64([-1]), o.i64([2 ** 62]), o.i64([1])]);
  const nf = norm(o, w, h, 'lnf');
  return { layers, lnf: nf.saved, nf: nf.y };
}
