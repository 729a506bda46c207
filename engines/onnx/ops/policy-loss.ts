/**
 * PPO-clip policy loss with dual clip and an optional KL-to-reference term, per
 * trained token, as ONNX nodes — the formula of rl/loss-reference.ts, the reference it must equal:
 *
 *   ratio = exp(clamp(logp − logp_old, −20, 20))
 *   L1 = −A·ratio,  L2 = −A·clip(ratio, 1−ε_low, 1+ε_high),  L = max(L1, L2)
 *   dual clip (A < 0): L = min(L, −A·c)
 *   KL: k1 = logp − ref;  low_var_kl (k3) = clamp(e^x − x − 1, −10, 10), x = clamp(ref − logp, −20, 20)
 *   token loss L_t = L + kl_coef·KL_t (KL only where a reference log-prob is given)
 *   total loss = Σ_t w_t·L_t   (w_t: the caller's aggregation weight, 0 for untrained rows)
 *   (the entropy bonus −β_H·Σ w_t·H_t does not depend on logp_t alone; update-graph.ts adds it)
 *
 * This is the same function as rl/loss-reference.ts `policyLoss` (same kink rules: a clipped
 * or dual-clip branch wins only when it binds strictly, clamps pass the gradient
 * at their boundary); test/unit/engine/rl-loss-agreement.test.ts checks both agree.
 *
 * and its hand-derived derivative g_t = ∂loss/∂logp_t:
 *   policy part: −A·ratio·[|logp−old| ≤ 20] where L1 is the active branch; 0 where
 *     the clipped branch wins strictly (L2 > L1, ratio outside the clip range) or the
 *     dual clip is active (the loss is then constant in logp).
 *   k1: 1;  k3: (1 − e^x)·[e^x − x − 1 ≤ 10]  (x-clamp never binds below that bound)
 *   g_t = w_t·(policy part + kl_coef·KL part)
 */
import { type FloatType, type Graph } from '../graph/builder';

export interface LossInputs {
  /** log-prob of each row's target under the current policy [N] */
  logp: string;
  oldLogp: string;
  advantages: string;
  /** aggregation weight w_t [N] */
  weights: string;
  refLogp: string;
  /** bool [N]: a reference log-prob is given for this row */
  hasRef: string;
  clipLow: string;
  clipHigh: string;
  /** dual-clip constant c (+∞ disables) */
  dualClip: string;
  klCoef: string;
  /** bool scalar: true = low_var_kl (k3), false = k1 */
  klIsK3: string;
}

export interface LossValues {
  /** w_t·L_t per row [N] */
  weightedLoss: string;
  /** w_t·L_pg per row */
  weightedPg: string;
  /** w_t·KL_t per row (0 without reference) */
  weightedKl: string;
  /** ∂loss/∂logp_t [N] */
  dLogp: string;
  ratio: string;
  /** clamped log-ratio [N] */
  logRatio: string;
  /** bool [N]: the PPO clip binds strictly (L2 > L1) */
  ppoClipped: string;
  /** bool [N]: the dual clip binds strictly (A < 0, L > −A·c) */
  dualClipped: string;
}

export function policyLoss(g: Graph, ft: FloatType, x: LossInputs): LossValues {
  const c = (v: number) => g.constant(ft, v);
  const zero = c(0);
  const one = c(1);
  const diff = g.op('Sub', [x.logp, x.oldLogp]);
  const logRatio = g.op('Clip', [diff, c(-20), c(20)]);
  const ratio = g.op('Exp', [logRatio]);
  const negA = g.op('Neg', [x.advantages]);
  const l1 = g.op('Mul', [negA, ratio]);
  const lo = g.op('Sub', [one, x.clipLow]);
  const hi = g.op('Add', [one, x.clipHigh]);
  const l2 = g.op('Mul', [negA, g.op('Min', [g.op('Max', [ratio, lo]), hi])]);
  const useL2 = g.op('Greater', [l2, l1]);
  const lClip = g.op('Max', [l1, l2]);
  const l3 = g.op('Mul', [negA, x.dualClip]);
  const dualOn = g.op('And', [g.op('Less', [x.advantages, zero]), g.op('Greater', [lClip, l3])]);
  const lPg = g.op('Where', [dualOn, l3, lClip]);
  const clipped = g.op('Or', [useL2, dualOn]);
  const inRange = g.op('Equal', [diff, logRatio]); // |logp − old| ≤ 20
  const gPg = g.op('Where', [g.op('And', [g.op('Not', [clipped]), inRange]), l1, zero]); // −A·ratio

  // KL to the reference policy.
  const k1 = g.op('Sub', [x.logp, x.refLogp]);
  const xr = g.op('Clip', [g.op('Sub', [x.refLogp, x.logp]), c(-20), c(20)]);
  const ex = g.op('Exp', [xr]);
  const k3raw = g.op('Sub', [g.op('Sub', [ex, xr]), one]);
  const k3 = g.op('Clip', [k3raw, c(-10), c(10)]);
  const dk3 = g.op('Where', [g.op('LessOrEqual', [k3raw, c(10)]), g.op('Sub', [one, ex]), zero]);
  const kl = g.op('Where', [x.hasRef, g.op('Where', [x.klIsK3, k3, k1]), zero]);
  const dKl = g.op('Where', [x.hasRef, g.op('Where', [x.klIsK3, dk3, one]), zero]);

  const weightedPg = g.op('Mul', [x.weights, lPg]);
  const weightedKl = g.op('Mul', [x.weights, kl]);
  const weightedLoss = g.op('Mul', [x.weights, g.op('Add', [lPg, g.op('Mul', [x.klCoef, kl])])]);
  const dLogp = g.op('Mul', [x.weights, g.op('Add', [gPg, g.op('Mul', [x.klCoef, dKl])])]);
  return { weightedLoss, weightedPg, weightedKl, dLogp, ratio, logRatio, ppoClipped: g.op('And', [useL2, g.op('Not', [dualOn])]), dualClipped: dualOn };
}
