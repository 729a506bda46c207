/**
 * The off-policy corrections by name (what a run config's `offPolicy.correction`
 * selects), and `importanceWeights`, which applies one to a sequence. A new
 * correction is its own file (formula and source in its header) plus one line here.
 */
import { IssueList } from '../errors';
import { LOG_RATIO_CLAMP } from '../loss-settings';
import { decoupledPpo } from './decoupled-ppo';
import { icepop } from './icepop';
import { misSequence } from './mis-sequence';
import { misToken } from './mis-token';
import { tisSequence } from './tis-sequence';
import { tisToken } from './tis-token';
import type { Correction, CorrectionSettings } from './types';

export const CORRECTIONS = {
  'decoupled-ppo': decoupledPpo,
  'tis-token': tisToken,
  'tis-sequence': tisSequence,
  'mis-token': misToken,
  'mis-sequence': misSequence,
  icepop,
} as const satisfies Readonly<Record<string, Correction>>;
export type CorrectionName = keyof typeof CORRECTIONS;
export const CORRECTION_NAMES = Object.keys(CORRECTIONS) as [CorrectionName, ...CorrectionName[]];

/** Today's behaviour: decoupled PPO; IcePop's band from its source. The cap's default is the run config's importanceCap. */
export const DEFAULT_CORRECTION: CorrectionName = 'decoupled-ppo';
export const DEFAULT_BAND: readonly [number, number] = Object.freeze([0.5, 5] as const);

/** Every problem of a correction's settings, by field name (`cap`, `band`). */
export function correctionSettingIssues(s: Partial<CorrectionSettings>): { path: string; message: string }[] {
  const issues: { path: string; message: string }[] = [];
  if (s.cap !== undefined && !(s.cap >= 1 && Number.isFinite(s.cap))) issues.push({ path: 'cap', message: `must be a finite number >= 1, got ${s.cap}` });
  if (s.band !== undefined) {
    const [lo, hi] = s.band;
    if (!(lo >= 0 && lo <= 1)) issues.push({ path: 'band[0]', message: `the band's lower end must be in [0, 1], got ${lo}` });
    if (!(hi >= 1 && Number.isFinite(hi))) issues.push({ path: 'band[1]', message: `the band's upper end must be a finite number >= 1, got ${hi}` });
  }
  return issues;
}

export interface ImportanceWeights {
  /** w_t per token (0 where the mask is 0). */
  weights: Float64Array;
  diagnostics: {
    /** Tokens with mask 1. */
    tokens: number;
    mean: number;
    max: number;
    /** Fraction of tokens whose weight a cap truncated. */
    truncatedFraction: number;
    /** Fraction of tokens the correction dropped (w = 0). */
    maskedFraction: number;
    /**
     * Mean k3 estimate of KL(behaviour ‖ proximal) over the behaviour's tokens:
     * ρ − 1 − log ρ, ρ = π_prox/π_behav (the training–inference mismatch plus the versions between).
     */
    mismatchKl: number;
  };
}

/**
 * The weights of one sequence's tokens with mask 1 under `correction`:
 * log ρ_t = clamp(logpProx_t − logpBehav_t, ±20), then the correction's rule.
 */
export function importanceWeights(
  logpProx: ArrayLike<number>,
  logpBehav: ArrayLike<number>,
  mask: ArrayLike<number>,
  correction: CorrectionName,
  settings: CorrectionSettings,
): ImportanceWeights {
  const issues = new IssueList();
  if (!(correction in CORRECTIONS)) issues.add('correction', `must be one of ${CORRECTION_NAMES.join(', ')}, got ${String(correction)}`);
  for (const i of correctionSettingIssues(settings)) issues.add(i.path, i.message);
  const n = logpProx.length;
  for (const [name, a] of [
    ['logpBehav', logpBehav],
    ['mask', mask],
  ] as const)
    if (a.length !== n) issues.add(name, `expected ${n} tokens (as logpProx), got ${a.length}`);
  issues.throwIfAny();
  const trained: number[] = [];
  const logRatios: number[] = [];
  for (let t = 0; t < n; t++) {
    if (mask[t] === 0) continue;
    for (const [name, a] of [
      ['logpProx', logpProx],
      ['logpBehav', logpBehav],
    ] as const)
      if (!Number.isFinite(a[t])) issues.add(`${name}[${t}]`, `must be a finite number, got ${a[t]}`);
    trained.push(t);
    logRatios.push(Math.min(Math.max(logpProx[t]! - logpBehav[t]!, -LOG_RATIO_CLAMP), LOG_RATIO_CLAMP));
  }
  issues.throwIfAny();
  const w = CORRECTIONS[correction].weigh(Float64Array.from(logRatios), settings);
  const weights = new Float64Array(n);
  let sum = 0;
  let max = 0;
  let kl = 0;
  trained.forEach((t, i) => {
    weights[t] = w.weights[i]!;
    sum += w.weights[i]!;
    max = Math.max(max, w.weights[i]!);
    kl += Math.exp(logRatios[i]!) - 1 - logRatios[i]!;
  });
  const tokens = trained.length;
  const per = (x: number) => (tokens === 0 ? 0 : x / tokens);
  return {
    weights,
    diagnostics: { tokens, mean: per(sum), max, truncatedFraction: per(w.truncated), maskedFraction: per(w.masked), mismatchKl: per(kl) },
  };
}
