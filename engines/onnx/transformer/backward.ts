/**
 * Hand-derived backward pass of the transformer forward (forward.ts), from
 * ∂loss/∂nf and the head's gradient to the gradient of every parameter
 * (flatGrads: flattened in the θ layout). The head's part runs per chunk of rows in the
 * update graph (head.ts), which passes its sums:
 *
 *   head:   dnf = dlogits·headᵀ (tied: dlogits·tok_emb), dhead = nfᵀ·dlogits (tied: adds dlogitsᵀ·nf to dtok_emb)
 *   norm:   dxhat = dy⊙g; dg = Σ dy⊙xhat; db = Σ dy;
 *           LayerNorm dx = r·(dxhat − mean(dxhat) − xhat·mean(dxhat⊙xhat)); RMSNorm drops mean(dxhat)
 *   linear: dW = xᵀ·dy, db = Σ dy, dx = dy·Wᵀ (rows of all B·S positions)
 *   MLP:    GELU(tanh) y' = ½(1+t) + ½x(1−t²)·c(1+3a x²);  SwiGLU silu'(z) = σ(z)(1 + z(1−σ(z)))
 *   attention (s = scale·q·kᵀ masked, p = softmax s, ctx = p·v):
 *           dp = dctx·vᵀ, dv = Σ_G pᵀ·dctx, ds = scale·p⊙(dp − Σ_j dp⊙p),
 *           dq = ds·k, dk = Σ_G dsᵀ·q (Σ_G: the query heads sharing a kv head)
 *   RoPE:   rotation is orthogonal: dx = dy⊙cos + rotate_halfᵀ(dy⊙sin), rotate_halfᵀ([z₁, z₂]) = [z₂, −z₁]
 *   q/k norm (qkNorm): RMSNorm's backward over each head's hd values, after undoing RoPE
 *   embeddings: dtok_emb = ScatterND(0, tokens, dh₀, reduction='add') — a token repeated
 *           in a sequence or across sequences accumulates; dpos_emb[p] = Σ_b dh₀[b, p].
 */
import { int, str } from '../graph/builder';
import { type ForwardValues, GELU_A, GELU_C, type NormSaved, type Ops, type Positions, type Weights } from './forward';
import { paramLayout } from '../../families/transformer/spec';

/**
 * What the head's backward (per chunk, update-graph.ts) hands on: ∂nf [B, S, D] and ∂head ([V, D] to add to
 * tok_emb when tied, else [D, V]; absent when neither is wanted).
 */
export interface HeadGrad {
  dnf: string;
  grad?: string;
}

/** Every parameter's gradient (parameterGrads), flattened in the θ layout. */
export function flatGrads(o: Ops, grads: Map<string, string>): string {
  const parts = paramLayout(o.spec).slots.map((slot) => {
    const gr = grads.get(slot.name);
    if (!gr) throw new Error(`transformer backward: no gradient for ${slot.name}`);
    return o.op('Reshape', [gr, o.i64([-1])]);
  });
  return o.op('Concat', parts, { axis: int(0) });
}

/**
 * The gradients of the parameters `want` names, by slot name (shaped as the slot). Only their nodes are built: a
 * LoRA update (lora-update-graph.ts) wants its targeted matrices alone, and the chain back through the layers.
 */
