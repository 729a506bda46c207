/**
 * The training graphs of the transformer family.
 *
 *  - update graph (float32): K fused optimizer steps in one ONNX `Loop`; each
 *    step = forward → RL objective (tiny-lm/objective.ts: PPO/KL as rl/loss.ts,
 *    entropy bonus) → hand-built backward (backward.ts) → global-norm clip →
 *    AdamW (tiny-lm/adamw.ts). θ, m, v are loop-carried; per-step metrics
 *    (tiny-lm STEP_METRICS order) are scan outputs.
 *  - grad graph (float32 or float64): loss and flat gradient at θ, no optimizer
 *    — for finite-difference and reference checks.
 *
 * Batch layout: B right-padded sequences of S tokens. Row (b, p) is the
 * prediction at position p of targets[b, p] (normally tokens[b, p+1]); rows
 * with weight 0 (context, padding) contribute nothing.
 */
import { encodeModel, FloatType, Graph, graphAttr, int } from '../onnx/builder';
import { adamwStep, clipByGlobalNorm } from '../tiny-lm/adamw';
import { rlObjective, type ObjectiveInputs, type ObjectiveValues } from '../tiny-lm/objective';
import { STEP_METRICS } from '../tiny-lm/update-graph';
import { backward } from './backward';
import { forward, Ops, sequencePositions, sliceParams } from './forward';
import { paramLayout, TransformerSpec } from './spec';

interface BatchInputs extends Omit<ObjectiveInputs, 'targetsCol' | 'onehot' | 'nRows'> {
  tokens: string;
  targets: string;
}

/** Per-row inputs are [B, S] (flattened to rows inside); settings are scalars. */
function declareBatch(g: Graph, ft: FloatType): BatchInputs {
  const f = (name: string, shape: (number | string)[] = ['B', 'S']) => g.input(name, ft, shape);
  const flat = (t: string) => g.op('Reshape', [t, g.constant('int64', [-1])]);
  return {
    tokens: g.input('tokens', 'int64', ['B', 'S']),
    targets: flat(g.input('targets', 'int64', ['B', 'S'])),
    advantages: flat(f('advantages')),
    oldLogp: flat(f('old_logprobs')),
    weights: flat(f('weights')),
    rowMask: flat(f('row_mask')),
    refLogp: flat(f('ref_logprobs')),
    hasRef: flat(g.input('has_ref', 'bool', ['B', 'S'])),
    clipLow: f('clip_low', []),
    clipHigh: f('clip_high', []),
    dualClip: f('dual_clip', []),
    klCoef: f('kl_coef', []),
    klIsK3: g.input('kl_is_k3', 'bool', []),
    entropyCoef: f('entropy_coef', []),
  };
}

/** Values that do not depend on θ, computed once outside the loop. */
function prepare(g: Graph, spec: TransformerSpec, ft: FloatType, x: BatchInputs): Pick<ObjectiveInputs, 'targetsCol' | 'onehot' | 'nRows'> {
  const targetsCol = g.op('Unsqueeze', [x.targets, g.constant('int64', [1])]);
  const ids = g.constant('int64', Array.from({ length: spec.vocabSize }, (_, i) => i), [1, spec.vocabSize]);
  const onehot = g.op('Cast', [g.op('Equal', [ids, targetsCol])], { to: int(ft === 'float32' ? 1 : 11) });
  const nRows = g.op('Max', [g.op('ReduceSum', [x.rowMask], { keepdims: int(0) }), g.constant(ft, 1)]);
  return { targetsCol, onehot, nRows };
}

interface StepValues extends Omit<ObjectiveValues, 'dLogits'> {
  grad: string;
}

