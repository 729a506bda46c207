/**
 * The off-policy correction of an asynchronous run's update (staleness k > 0):
 * its rollout was sampled by older versions than the update's base. The base
 * version scores the tokens (the proximal policy: the "old" log-probs of the PPO
 * clip ratio), and the model's correction (rl/corrections/, chosen per model by
 * the run config's `offPolicy`) turns each trained token's ratio
 * π_base/π_behaviour into a weight on its advantage (0: masked). Each token's
 * behaviour log-prob is its own (sample.oldLogprobs), whichever version sampled it.
 * With offPolicy.baseline 'proximal', each (task group, agent) set's advantages are
 * re-centred on the proximal policy before weighting (rl/corrections/proximal-baseline.ts;
 * by default they stay as the estimator centred them on the behaviour's samples). The
 * update's learning rate is scaled by the batch's effective sample share under the
 * weights (rl/corrections/step-size.ts; offPolicy.stepSize 'constant' keeps it).
 * The engine's update graphs are unchanged: w·L_pg(A) = L_pg(w·A) token by token (w ≥ 0).
 *
 * Also the correction's metrics, per model and per agent (names in OffPolicyMetrics).
 */
import {
  DEFAULT_BAND,
  DEFAULT_BASELINE,
  DEFAULT_CORRECTION,
  DEFAULT_STEP_SIZE,
  effectiveSampleShare,
  importanceWeights,
  proximalBaselineShifts,
  type ImportanceWeights,
} from '../../rl';
import type { UpdateSampleInput } from '../../engines/protocol/types';
import type { OffPolicySetting } from '../../schema/run-config';
import type { UpdateSequence } from './batch';

/** Prefix of the staleness histogram: `staleness.tokens.<lag>` counts trained tokens sampled `lag` versions before the base (each token by its own version). */
export const STALENESS_TOKENS = 'staleness.tokens.';

export type OffPolicyMetrics = {
  /** Mean versions between the behaviour version (a sequence's first token's) and the update's base, over sequences. */
  staleness: number;
  'isWeight.mean': number;
  'isWeight.max': number;
  /** Share of trained tokens whose weight a cap truncated. */
  'isWeight.truncated': number;
  /** Share of trained tokens the correction dropped (weight 0). */
  'isWeight.masked': number;
  /** k3 estimate of KL(behaviour ‖ trainer at the base version) over the behaviour's tokens. */
  mismatch_kl: number;
  /** Mean |shift| the proximal baseline moved a sequence's advantage by (rl/corrections/proximal-baseline.ts; 0 with baseline 'behaviour', the default). */
  baselineShift: number;
  /** Effective sample share (Σw)²/(N·Σw²) of the trained tokens' weights (rl/corrections/step-size.ts); the model's scales its lr with stepSize 'ess'. */
  'isWeight.ess': number;
} & Record<`${typeof STALENESS_TOKENS}${number}`, number>;

export interface OffPolicyUpdate {
  samples: UpdateSampleInput[];
  /** Over the whole model's batch. */
  model: OffPolicyMetrics;
  /** Per agent of the model. */
  agents: Record<string, OffPolicyMetrics>;
  /** What the update's learning rate is multiplied by: the model's isWeight.ess (stepSize 'ess'), or 1. */
  lrScale: number;
}

interface Sums {
  sequences: number;
  lag: number;
  tokens: number;
  w: number;
  max: number;
  truncated: number;
  masked: number;
  kl: number;
  /** Σ |baseline shift| over sequences. */
  shift: number;
  /** Trained tokens per lag. */
  lags: Map<number, number>;
}

/** A sequence's trained tokens (mask 1) per lag: base version − the version that sampled each token. */
function trainedTokensByLag(seq: UpdateSequence, mask: ArrayLike<number>, baseVersion: number): Map<number, number> {
  const lags = new Map<number, number>();
  for (let t = 0; t < mask.length; t++) {
    if (mask[t] === 0) continue;
    const lag = baseVersion - (seq.tokenVersions?.[t] ?? seq.version);
    lags.set(lag, (lags.get(lag) ?? 0) + 1);
  }
  return lags;
}

/** The mean of `values` over the tokens with mask 1 (0 without any). */
function meanTrained(values: ArrayLike<number>, mask: ArrayLike<number>): number {
  let sum = 0;
  let n = 0;
  for (let t = 0; t < mask.length; t++)
    if (mask[t] === 1) {
      sum += values[t] ?? 0;
      n++;
    }
  return n === 0 ? 0 : sum / n;
}

/**
 * `samples[i]` is the engine sample of `sequences[i]`; `baseLogprobs[i]` its
 * tokens' log-probs under the base version (engine Score).
 */
