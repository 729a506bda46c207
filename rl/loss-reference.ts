/**
 * THE REFERENCE of the policy loss, not the loss that trains. Training runs the loss
 * inside the engines, on the device, in each engine's own code: the built-in ONNX
 * engine's update graph (engines/onnx/ops/policy-loss.ts and objective.ts) and the
 * PyTorch engine's (engines/pytorch/update.py), reached by Update over gRPC. This
 * file is the plain float64 TypeScript statement of the same function, the oracle
 * they are tested against (test/unit/engine/rl-loss-agreement.test.ts) and what
 * test/unit/rl/loss.test.ts checks by hand. Nothing in a training step calls it.
 *
 * PPO-clip policy loss per token, with its exact gradient coefficient.
 *
 * For token t with advantage A, log-prob logp under the policy being updated,
 * logp_old under the policy that sampled it, and aggregation weight w (from
 * tokens.ts):
 *
 *   ratio = exp(clamp(logp − logp_old, −20, 20))
 *   L_pg  = max(−A·ratio, −A·clip(ratio, 1 − ε_low, 1 + ε_high))
 *   if A < 0 (dual clip): L_pg = min(L_pg, −A·c)
 *   KL    = k1: logp − ref
 *           low_var_kl (k3): clamp(exp(ref − logp) − (ref − logp) − 1, −10, 10)
 *   loss  = Σ_t w_t·(L_pg,t + β_kl·KL_t) − β_H·Σ_t w_t·H_t
 *
 * Decoupled PPO (asynchronous runs, staleness k > 0): the tokens were sampled
 * by a behaviour version older than the update's base version (the proximal
 * policy). logp_old is then the proximal log-prob (Score at the base version)
 * and each token's PPO term is scaled by a truncated importance weight, held
 * fixed (no gradient):
 *
 *   w_t   = min(exp(clamp(logp_prox − logp_behav, −20, 20)), cap)
 *   L_pg  = w_t·max(−A·ratio, −A·clip(ratio, 1 − ε_low, 1 + ε_high))   (dual clip scaled alike)
 *
 * Since w_t ≥ 0, w_t·L_pg(A) = L_pg(w_t·A) token by token (the clip and the
 * dual clip depend on A only through its sign): an engine that implements the
 * plain loss trains the decoupled one when given advantages w_t·A and
 * logp_old = logp_prox. With k = 0 no weights are given (w_t ≡ 1). The
 * other off-policy corrections (rl/corrections/: TIS, MIS, IcePop) differ only in
 * how w_t is computed from the ratios π_prox/π_behav, masking being w_t = 0.
 *
 * Gradient coefficient: g_t = ∂loss/∂logp_t with logp_old, ref, A, w and the
 * entropy H_t held fixed. The engine backpropagates g_t through log-softmax
 * (∂logp_t/∂z = onehot − softmax). The entropy bonus is NOT in g_t: H_t
 * depends on the whole distribution at t, not on logp_t, so its gradient is
 * returned separately as e_t = ∂loss/∂H_t = −β_H·w_t, for the engine to
 * multiply with ∂H_t/∂z. The full logit gradient is g_t·∂logp_t/∂z + e_t·∂H_t/∂z.
 *
 * Kinks (subgradient choice, one rule): a max/min picks the branch that
 * depends on logp whenever the branches tie — the constant branch (clipped
 * ratio, dual-clip bound) is taken only when it binds strictly — and a clamp
 * passes the gradient at its boundary (like torch.clamp). So g_t = 0 exactly
 * when the PPO clip or dual clip binds strictly, or when |logp − logp_old| > 20,
 * or when k3 exceeds 10.
 *
 * Settings and their defaults: loss-settings.ts.
 *
 * Simplified: one flat token array (concatenate samples with tokens.flatten);
 * diagnostics are plain means over tokens with w_t ≠ 0 (verl's masked_mean),
 * not weighted by w. The loss is a sum over tokens, so computing it per agent
 * slice and adding the results is exact.
 */

import { IssueList } from './errors';
import { DEFAULT_POLICY_LOSS_SETTINGS, K3_CLAMP, KL_TYPES, LOG_RATIO_CLAMP, type PolicyLossSettings } from './loss-settings';