function lossAndGrad(g: Graph, spec: TransformerSpec, ft: FloatType, theta: string, x: BatchInputs, pre: ReturnType<typeof prepare>): StepValues {
  const o = new Ops(g, spec, ft);
  const w = sliceParams(g, spec, theta);
  const pos = sequencePositions(o, x.tokens);
  const fw = forward(o, w, x.tokens, pos);
  const logpRows = o.rows(fw.logp, spec.vocabSize);
  const { dLogits, ...values } = rlObjective(g, ft, logpRows, { ...x, ...pre });
  return { ...values, grad: backward(o, w, fw, x.tokens, pos, dLogits) };
}

const OPT_SCALARS = ['lr', 'beta1', 'beta2', 'eps', 'weight_decay', 'max_grad_norm'] as const;

export function buildTransformerUpdateGraph(spec: TransformerSpec): Uint8Array {
  const ft: FloatType = 'float32';
  const P = paramLayout(spec).total;
  const g = new Graph('transformer_update');
  const theta0 = g.input('theta', ft, [P]);
  const m0 = g.input('adam_m', ft, [P]);
  const v0 = g.input('adam_v', ft, [P]);
  const x = declareBatch(g, ft);
  const s = Object.fromEntries(OPT_SCALARS.map((n) => [n, g.input(n, ft, [])])) as Record<(typeof OPT_SCALARS)[number], string>;
  const stepSizes = g.input('step_size', ft, ['K']);
  const bc2Sqrts = g.input('bc2_sqrt', ft, ['K']);
  const steps = g.input('steps', 'int64', []);
  const pre = prepare(g, spec, ft, x);

  const b = g.subgraph('update_step');
  const iter = b.input('iter', 'int64', []);
  const condIn = b.input('cond_in', 'bool', []);
  const thetaIn = b.input('theta_in', ft, [P]);
  const mIn = b.input('m_in', ft, [P]);
  const vIn = b.input('v_in', ft, [P]);
  const st = lossAndGrad(b, spec, ft, thetaIn, x, pre);
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
  const axis0 = b.constant('int64', [0]);
  const byName: Record<(typeof STEP_METRICS)[number], string> = {
    loss: st.loss,
    pg_loss: st.pgLoss,
    kl_loss: st.klLoss,
    entropy_sum: st.entropySum,
    grad_norm: clip.norm,
    clip_fraction: st.clipFraction,
    dual_clip_fraction: st.dualClipFraction,
    approx_kl: st.approxKl,
    entropy: st.entropy,
  };
  const metricVec = b.op('Concat', STEP_METRICS.map((n) => b.op('Unsqueeze', [byName[n], axis0])), { axis: int(0) });
  b.output(b.op('Identity', [condIn]), 'cond_out', 'bool', []);
  b.output(next.theta, 'theta_out', ft, [P]);
  b.output(next.m, 'm_out', ft, [P]);
  b.output(next.v, 'v_out', ft, [P]);
  b.output(metricVec, 'metrics_out', ft, [STEP_METRICS.length]);

  const [theta, m, v, metrics] = g.opN('Loop', [steps, g.constant('bool', 1), theta0, m0, v0], 4, { body: graphAttr(b.toProto()) });
  g.output(theta, 'new_theta', ft, [P]);
  g.output(m, 'new_adam_m', ft, [P]);
  g.output(v, 'new_adam_v', ft, [P]);
  g.output(metrics, 'metrics', ft, ['K', STEP_METRICS.length]);
  return encodeModel(g, 'transformer update: K x (forward, PPO loss, backward, clip, AdamW) in one Loop');
}

/** Loss and flat gradient at θ, no optimizer (float64 variant for finite differences). */
export function buildTransformerGradGraph(spec: TransformerSpec, ft: FloatType): Uint8Array {
  const g = new Graph('transformer_grad');
  const P = paramLayout(spec).total;
  const theta = g.input('theta', ft, [P]);
  const x = declareBatch(g, ft);
  const st = lossAndGrad(g, spec, ft, theta, x, prepare(g, spec, ft, x));
  g.output(st.loss, 'loss', ft, []);
  g.output(st.grad, 'grad', ft, [P]);
  return encodeModel(g, 'transformer loss and gradient');
}
