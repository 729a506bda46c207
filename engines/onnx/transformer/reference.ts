/**
 * An independent plain-TypeScript float64 implementation of the transformer
 * (spec.ts layout), written from the math and not from the graph builder:
 * loops per position and head, attention only over keys j ≤ i (no mask
 * tensor), grouped-query heads by index (query head h reads kv head
 * ⌊h / (heads/kvHeads)⌋), RoPE as explicit pair rotations. Gradients come from
 * a small scalar reverse-mode tape, not from hand-derived formulas, so they
 * check the graph's hand-built backward by a different route.
 *
 * Slow (one tape node per scalar op): for tests on small configs only.
 */
import { headDim, paramLayout, type TransformerSpec } from '../../families/transformer/spec';

/** Scalar reverse-mode autodiff: every node has at most two parents with local derivatives. */
class Tape {
  readonly val: number[] = [];
  private readonly pa: number[] = [];
  private readonly da: number[] = [];
  private readonly pb: number[] = [];
  private readonly db: number[] = [];

  node(x: number, a = -1, dA = 0, b = -1, dB = 0): number {
    this.val.push(x);
    this.pa.push(a);
    this.da.push(dA);
    this.pb.push(b);
    this.db.push(dB);
    return this.val.length - 1;
  }
  add(x: number, y: number): number {
    return this.node(this.val[x]! + this.val[y]!, x, 1, y, 1);
  }
  sub(x: number, y: number): number {
    return this.node(this.val[x]! - this.val[y]!, x, 1, y, -1);
  }
  mul(x: number, y: number): number {
    return this.node(this.val[x]! * this.val[y]!, x, this.val[y], y, this.val[x]);
  }
  scale(x: number, c: number): number {
    return this.node(this.val[x]! * c, x, c);
  }
  shift(x: number, c: number): number {
    return this.node(this.val[x]! + c, x, 1);
  }
  exp(x: number): number {
    const e = Math.exp(this.val[x]!);
    return this.node(e, x, e);
  }
  log(x: number): number {
    return this.node(Math.log(this.val[x]!), x, 1 / this.val[x]!);
  }
  recip(x: number): number {
    const r = 1 / this.val[x]!;
    return this.node(r, x, -r * r);
  }
  tanh(x: number): number {
    const t = Math.tanh(this.val[x]!);
    return this.node(t, x, 1 - t * t);
  }
  sigmoid(x: number): number {
    const s = 1 / (1 + Math.exp(-this.val[x]!));
    return this.node(s, x, s * (1 - s));
  }
  /** 1/√x */
  rsqrt(x: number): number {
    const r = 1 / Math.sqrt(this.val[x]!);
    return this.node(r, x, (-0.5 * r) / this.val[x]!);
  }
  sum(xs: number[]): number {
    let s = xs[0]!;
    for (let i = 1; i < xs.length; i++) s = this.add(s, xs[i]!);
    return s;
  }
  dot(xs: number[], ys: number[]): number {
    return this.sum(xs.map((x, i) => this.mul(x, ys[i]!)));
  }
  /** ∂out/∂(every node), by one reverse sweep. */
  gradient(out: number): Float64Array {
    const g = new Float64Array(this.val.length);
    g[out] = 1;
    for (let i = out; i >= 0; i--) {
      if (g[i] === 0) continue;
      if (this.pa[i]! >= 0) g[this.pa[i]!]! += this.da[i]! * g[i]!;
      if (this.pb[i]! >= 0) g[this.pb[i]!]! += this.db[i]! * g[i]!;
    }
    return g;
  }
}

type Vec = number[];

/** Builds the model on a tape whose first P nodes are the parameters θ. */
class Model {
  private readonly slots: Map<string, { offset: number; shape: number[] }>;
  readonly t = new Tape();

  constructor(
    readonly spec: TransformerSpec,
    theta: ArrayLike<number>,
  ) {
    const layout = paramLayout(spec);
    if (theta.length !== layout.total) throw new RangeError(`theta: expected ${layout.total} values, got ${theta.length}`);
    this.slots = new Map(layout.slots.map((s) => [s.name, s]));
    for (let i = 0; i < layout.total; i++) this.t.node(theta[i]!);
  }

  private w(name: string, i: number): number {
    const s = this.slots.get(name);
    if (!s) throw new Error(`no parameter ${name}`);
    return s.offset + i;
  }
  private has(name: string): boolean {
    return this.slots.has(name);
  }