export interface PolicyLossInput {
  logp: ArrayLike<number>;
  logpOld: ArrayLike<number>;
  /** Per-token advantages (tokens.broadcastAdvantages). */
  advantages: ArrayLike<number>;
  /** Per-token aggregation weights (tokens.aggregationWeights). */
  weights: ArrayLike<number>;
  /** Reference-policy log-probs; required when kl.type is not 'none'. */
  refLogp?: ArrayLike<number>;
  /** Per-token entropy of the current policy; required when entropyCoef ≠ 0. */
  entropy?: ArrayLike<number>;
  /** Off-policy weights (rl/corrections importanceWeights); absent: 1. */
  isWeights?: ArrayLike<number>;
}

export interface PolicyLossDiagnostics {
  /** Tokens with w_t ≠ 0. */
  tokens: number;
  /** Fraction of those where the PPO clip binds strictly. */
  clipFraction: number;
  /** Fraction where the dual clip binds strictly (A < 0 only). */
  dualClipFraction: number;
  /** Mean k3 estimate of KL(old ‖ new): ratio − 1 − log ratio. */
  approxKl: number;
  /** Mean entropy, or null when no entropy was given. */
  entropy: number | null;
  ratioMean: number;
  ratioMax: number;
}

export interface PolicyLossOutput {
  /** pg + kl.coef·kl − entropyCoef·entropy. */
  loss: number;
  /** Σ w·L_pg, Σ w·KL (before its coefficient), Σ w·H (before its coefficient). */
  pg: number;
  kl: number;
  entropy: number;
  /** g_t = ∂loss/∂logp_t. */
  grad: Float64Array;
  /** e_t = ∂loss/∂H_t = −entropyCoef·w_t. */
  entropyGrad: Float64Array;
  diagnostics: PolicyLossDiagnostics;
}

export function resolveLossSettings(settings: Partial<PolicyLossSettings> = {}): PolicyLossSettings {
  const s: PolicyLossSettings = {
    ...DEFAULT_POLICY_LOSS_SETTINGS,
    ...settings,
    kl: { ...DEFAULT_POLICY_LOSS_SETTINGS.kl, ...settings.kl },
  };
  const issues = new IssueList();
  if (!(s.clipLow >= 0 && s.clipLow < 1)) issues.add('clipLow', `must be in [0, 1), got ${s.clipLow}`);
  if (!(s.clipHigh >= 0 && Number.isFinite(s.clipHigh))) issues.add('clipHigh', `must be ≥ 0, got ${s.clipHigh}`);
  if (s.dualClip !== null && !(s.dualClip > 1 && Number.isFinite(s.dualClip))) issues.add('dualClip', `must be > 1 or null, got ${s.dualClip}`);
  if (!KL_TYPES.includes(s.kl.type)) issues.add('kl.type', `must be one of ${KL_TYPES.join(', ')}, got ${String(s.kl.type)}`);
  if (!(s.kl.coef >= 0 && Number.isFinite(s.kl.coef))) issues.add('kl.coef', `must be ≥ 0, got ${s.kl.coef}`);
  if (!Number.isFinite(s.entropyCoef)) issues.add('entropyCoef', `must be a finite number, got ${s.entropyCoef}`);
  issues.throwIfAny();
  return s;
}

function checkInput(input: PolicyLossInput, s: PolicyLossSettings): number {
  const n = input.logp.length;
  const issues = new IssueList();
  const arrays: [string, ArrayLike<number> | undefined][] = [
    ['logp', input.logp],
    ['logpOld', input.logpOld],
    ['advantages', input.advantages],
    ['weights', input.weights],
    ['refLogp', input.refLogp],
    ['entropy', input.entropy],
    ['isWeights', input.isWeights],
  ];
  if (s.kl.type !== 'none' && input.refLogp === undefined) issues.add('refLogp', `is required for kl.type ${s.kl.type}`);
  if (s.entropyCoef !== 0 && input.entropy === undefined) issues.add('entropy', 'is required when entropyCoef ≠ 0');
  for (const [name, a] of arrays) {
    if (a === undefined) continue;
    if (a.length !== n) {
      issues.add(name, `expected ${n} tokens (as logp), got ${a.length}`);
      continue;
    }
    for (let t = 0; t < n; t++)
      if (!Number.isFinite(a[t])) {
        issues.add(`${name}[${t}]`, `must be a finite number, got ${a[t]}`);
        break;
      }
  }
  issues.throwIfAny();
  return n;
}