export function parameterGrads(
  o: Ops,
  w: Weights,
  fw: ForwardValues,
  tokens: string,
  pos: Positions,
  head: HeadGrad,
  want: (name: string) => boolean = () => true,
): Map<string, string> {
  const s = o.spec;
  const D = s.width;
  const all = new Map<string, string>();
  const grads = { set: (name: string, make: string | (() => string)) => want(name) && all.set(name, typeof make === 'string' ? make : make()) };
  const axis0 = o.i64([0]);
  const colSum = (t: string, n: number) => o.op('ReduceSum', [o.rows(t, n), axis0], { keepdims: int(0) });
  const tMatMul = (a: string, b: string, na: number, nb: number) => o.op('Gemm', [o.rows(a, na), o.rows(b, nb)], { transA: int(1) }); // aᵀ·b over all positions

  /** y = x·W (+ b): records dW, db and returns dx. */
  const linearBack = (x: string, dy: string, layer: string, n: string, fanIn: number, fanOut: number): string => {
    const W = w.get(`${layer}w${n}`);
    grads.set(`${layer}w${n}`, () => tMatMul(x, dy, fanIn, fanOut));
    if (w.has(`${layer}b${n}`)) grads.set(`${layer}b${n}`, () => colSum(dy, fanOut));
    return o.op('MatMul', [dy, o.op('Transpose', [W])]);
  };
  const normBack = (dy: string, saved: NormSaved, name: string, width = D, kind = s.norm): string => {
    const col = o.meanCol(width);
    grads.set(`${name}_g`, () => colSum(o.op('Mul', [dy, saved.xhat]), width));
    if (kind === 'layernorm') grads.set(`${name}_b`, () => colSum(dy, width));
    const dxhat = o.op('Mul', [dy, w.get(`${name}_g`)]);
    let inner = o.op('Sub', [dxhat, o.op('Mul', [saved.xhat, o.op('MatMul', [o.op('Mul', [dxhat, saved.xhat]), col])])]);
    if (kind === 'layernorm') inner = o.op('Sub', [inner, o.op('MatMul', [dxhat, col])]);
    return o.op('Mul', [saved.rstd, inner]);
  };
  const unrotate = (dy: string): string => {
    const [z1, z2] = o.halves(o.op('Mul', [dy, pos.sin!]));
    return o.op('Add', [o.op('Mul', [dy, pos.cos!]), o.concatLast(z2, o.op('Neg', [z1]))]);
  };
  const sumGroups = (t: string) => o.op('ReduceSum', [t, o.i64([2])], { keepdims: int(1) });

  // Final norm (the head's gradient comes in).
  const V = s.vocabSize;
  const headGrad = () => {
    if (!head.grad) throw new Error('transformer backward: the head gradient is wanted but was not summed');
    return head.grad;
  };
  if (!s.tiedHead) grads.set('head', headGrad);
  let dh = normBack(head.dnf, fw.lnf, 'lnf');

  const H = s.heads * o.hd;
  const Hkv = s.kvHeads * o.hd;
  const F = s.mlpWidth;
  const scale = o.c(1 / Math.sqrt(o.hd));
  for (let l = s.layers - 1; l >= 0; l--) {
    const L = `l${l}.`;
    const sv = fw.layers[l]!;
    // MLP block: h ← h + down(act(n2))
    let dn2: string;
    if (s.mlp === 'gelu') {
      const [z, t] = sv.pre;
      const dAct = linearBack(sv.act, dh, L, '2', F, D);
      const dInner = o.op('Mul', [o.c(GELU_C), o.op('Add', [o.c(1), o.op('Mul', [o.c(3 * GELU_A), o.op('Mul', [z, z!])])])]);
      const slope = o.op('Add', [
        o.op('Mul', [o.c(0.5), o.op('Add', [o.c(1), t!])]),
        o.op('Mul', [o.op('Mul', [o.op('Mul', [o.c(0.5), z!]), o.op('Sub', [o.c(1), o.op('Mul', [t, t!])])]), dInner]),
      ]);
      dn2 = linearBack(sv.n2, o.op('Mul', [dAct, slope]), L, '1', D, F);
    } else {
      const [gate, up] = sv.pre;
      const dAct = linearBack(sv.act, dh, L, 'd', F, D);
      const sig = o.op('Sigmoid', [gate!]);
      const silu = o.op('Mul', [gate, sig]);
      const dSilu = o.op('Mul', [sig, o.op('Add', [o.c(1), o.op('Mul', [gate, o.op('Sub', [o.c(1), sig])])])]);
      const dGate = o.op('Mul', [o.op('Mul', [dAct, up!]), dSilu]);
      const dUp = o.op('Mul', [dAct, silu]);
      dn2 = o.op('Add', [linearBack(sv.n2, dGate, L, 'g', D, F), linearBack(sv.n2, dUp, L, 'u', D, F)]);
    }
    dh = o.op('Add', [dh, normBack(dn2, sv.ln2, `${L}ln2`)]);

    // Attention block: h ← h + Wo·ctx
    const dCtx = o.toHeads(linearBack(sv.ctx, dh, L, 'o', H, D), s.kvHeads, o.group);
    const dp = o.op('MatMul', [dCtx, o.swapLast(sv.v)]);
    const dv = sumGroups(o.op('MatMul', [o.swapLast(sv.p), dCtx]));
    const rowDot = o.op('ReduceSum', [o.op('Mul', [dp, sv.p]), o.i64([-1])], { keepdims: int(1) });
    const ds = o.op('Mul', [o.op('Mul', [sv.p, o.op('Sub', [dp, rowDot])]), scale]);
    let dq = o.op('MatMul', [ds, sv.k]);
    let dk = sumGroups(o.op('MatMul', [o.swapLast(ds), sv.q]));
    if (s.positions === 'rope') {
      dq = unrotate(dq);
      dk = unrotate(dk);
    }
    if (s.qkNorm) {
      dq = normBack(dq, sv.qn!, `${L}lnq`, o.hd, 'rmsnorm');
      dk = normBack(dk, sv.kn!, `${L}lnk`, o.hd, 'rmsnorm');
    }
    const dn1 = o.op('Add', [
      o.op('Add', [linearBack(sv.n1, o.fromHeads(dq), L, 'q', D, H), linearBack(sv.n1, o.fromHeads(dk), L, 'k', D, Hkv)]),
      linearBack(sv.n1, o.fromHeads(dv), L, 'v', D, Hkv),
    ]);
    dh = o.op('Add', [dh, normBack(dn1, sv.ln1, `${L}ln1`)]);
  }

  // Embeddings. Repeated token ids must accumulate: ScatterND with reduction='add'.
  const zeros = (rows: number) => o.op('Expand', [o.c(0), o.i64([rows, D])]);
  grads.set('tok_emb', () => {
    const tokIdx = o.op('Reshape', [tokens, o.i64([-1, 1])]);
    const dTok = o.op('ScatterND', [zeros(V), tokIdx, o.rows(dh, D)], { reduction: str('add') });
    return s.tiedHead ? o.op('Add', [dTok, headGrad()]) : dTok;
  });
  if (s.positions === 'learned') {
    grads.set('pos_emb', () => {
      const posIdx = o.op('Reshape', [pos.ids, o.i64([-1, 1])]);
      const perPos = o.op('ReduceSum', [dh, axis0], { keepdims: int(0) }); // [S, D]
      return o.op('ScatterND', [zeros(s.maxSeq), posIdx, perPos], { reduction: str('add') });
    });
  }
  return all;
}