  /** y_j = Σ_i x_i·W[i, j] (+ b_j) */
  private linear(x: Vec, layer: string, n: string, fanOut: number): Vec {
    const y: Vec = [];
    for (let j = 0; j < fanOut; j++) {
      let acc = this.t.dot(
        x,
        x.map((_, i) => this.w(`${layer}w${n}`, i * fanOut + j)),
      );
      if (this.has(`${layer}b${n}`)) acc = this.t.add(acc, this.w(`${layer}b${n}`, j));
      y.push(acc);
    }
    return y;
  }

  private norm(x: Vec, name: string): Vec {
    const t = this.t;
    const D = x.length;
    const eps = this.spec.normEps;
    if (this.spec.norm === 'layernorm') {
      const mean = t.scale(t.sum(x), 1 / D);
      const xc = x.map((v) => t.sub(v, mean));
      const r = t.rsqrt(t.shift(t.scale(t.dot(xc, xc), 1 / D), eps));
      return xc.map((v, d) => t.add(t.mul(t.mul(v, r), this.w(`${name}_g`, d)), this.w(`${name}_b`, d)));
    }
    const r = t.rsqrt(t.shift(t.scale(t.dot(x, x), 1 / D), eps));
    return x.map((v, d) => t.mul(t.mul(v, r), this.w(`${name}_g`, d)));
  }

  /** One head's RMSNorm (qkNorm): v·(mean(v²) + eps)^(−½)·g, gain `name`_g [hd]. */
  private headNorm(v: Vec, name: string): Vec {
    const t = this.t;
    const r = t.rsqrt(t.shift(t.scale(t.dot(v, v), 1 / v.length), this.spec.normEps));
    return v.map((x, d) => t.mul(t.mul(x, r), this.w(`${name}_g`, d)));
  }

  /** Rotate pairs (i, i + hd/2) of one head's vector by pos·θ^(−2i/hd). */
  private rope(x: Vec, pos: number): Vec {
    const t = this.t;
    const half = x.length / 2;
    const out = x.slice();
    for (let i = 0; i < half; i++) {
      const angle = pos * Math.pow(this.spec.ropeTheta, (-2 * i) / x.length);
      const c = Math.cos(angle);
      const s = Math.sin(angle);
      out[i] = t.sub(t.scale(x[i]!, c), t.scale(x[i + half]!, s));
      out[i + half] = t.add(t.scale(x[i + half]!, c), t.scale(x[i]!, s));
    }
    return out;
  }

  private gelu(x: number): number {
    // GPT-2's tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
    const t = this.t;
    const x3 = t.mul(t.mul(x, x), x);
    const inner = t.scale(t.add(x, t.scale(x3, 0.044715)), Math.sqrt(2 / Math.PI));
    return t.mul(t.scale(x, 0.5), t.shift(t.tanh(inner), 1));
  }

