/**
 * Step diagnostics per agent (role): what a user watches to see whether a
 * role is learning — advantage spread, how many task groups gave no signal,
 * and the clip fraction / approximate KL / entropy of its update.
 *
 * Simplified: advantage statistics are over the agent's trained samples
 * (excluded ones, e.g. MC-GRPO pivots, are left out), one value per sample,
 * not per token; std is unbiased (n − 1) like the estimators', 0 below two
 * samples. Loss diagnostics are passed in per agent: the loss is a sum over
 * tokens, so running it on an agent's slice of tokens gives that agent's
 * share exactly (merge slices with mergeLossDiagnostics).
 */

import type { PolicyLossDiagnostics } from './loss-reference';
import type { Sample } from './samples';
import { mean, unbiasedStd } from './advantages/stats';

export interface AdvantageSummary {
  mean: number;
  std: number;
  min: number;
  max: number;
}

export interface AgentStepDiagnostics {
  agentId: string;
  samples: number;
  trainedSamples: number;
  advantage: AdvantageSummary;
  /** Task groups this agent appears in. */
  groups: number;
  /** Fraction of those groups where every trained advantage is exactly 0 (no learning signal). */
  zeroAdvantageGroupFraction: number;
  /**
   * Mean trained advantage by turn position: entry k is over the agent's k-th turns of
   * their episodes (turns in input order, which buildStepBatch makes turn order).
   */
  advantageByPosition: number[];
  /** Share of trained turns in a step group of more than one (GiGPO, SALT); null for other estimators. */
  stepGroupShare: number | null;
  /** From the loss; null when no loss diagnostics were given for the agent. */
  clipFraction: number | null;
  approxKl: number | null;
  entropy: number | null;
}

export function stepDiagnostics(
  samples: readonly Sample[],
  result: { advantages: ArrayLike<number>; excluded: readonly boolean[]; sharedStep?: readonly boolean[] },
  lossByAgent: Readonly<Record<string, PolicyLossDiagnostics>> = {},
): Record<string, AgentStepDiagnostics> {
  const byAgent = new Map<string, number[]>();
  samples.forEach((s, i) => {
    let list = byAgent.get(s.agentId);
    if (list === undefined) byAgent.set(s.agentId, (list = []));
    list.push(i);
  });

  const out: Record<string, AgentStepDiagnostics> = {};
  for (const [agentId, indices] of byAgent) {
    const trained = indices.filter((i) => !result.excluded[i]);
    const adv = Float64Array.from(trained, (i) => result.advantages[i]!);
    const m = mean(adv);

    // A group has signal if any trained sample in it has a non-zero advantage.
    const groupHasSignal = new Map<string, boolean>();
    for (const i of indices) {
      const g = samples[i]!.groupId;
      const signal = !result.excluded[i] && result.advantages[i] !== 0;
      groupHasSignal.set(g, (groupHasSignal.get(g) ?? false) || signal);
    }
    let zeroGroups = 0;
    for (const signal of groupHasSignal.values()) if (!signal) zeroGroups++;

    // k-th turn of the agent in its episode
    const seen = new Map<string, number>();
    const byPosition: Array<{ sum: number; n: number }> = [];
    for (const i of indices) {
      const k = seen.get(samples[i]!.episodeId) ?? 0;
      seen.set(samples[i]!.episodeId, k + 1);
      if (result.excluded[i]) continue;
      const p = (byPosition[k] ??= { sum: 0, n: 0 });
      p.sum += result.advantages[i]!;
      p.n++;
    }
    const shared = result.sharedStep;

    const loss = lossByAgent[agentId];
    out[agentId] = {
      agentId,
      samples: indices.length,
      trainedSamples: trained.length,
      advantage: {
        mean: m,
        std: unbiasedStd(adv, m),
        min: adv.length === 0 ? 0 : adv.reduce((a, b) => Math.min(a, b)),
        max: adv.length === 0 ? 0 : adv.reduce((a, b) => Math.max(a, b)),
      },
      groups: groupHasSignal.size,
      zeroAdvantageGroupFraction: zeroGroups / groupHasSignal.size,
      // a position only excluded turns reached has no mean: NaN, which metric storage drops
      advantageByPosition: Array.from(byPosition, (p) => (p === undefined || p.n === 0 ? NaN : p.sum / p.n)),
      stepGroupShare: shared && trained.length > 0 ? trained.filter((i) => shared[i]).length / trained.length : null,
      clipFraction: loss?.clipFraction ?? null,
      approxKl: loss?.approxKl ?? null,
      entropy: loss?.entropy ?? null,
    };
  }
  return out;
}

/** Combines loss diagnostics of several token slices (token-weighted means; max of maxima). */
export function mergeLossDiagnostics(parts: readonly PolicyLossDiagnostics[]): PolicyLossDiagnostics {
  let tokens = 0;
  let clip = 0;
  let dual = 0;
  let kl = 0;
  let ratio = 0;
  let ratioMax = 0;
  let entropyTokens = 0;
  let entropy = 0;
  for (const p of parts) {
    tokens += p.tokens;
    clip += p.clipFraction * p.tokens;
    dual += p.dualClipFraction * p.tokens;
    kl += p.approxKl * p.tokens;
    ratio += p.ratioMean * p.tokens;
    ratioMax = Math.max(ratioMax, p.ratioMax);
    if (p.entropy !== null) {
      entropyTokens += p.tokens;
      entropy += p.entropy * p.tokens;
    }
  }
  const per = (x: number, n: number) => (n === 0 ? 0 : x / n);
  return {
    tokens,
    clipFraction: per(clip, tokens),
    dualClipFraction: per(dual, tokens),
    approxKl: per(kl, tokens),
    entropy: entropyTokens === 0 ? null : per(entropy, entropyTokens),
    ratioMean: per(ratio, tokens),
    ratioMax,
  };
}