export function offPolicyCorrection(
  sequences: readonly UpdateSequence[],
  samples: readonly UpdateSampleInput[],
  baseLogprobs: readonly ArrayLike<number>[],
  baseVersion: number,
  setting: OffPolicySetting,
): OffPolicyUpdate {
  const correction = setting.correction ?? DEFAULT_CORRECTION;
  const settings = { cap: setting.importanceCap, band: setting.band ?? DEFAULT_BAND };
  const sums = new Map<string, Sums>();
  const empty = (): Sums => ({ sequences: 0, lag: 0, tokens: 0, w: 0, max: 0, truncated: 0, masked: 0, kl: 0, shift: 0, lags: new Map() });
  const add = (key: string, lag: number, d: ImportanceWeights['diagnostics'], lags: ReadonlyMap<number, number>, shift: number) => {
    const s = sums.get(key) ?? empty();
    s.sequences++;
    s.shift += Math.abs(shift);
    s.lag += lag;
    s.tokens += d.tokens;
    s.w += d.mean * d.tokens;
    s.max = Math.max(s.max, d.max);
    s.truncated += d.truncatedFraction * d.tokens;
    s.masked += d.maskedFraction * d.tokens;
    s.kl += d.mismatchKl * d.tokens;
    for (const [l, n] of lags) s.lags.set(l, (s.lags.get(l) ?? 0) + n);
    sums.set(key, s);
  };
  // Per sequence: the engine sample, the base log-probs and the correction's weights.
  const rows = sequences.map((seq, i) => {
    const sample = samples[i];
    const prox = baseLogprobs[i];
    if (!sample || !prox) throw new Error(`offPolicyCorrection: sequence ${i} has no ${sample ? 'base log-probs' : 'sample'}`);
    return { seq, sample, prox, ...importanceWeights(prox, sample.oldLogprobs, sample.lossMask, correction, settings) };
  });
  // The group's baseline under the proximal policy: each (task group, agent) set re-centred under the weights.
  const shifts =
    (setting.baseline ?? DEFAULT_BASELINE) === 'proximal'
      ? proximalBaselineShifts(
          rows.map(({ seq, sample, weights }) => ({
            key: `${seq.group ?? ''}\u0000${seq.agent}`,
            advantage: meanTrained(sample.advantages, sample.lossMask),
            weight: meanTrained(weights, sample.lossMask),
          })),
        )
      : new Float64Array(rows.length);
  const corrected = rows.map(({ seq, sample, prox, weights, diagnostics }, i) => {
    const shift = shifts[i] ?? 0;
    const lags = trainedTokensByLag(seq, sample.lossMask, baseVersion);
    add('', baseVersion - seq.version, diagnostics, lags, shift);
    add(seq.agent, baseVersion - seq.version, diagnostics, lags, shift);
    const trained = (t: number) => sample.lossMask[t] === 1;
    return {
      ...sample,
      advantages: sample.advantages.map((a, t) => (trained(t) ? (a - shift) * (weights[t] ?? 0) : a)),
      oldLogprobs: sample.oldLogprobs.map((lp, t) => (trained(t) ? (prox[t] ?? lp) : lp)),
    };
  });
  const metrics = (key: string): OffPolicyMetrics => {
    const s = sums.get(key) ?? empty();
    const mine = key === '' ? rows : rows.filter((r) => r.seq.agent === key);
    const per = (x: number) => (s.tokens === 0 ? 0 : x / s.tokens);
    const histogram = Object.fromEntries([...s.lags].sort(([a], [b]) => a - b).map(([lag, n]) => [`${STALENESS_TOKENS}${lag}`, n]));
    return {
      staleness: s.sequences === 0 ? 0 : s.lag / s.sequences,
      'isWeight.mean': per(s.w),
      'isWeight.max': s.max,
      'isWeight.truncated': per(s.truncated),
      'isWeight.masked': per(s.masked),
      mismatch_kl: per(s.kl),
      baselineShift: s.sequences === 0 ? 0 : s.shift / s.sequences,
      'isWeight.ess': effectiveSampleShare(
        mine.map((r) => r.weights),
        mine.map((r) => r.sample.lossMask),
      ),
      ...histogram,
    };
  };
  const agents = [...new Set(sequences.map((s) => s.agent))];
  const model = metrics('');
  const lrScale = (setting.stepSize ?? DEFAULT_STEP_SIZE) === 'ess' ? model['isWeight.ess'] : 1;
  return { samples: corrected, model, agents: Object.fromEntries(agents.map((a) => [a, metrics(a)])), lrScale };
}