export function policyLoss(input: PolicyLossInput, settings: Partial<PolicyLossSettings> = {}): PolicyLossOutput {
  const s = resolveLossSettings(settings);
  const n = checkInput(input, s);
  const { logp, logpOld, advantages, weights, refLogp, entropy, isWeights } = input;
  const lo = 1 - s.clipLow;
  const hi = 1 + s.clipHigh;
  const c = s.dualClip;
  const klCoef = s.kl.type === 'none' ? 0 : s.kl.coef;

  const grad = new Float64Array(n);
  const entropyGrad = new Float64Array(n);
  let pg = 0;
  let kl = 0;
  let ent = 0;
  let tokens = 0;
  let clipped = 0;
  let dualClipped = 0;
  let approxKl = 0;
  let entropySum = 0;
  let ratioSum = 0;
  let ratioMax = 0;

  for (let t = 0; t < n; t++) {
    const w = weights[t]!;
    const A = advantages[t]!;

    // Ratio; the clamp passes gradient on [−20, 20] inclusive.
    const d = logp[t]! - logpOld[t]!;
    const dc = Math.min(Math.max(d, -LOG_RATIO_CLAMP), LOG_RATIO_CLAMP);
    const ratio = Math.exp(dc);
    const dRatio = d >= -LOG_RATIO_CLAMP && d <= LOG_RATIO_CLAMP ? ratio : 0;

    // PPO clip: the clipped branch wins only when strictly larger.
    const unclippedLoss = -A * ratio;
    const clippedLoss = -A * Math.min(Math.max(ratio, lo), hi);
    let L = unclippedLoss;
    let dL = -A * dRatio;
    let clipState = 0;
    if (clippedLoss > unclippedLoss) {
      L = clippedLoss;
      dL = 0;
      clipState = 1;
    }
    // Dual clip bounds the loss of negative-advantage tokens at −A·c.
    if (A < 0 && c !== null && L > -A * c) {
      L = -A * c;
      dL = 0;
      clipState = 2;
    }

    // KL to the reference.
    let klT = 0;
    let dKl = 0;
    if (s.kl.type === 'k1') {
      klT = logp[t]! - refLogp![t]!;
      dKl = 1;
    } else if (s.kl.type === 'low_var_kl') {
      const u = refLogp![t]! - logp[t]!;
      const eu = Math.exp(u);
      const raw = eu - u - 1;
      klT = Math.min(Math.max(raw, -K3_CLAMP), K3_CLAMP);
      dKl = raw >= -K3_CLAMP && raw <= K3_CLAMP ? 1 - eu : 0;
    }

    const is = isWeights === undefined ? 1 : isWeights[t];
    pg += w * is! * L;
    kl += w * klT;
    grad[t] = w * (is! * dL + klCoef * dKl);
    if (entropy !== undefined) ent += w * entropy[t]!;
    if (s.entropyCoef !== 0) entropyGrad[t] = -s.entropyCoef * w;

    if (w !== 0) {
      tokens++;
      if (clipState === 1) clipped++;
      if (clipState === 2) dualClipped++;
      approxKl += ratio - 1 - dc;
      ratioSum += ratio;
      ratioMax = Math.max(ratioMax, ratio);
      if (entropy !== undefined) entropySum += entropy[t]!;
    }
  }

  const per = (x: number) => (tokens === 0 ? 0 : x / tokens);
  return {
    loss: pg + klCoef * kl - s.entropyCoef * ent,
    pg,
    kl,
    entropy: ent,
    grad,
    entropyGrad,
    diagnostics: {
      tokens,
      clipFraction: per(clipped),
      dualClipFraction: per(dualClipped),
      approxKl: per(approxKl),
      entropy: entropy === undefined ? null : per(entropySum),
      ratioMean: per(ratioSum),
      ratioMax,
    },
  };
}
