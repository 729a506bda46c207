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
 *
 * `optimizerLoop` is the K-step `Loop` every family's update graph ends in.
 */
import { type FloatType, type Graph, graphAttr, int } from '../graph/builder';
import { STEP_METRICS } from '../model-runtime';

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
  const v = g.op('Add', [g.op('Mul', [x.beta2, x.v]), g.op('Mul', [g.op('Sub', [one, x.beta2]), g.op('Mul', [x.grad, x.grad])])]);
  const denom = g.op('Add', [g.op('Div', [g.op('Sqrt', [v]), x.bc2Sqrt]), x.eps]);
  const theta = g.op('Sub', [decayed, g.op('Mul', [x.stepSize, g.op('Div', [m, denom])])]);
  return { theta, m, v };
}

/** Host-side per-step constants for steps t = first .. first+k−1 (1-based), rounded to float32. */
export function biasCorrections(lr: number, beta1: number, beta2: number, first: number, k: number): { stepSize: Float32Array; bc2Sqrt: Float32Array } {
  const stepSize = new Float32Array(k);
  const bc2Sqrt = new Float32Array(k);
  for (let i = 0; i < k; i++) {
    const t = first + i;
    stepSize[i] = lr / (1 - Math.pow(beta1, t));
    bc2Sqrt[i] = Math.sqrt(1 - Math.pow(beta2, t));
  }
  return { stepSize, bc2Sqrt };
}

const OPT_SCALARS = ['lr', 'beta1', 'beta2', 'eps', 'weight_decay', 'max_grad_norm'] as const;

/**
 * The fused optimizer of an update graph: declares θ, m, v (`theta`, `adam_m`, `adam_v` [P]), the
 * optimizer scalars, the per-step `step_size` / `bc2_sqrt` [K] and `steps` as inputs, and runs K
 * iterations of: `gradient` (built in the Loop body at that iteration's θ) → global-norm clip → AdamW.
 * `gradient` also gives the step's metrics vector [STEP_METRICS] at θ; its grad_norm slot is replaced
 * by the pre-clip norm. Outputs new_theta, new_adam_m, new_adam_v and metrics [K, STEP_METRICS].
 */
export function optimizerLoop(g: Graph, ft: FloatType, P: number, gradient: (b: Graph, theta: string) => { grad: string; metrics: string }): void {
  const nMetrics = STEP_METRICS.length;
  const theta0 = g.input('theta', ft, [P]);
  const m0 = g.input('adam_m', ft, [P]);
  const v0 = g.input('adam_v', ft, [P]);
  const s = Object.fromEntries(OPT_SCALARS.map((n) => [n, g.input(n, ft, [])])) as Record<(typeof OPT_SCALARS)[number], string>;
  const stepSizes = g.input('step_size', ft, ['K']);
  const bc2Sqrts = g.input('bc2_sqrt', ft, ['K']);
  const steps = g.input('steps', 'int64', []);
  const gradNormSlot = g.constant(
    'bool',
    STEP_METRICS.map((n) => (n === 'grad_norm' ? 1 : 0)),
    [nMetrics],
  );

  const b = g.subgraph('update_step');
  const iter = b.input('iter', 'int64', []);
  const condIn = b.input('cond_in', 'bool', []);
  const thetaIn = b.input('theta_in', ft, [P]);
  const mIn = b.input('m_in', ft, [P]);
  const vIn = b.input('v_in', ft, [P]);
  const st = gradient(b, thetaIn);
  const clip = clipByGlobalNorm(b, ft, st.grad, s.max_grad_norm);
  const next = adamwStep(b, ft, {
    theta: thetaIn,
    m: mIn,
    v: vIn,
    grad: clip.clipped,
    lr: s.lr,
    beta1: s.beta1,
    beta2: s.beta2,
    eps: s.eps,
    weightDecay: s.weight_decay,
    stepSize: b.op('Gather', [stepSizes, iter], { axis: int(0) }),
    bc2Sqrt: b.op('Gather', [bc2Sqrts, iter], { axis: int(0) }),
  });
  b.output(b.op('Identity', [condIn]), 'cond_out', 'bool', []);
  b.output(next.theta, 'theta_out', ft, [P]);
  b.output(next.m, 'm_out', ft, [P]);
  b.output(next.v, 'v_out', ft, [P]);
  b.output(b.op('Where', [gradNormSlot, clip.norm, st.metrics]), 'metrics_out', ft, [nMetrics]);

  const [theta, m, v, metrics] = g.opN('Loop', [steps, g.constant('bool', 1), theta0, m0, v0], 4, { body: graphAttr(b.toProto()) });
  g.output(theta, 'new_theta', ft, [P]);
  g.output(m, 'new_adam_m', ft, [P]);
  g.output(v, 'new_adam_v', ft, [P]);
  g.output(metrics, 'metrics', ft, ['K', nMetrics]);
}
