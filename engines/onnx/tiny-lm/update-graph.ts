/**
 * The training graphs of tiny-lm.
 *
 *  - update graph (float32): K fused optimizer steps in one ONNX `Loop`; each
 *    step = forward → PPO/KL loss → hand-derived backward → global-norm clip →
 *    AdamW. θ, m, v are loop-carried; per-step metrics are scan outputs. Every
 *    step uses the whole batch (one minibatch; K = PPO epochs over it).
 *  - grad graph (float32 or float64): one forward/backward without the optimizer,
 *    returning the loss and the flat gradient — for finite-difference checks.
 *  - adamw graph (float32): clip + one AdamW step on given gradients — for the
 *    reference-step test.
 *
 * Batch rows are trained tokens: row t = (window of the W tokens before it, its
 * token id, advantage, old log-prob, weight w_t, optional reference log-prob).
 */
import { encodeModel, type FloatType, Graph, int } from '../graph/builder';
import { adamwStep, clipByGlobalNorm, optimizerLoop } from '../ops/adamw';
import { backward } from './backward';
import { forward, sliceParams } from './forward';
import { metricVector, rlObjective, type ObjectiveInputs, type ObjectiveValues } from '../ops/objective';
import { paramLayout, type TinyLmSpec } from '../../families/tiny-lm/spec';

/** The objective's per-row inputs plus the batch's windows (one row per trained token). */
interface BatchInputs extends Omit<ObjectiveInputs, 'targetsCol' | 'onehot' | 'nRows'> {
  windows: string;
  targets: string;
}

function declareBatch(g: Graph, spec: TinyLmSpec, ft: FloatType): BatchInputs {
  const f = (name: string, shape: (number | string)[] = ['N']) => g.input(name, ft, shape);
  return {
    windows: g.input('windows', 'int64', ['N', spec.contextWindow]),
    targets: g.input('targets', 'int64', ['N']),
    advantages: f('advantages'),
    oldLogp: f('old_logprobs'),
    weights: f('weights'),
    rowMask: f('row_mask'),
    refLogp: f('ref_logprobs'),
    hasRef: g.input('has_ref', 'bool', ['N']),
    clipLow: f('clip_low', []),
    clipHigh: f('clip_high', []),
    dualClip: f('dual_clip', []),
    klCoef: f('kl_coef', []),
    klIsK3: g.input('kl_is_k3', 'bool', []),
    entropyCoef: f('entropy_coef', []),
  };
}

/** Values that do not depend on θ, computed once outside the loop. */
interface Prepared {
  targetsCol: string;
  onehot: string;
  scatterIdx: string;
  nRows: string;
}

function prepare(g: Graph, spec: TinyLmSpec, ft: FloatType, x: BatchInputs): Prepared {
  const axis1 = g.constant('int64', [1]);
  const targetsCol = g.op('Unsqueeze', [x.targets, axis1]);
  const ids = g.constant(
    'int64',
    Array.from({ length: spec.vocabSize }, (_, i) => i),
    [1, spec.vocabSize],
  );
  const onehot = g.op('Cast', [g.op('Equal', [ids, targetsCol])], { to: int(ft === 'float32' ? 1 : 11) });
  const scatterIdx = g.op('Reshape', [x.windows, g.constant('int64', [-1, 1])]);
  const nRows = g.op('Max', [g.op('ReduceSum', [x.rowMask], { keepdims: int(0) }), g.constant(ft, 1)]);
  return { targetsCol, onehot, scatterIdx, nRows };
}

interface StepValues extends Omit<ObjectiveValues, 'dLogits'> {
  grad: string;
}

function lossAndGrad(g: Graph, spec: TinyLmSpec, ft: FloatType, theta: string, x: BatchInputs, pre: Prepared): StepValues {
  const p = sliceParams(g, spec, theta);
  const fw = forward(g, spec, p, x.windows);
  const { dLogits, ...values } = rlObjective(g, ft, fw.logp, { ...x, ...pre });
  return { ...values, grad: backward(g, spec, ft, p, fw, { dLogits, scatterIdx: pre.scatterIdx }) };
}

export function buildUpdateGraph(spec: TinyLmSpec): Uint8Array {
  const ft: FloatType = 'float32';
  const g = new Graph('tiny_lm_update');
  const x = declareBatch(g, spec, ft);
  const pre = prepare(g, spec, ft, x);
  optimizerLoop(g, ft, paramLayout(spec).total, (b, theta) => {
    const { grad, ...values } = lossAndGrad(b, spec, ft, theta, x, pre);
    return { grad, metrics: metricVector(b, ft, values) };
  });
  return encodeModel(g, 'tiny-lm update: K x (forward, PPO loss, backward, clip, AdamW) in one Loop');
}

/** Loss and flat gradient at θ, no optimizer (float64 variant for finite differences). */
export function buildGradGraph(spec: TinyLmSpec, ft: FloatType): Uint8Array {
  const g = new Graph('tiny_lm_grad');
  const theta = g.input('theta', ft, [paramLayout(spec).total]);
  const x = declareBatch(g, spec, ft);
  const pre = prepare(g, spec, ft, x);
  const st = lossAndGrad(g, spec, ft, theta, x, pre);
  g.output(st.loss, 'loss', ft, []);
  g.output(st.grad, 'grad', ft, [paramLayout(spec).total]);
  return encodeModel(g, 'tiny-lm loss and gradient');
}

/** Clip + one AdamW step on a given gradient (tests compare it to a TypeScript reference). */
export function buildAdamwGraph(): Uint8Array {
  const ft: FloatType = 'float32';
  const g = new Graph('adamw_step');
  const vec = (n: string) => g.input(n, ft, ['P']);
  const sc = (n: string) => g.input(n, ft, []);
  const theta = vec('theta');
  const m = vec('adam_m');
  const v = vec('adam_v');
  const grad = vec('grad');
  const clip = clipByGlobalNorm(g, ft, grad, sc('max_grad_norm'));
  const out = adamwStep(g, ft, {
    theta,
    m,
    v,
    grad: clip.clipped,
    lr: sc('lr'),
    beta1: sc('beta1'),
    beta2: sc('beta2'),
    eps: sc('eps'),
    weightDecay: sc('weight_decay'),
    stepSize: sc('step_size'),
    bc2Sqrt: sc('bc2_sqrt'),
  });
  g.output(out.theta, 'new_theta', ft, ['P']);
  g.output(out.m, 'new_adam_m', ft, ['P']);
  g.output(out.v, 'new_adam_v', ft, ['P']);
  g.output(clip.norm, 'grad_norm', ft, []);
  g.output(clip.clipped, 'clipped_grad', ft, ['P']);
  return encodeModel(g, 'clip + AdamW step');
}
