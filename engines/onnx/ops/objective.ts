/**
 * The per-token RL objective over rows of log-softmax outputs, as ONNX nodes,
 * shared by every model family's update graph: PPO loss + KL (policy-loss.ts)
 * − entropy bonus, its derivative w.r.t. the logits (where each family's
 * hand-built backward starts), and the step metrics.
 *
 *   dlogits = g ⊙ (onehot(target) − softmax)         (through log-softmax, per row; g = ∂loss/∂logp_t)
 *           + e ⊙ (−softmax ⊙ (logp + H))           (entropy bonus: e = ∂loss/∂H = −β_H·w_t, ∂H/∂z = −p(logp + H))
 */
import { type FloatType, type Graph, int } from '../graph/builder';
import { STEP_METRICS } from '../model-runtime';
import { policyLoss, type LossInputs } from './policy-loss';

/** The loss inputs (logp comes from the model) plus each row's target and row mask. */
export interface ObjectiveInputs extends Omit<LossInputs, 'logp'> {
  /** int64 [N, 1] target token of each row */
  targetsCol: string;
  /** float one-hot of each row's target [N, V] */
  onehot: string;
  /** 1 for rows counted in the mean metrics (trained, w ≠ 0), else 0 (padding) */
  rowMask: string;
  /** max(Σ rowMask, 1) */
  nRows: string;
  /** entropy bonus coefficient β_H (loss −= β_H·Σ w_t·H_t) */
  entropyCoef: string;
}

export interface ObjectiveValues {
  /** ∂loss/∂logits [N, V] */
  dLogits: string;
  loss: string;
  pgLoss: string;
  klLoss: string;
  /** Σ w_t·H_t */
  entropySum: string;
  clipFraction: string;
  dualClipFraction: string;
  approxKl: string;
  entropy: string;
}

/** logp: log-softmax rows [N, V] of the policy at temperature 1. */
export function rlObjective(g: Graph, ft: FloatType, logp: string, x: ObjectiveInputs): ObjectiveValues {
  const axis1 = g.constant('int64', [1]);
  const zero = g.constant(ft, 0);
  const tokenLogp = g.op('Squeeze', [g.op('GatherElements', [logp, x.targetsCol], { axis: int(1) }), axis1]);
  const lv = policyLoss(g, ft, {
    logp: tokenLogp,
    oldLogp: x.oldLogp,
    advantages: x.advantages,
    weights: x.weights,
    refLogp: x.refLogp,
    hasRef: x.hasRef,
    clipLow: x.clipLow,
    clipHigh: x.clipHigh,
    dualClip: x.dualClip,
    klCoef: x.klCoef,
    klIsK3: x.klIsK3,
  });
  const softmax = g.op('Exp', [logp]);
  const rowEntropy = g.op('Neg', [g.op('ReduceSum', [g.op('Mul', [softmax, logp]), axis1], { keepdims: int(0) })]);
  const dEntropy = g.op('Neg', [g.op('Mul', [x.entropyCoef, x.weights])]);

  const dLogp = g.op('Unsqueeze', [lv.dLogp, axis1]);
  const dPolicy = g.op('Mul', [dLogp, g.op('Sub', [x.onehot, softmax])]);
  const dH = g.op('Neg', [g.op('Mul', [softmax, g.op('Add', [logp, g.op('Unsqueeze', [rowEntropy, axis1])])])]);
  const dLogits = g.op('Add', [dPolicy, g.op('Mul', [g.op('Unsqueeze', [dEntropy, axis1]), dH])]);

  const sum = (t: string) => g.op('ReduceSum', [t], { keepdims: int(0) });
  const rowMean = (t: string) => g.op('Div', [sum(g.op('Mul', [x.rowMask, t])), x.nRows]);
  const indicator = (b: string) => g.op('Where', [b, g.constant(ft, 1), zero]);
  const entropySum = sum(g.op('Mul', [x.weights, rowEntropy]));
  return {
    dLogits,
    loss: g.op('Sub', [sum(lv.weightedLoss), g.op('Mul', [x.entropyCoef, entropySum])]),
    pgLoss: sum(lv.weightedPg),
    klLoss: sum(lv.weightedKl),
    entropySum,
    clipFraction: rowMean(indicator(lv.ppoClipped)),
    dualClipFraction: rowMean(indicator(lv.dualClipped)),
    approxKl: rowMean(g.op('Sub', [g.op('Sub', [lv.ratio, g.constant(ft, 1)]), lv.logRatio])),
    entropy: rowMean(rowEntropy),
  };
}

/** The objective's values as a [STEP_METRICS] vector; grad_norm is 0 here (the optimizer measures it). */
export function metricVector(g: Graph, ft: FloatType, v: Omit<ObjectiveValues, 'dLogits'>): string {
  const byName: Record<(typeof STEP_METRICS)[number], string> = {
    loss: v.loss,
    pg_loss: v.pgLoss,
    kl_loss: v.klLoss,
    entropy_sum: v.entropySum,
    grad_norm: g.constant(ft, 0),
    clip_fraction: v.clipFraction,
    dual_clip_fraction: v.dualClipFraction,
    approx_kl: v.approxKl,
    entropy: v.entropy,
  };
  const axis0 = g.constant('int64', [0]);
  return g.op(
    'Concat',
    STEP_METRICS.map((n) => g.op('Unsqueeze', [byName[n], axis0])),
    { axis: int(0) },
  );
}
