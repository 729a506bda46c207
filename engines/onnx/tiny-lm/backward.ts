/**
 * Hand-derived backward pass of the tiny-lm forward (forward.ts), as ONNX nodes.
 *
 *   dlogits from objective.ts (loss through log-softmax)
 *   dWo = hᵀ·dlogits, dbo = Σ_rows dlogits, dh = dlogits·Woᵀ
 *   per layer l (last to first), a = act(pre):
 *     dpre = dh ⊙ act'(a)   (tanh: 1 − a², relu: [a > 0])
 *     dW_l = inᵀ·dpre, db_l = Σ_rows dpre, d_in = dpre·W_lᵀ
 *     residual layers (l ≥ 2): dh ← dh + d_in; first layer: dx = d_in
 *   dEmb = ScatterND(0, window ids, dx rows, reduction='add') — repeated token ids
 *     (within a window and across rows) must accumulate, hence reduction='add'.
 * Returns the gradient flattened in the θ layout (spec.ts paramLayout).
 */
import { type FloatType, type Graph, int, str } from '../graph/builder';
import { type ForwardValues, type Params } from './forward';
import { type TinyLmSpec } from '../../families/tiny-lm/spec';

export interface BackwardInputs {
  /** ∂loss/∂logits [N, V] (objective.ts) */
  dLogits: string;
  /** int64 [N·W, 1] window ids, as ScatterND indices */
  scatterIdx: string;
}

export function backward(g: Graph, spec: TinyLmSpec, ft: FloatType, p: Params, fw: ForwardValues, x: BackwardInputs): string {
  const axis0 = g.constant('int64', [0]);
  const rowSum = (t: string) => g.op('ReduceSum', [t, axis0], { keepdims: int(0) });
  const tMatMul = (a: string, b: string) => g.op('Gemm', [a, b], { transA: int(1) }); // aᵀ·b
  const matMulT = (a: string, b: string) => g.op('Gemm', [a, b], { transB: int(1) }); // a·bᵀ
  const dLogits = x.dLogits;

  const L = spec.layers;
  const hLast = fw.h[L - 1]!;
  const dWo = tMatMul(hLast, dLogits);
  const dbo = rowSum(dLogits);
  let dh = matMulT(dLogits, p.wo);
  const dW: string[] = new Array(L);
  const db: string[] = new Array(L);
  let dx = '';
  const one = g.constant(ft, 1);
  for (let l = L - 1; l >= 0; l--) {
    const a = fw.a[l]!;
    const dAct =
      spec.activation === 'tanh'
        ? g.op('Sub', [one, g.op('Mul', [a, a])])
        : g.op('Cast', [g.op('Greater', [a, g.constant(ft, 0)])], { to: int(ft === 'float32' ? 1 : 11) });
    const dPre = g.op('Mul', [dh, dAct]);
    const input = l === 0 ? fw.x : fw.h[l - 1]!;
    dW[l] = tMatMul(input, dPre);
    db[l] = rowSum(dPre);
    const dIn = matMulT(dPre, p.w[l]!);
    if (l > 0) dh = g.op('Add', [dh, dIn]);
    else dx = dIn;
  }
  const E = spec.embedDim;
  const dxRows = g.op('Reshape', [dx, g.constant('int64', [-1, E])]); // [N·W, E]
  const zeros = g.constant(ft, new Array((spec.vocabSize + 1) * E).fill(0), [spec.vocabSize + 1, E]);
  const dEmb = g.op('ScatterND', [zeros, x.scatterIdx, dxRows], { reduction: str('add') });

  const flat = (t: string) => g.op('Reshape', [t, g.constant('int64', [-1])]);
  const parts = [flat(dEmb)];
  for (let l = 0; l < L; l++) parts.push(flat(dW[l]!), db[l]!);
  parts.push(flat(dWo), dbo);
  return g.op('Concat', parts, { axis: int(0) }, 'grad');
}
