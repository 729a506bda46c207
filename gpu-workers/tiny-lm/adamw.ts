/**
 * Global-norm gradient clipping and one AdamW step (decoupled weight decay), as
 * ONNX nodes over the flat θ. The op order is fixed and mirrored exactly by
 * `adamwReference` (test/unit/engine) so the float32 results can be compared
 * bit for bit:
 *
 *   norm  = sqrt(Σ g²);  g ← g · min(1, max_norm / (norm + 1e−6))   (max_norm = +∞: off)
 *   θ ← θ · (1 − lr·wd)
 *   m ← β1·m + (1−β1)·g
 *   v ← β2·v + (1−β2)·(g·g)
 *   θ ← θ − step_size · (m / (sqrt(v) / bc2_sqrt + eps))
 * with step_size = lr / (1 − β1^t) and bc2_sqrt = sqrt(1 − β2^t), both computed in
 * double precision by the host for each step t and passed in (rounded to float32).
 */
import { FloatType, Graph, int } from '../onnx/builder';

export interface ClipValues {
  clipped: string;
  norm: string;
}

export function clipByGlobalNorm(g: Graph, ft: FloatType, grad: string, maxNorm: string): ClipValues {
  const norm = g.op('Sqrt', [g.op('ReduceSum', [g.op('Mul', [grad, grad])], { keepdims: int(0) })], {}, 'grad_norm');
  const coef = g.op('Min', [g.constant(ft, 1), g.op('Div', [maxNorm, g.op('Add', [norm, g.constant(ft, 1e-6)])])]);
  return { clipped: g.op('Mul', [grad, coef]), norm };
}

export interface AdamwInputs {
  theta: string;
  m: string;
  v: string;
  grad: string;
  lr: string;
  beta1: string;
  beta2: string;
  eps: string;
  weightDecay: string;
  stepSize: string;
  bc2Sqrt: string;
}

export interface AdamwValues {
  theta: string;
  m: string;
  v: string;
}

export function adamwStep(g: Graph, ft: FloatType, x: AdamwInputs): AdamwValues {
  const one = g.constant(ft, 1);
  const decay = g.op('Sub', [one, g.op('Mul', [x.lr, x.weightDecay])]);
  const decayed = g.op('Mul', [x.theta, decay]);
  const m = g.op('Add', [g.op('Mul', [x.beta1, x.m]), g.op('Mul', [g.op('Sub', [one, x.beta1]), x.grad])]);
  const v = g.op('Add', [
    g.op('Mul', [x.beta2, x.v]),
    g.op('Mul', [g.op('Sub', [one, x.beta2]), g.op('Mul', [x.grad, x.grad])]),
  ]);
  const denom = g.op('Add', [g.op('Div', [g.op('Sqrt', [v]), x.bc2Sqrt]), x.eps]);
  const theta = g.op('Sub', [decayed, g.op('Mul', [x.stepSize, g.op('Div', [m, denom])])]);
  return { theta, m, v };
}

/** Host-side per-step constants for steps t = first .. first+k−1 (1-based), rounded to float32. */
export function biasCorrections(
  lr: number,
  beta1: number,
  beta2: number,
  first: number,
  k: number,
): { stepSize: Float32Array; bc2Sqrt: Float32Array } {
  const stepSize = new Float32Array(k);
  const bc2Sqrt = new Float32Array(k);
  for (let i = 0; i < k; i++) {
    const t = first + i;
    stepSize[i] = lr / (1 - Math.pow(beta1, t));
    bc2Sqrt[i] = Math.sqrt(1 - Math.pow(beta2, t));
  }
  return { stepSize, bc2Sqrt };
}