  /** Logit nodes [S][V] of one sequence (position p predicts token p+1). */
  logits(tokens: number[]): number[][] {
    const s = this.spec;
    const t = this.t;
    const D = s.width;
    const hd = headDim(s);
    const group = s.heads / s.kvHeads;
    if (tokens.length > s.maxSeq) throw new RangeError(`sequence of ${tokens.length} tokens exceeds maxSeq ${s.maxSeq}`);
    let h: Vec[] = tokens.map((tok, p) =>
      Array.from({ length: D }, (_, d) => {
        const e = this.w('tok_emb', tok * D + d);
        return s.positions === 'learned' ? t.add(e, this.w('pos_emb', p * D + d)) : e;
      }),
    );
    for (let l = 0; l < s.layers; l++) {
      const L = `l${l}.`;
      const n1 = h.map((x) => this.norm(x, `${L}ln1`));
      const headsOf = (v: Vec, count: number) => Array.from({ length: count }, (_, i) => v.slice(i * hd, (i + 1) * hd));
      // per head: RMSNorm (qkNorm), then the rotation (rope)
      const prep = (v: Vec, p: number, n: string) => {
        const u = s.qkNorm ? this.headNorm(v, `${L}${n}`) : v;
        return s.positions === 'rope' ? this.rope(u, p) : u;
      };
      const q = n1.map((x, p) => headsOf(this.linear(x, L, 'q', s.heads * hd), s.heads).map((v) => prep(v, p, 'lnq')));
      const k = n1.map((x, p) => headsOf(this.linear(x, L, 'k', s.kvHeads * hd), s.kvHeads).map((v) => prep(v, p, 'lnk')));
      const v = n1.map((x) => headsOf(this.linear(x, L, 'v', s.kvHeads * hd), s.kvHeads));
      const attn = q.map((qp, i) => {
        const out: Vec = [];
        for (let hh = 0; hh < s.heads; hh++) {
          const kv = Math.floor(hh / group);
          const scores: number[] = [];
          for (let j = 0; j <= i; j++) scores.push(t.scale(t.dot(qp[hh]!, k[j]![kv]!), 1 / Math.sqrt(hd)));
          const m = Math.max(...scores.map((x) => t.val[x]!));
          const e = scores.map((x) => t.exp(t.shift(x, -m)));
          const inv = t.recip(t.sum(e));
          for (let d = 0; d < hd; d++) out.push(t.sum(e.map((ej, j) => t.mul(t.mul(ej, inv), v[j]![kv]![d]!))));
        }
        return this.linear(out, L, 'o', D);
      });
      h = h.map((x, p) => x.map((xd, d) => t.add(xd, attn[p]![d]!)));
      const n2 = h.map((x) => this.norm(x, `${L}ln2`));
      const mlp = n2.map((x) => {
        if (s.mlp === 'gelu')
          return this.linear(
            this.linear(x, L, '1', s.mlpWidth).map((z) => this.gelu(z)),
            L,
            '2',
            D,
          );
        // SwiGLU: silu(x·Wg)·(x·Wu), silu(z) = z·σ(z)
        const up = this.linear(x, L, 'u', s.mlpWidth);
        const a = this.linear(x, L, 'g', s.mlpWidth).map((z, f) => t.mul(t.mul(z, t.sigmoid(z)), up[f]!));
        return this.linear(a, L, 'd', D);
      });
      h = h.map((x, p) => x.map((xd, d) => t.add(xd, mlp[p]![d]!)));
    }
    return h.map((x) => {
      const nf = this.norm(x, 'lnf');
      return Array.from({ length: s.vocabSize }, (_, tok) =>
        t.dot(
          nf,
          nf.map((_, d) => (s.tiedHead ? this.w('tok_emb', tok * D + d) : this.w('head', d * s.vocabSize + tok))),
        ),
      );
    });
  }

  /** log-softmax nodes of one logit row. */
  logSoftmax(z: number[]): number[] {
    const t = this.t;
    const m = Math.max(...z.map((x) => t.val[x]!));
    const lse = t.shift(t.log(t.sum(z.map((x) => t.exp(t.shift(x, -m))))), m);
    return z.map((x) => t.sub(x, lse));
  }
}

export interface ReferenceForward {
  /** [S][V] per sequence */
  logits: number[][][];
  logp: number[][][];
}

/** Logits and log-probs of every position of every sequence. */
export function referenceForward(spec: TransformerSpec, theta: ArrayLike<number>, seqs: number[][]): ReferenceForward {
  const m = new Model(spec, theta);
  const logits = seqs.map((seq) => m.logits(seq));
  const logp = logits.map((rows) => rows.map((z) => m.logSoftmax(z)));
  const vals = (nodes: number[][][]) => nodes.map((rows) => rows.map((r) => r.map((x) => m.t.val[x]!)));
  return { logits: vals(logits), logp: vals(logp) };
}

export interface ObjectiveRow {
  tokens: number[];
  /** targets[p]: the token position p predicts */
  targets: number[];
  /** coefficient of log π(targets[p]) at position p */
  logpCoef: number[];
  /** coefficient of the entropy H_p of position p */
  entropyCoef: number[];
}

/**
 * J(θ) = Σ_seq Σ_p logpCoef[p]·log π(targets[p] | tokens ≤ p) + entropyCoef[p]·H_p and ∇J by the tape.
 * Any loss whose derivative w.r.t. each token log-prob / entropy is known reduces to this.
 */
export function referenceObjective(spec: TransformerSpec, theta: ArrayLike<number>, rows: ObjectiveRow[]): { value: number; grad: Float64Array } {
  const m = new Model(spec, theta);
  const t = m.t;
  const terms: number[] = [];
  for (const r of rows) {
    m.logits(r.tokens).forEach((z, p) => {
      const lp = m.logSoftmax(z);
      if (r.logpCoef[p] !== 0) terms.push(t.scale(lp[r.targets[p]!]!, r.logpCoef[p]!));
      if (r.entropyCoef[p] !== 0) {
        const negH = t.sum(lp.map((x) => t.mul(t.exp(x), x)));
        terms.push(t.scale(negH, -r.entropyCoef[p]!));
      }
    });
  }
  const out = t.sum(terms);
  return { value: t.val[out]!, grad: t.gradient(out).slice(0, theta.length) };
}
