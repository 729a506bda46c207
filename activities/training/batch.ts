/**
 * From a step's stored episodes to one update batch per model:
 * turns -> samples (one per agent invocation) -> advantages through the
 * registry (each role with its own estimator settings) -> per-token
 * advantages and aggregation weights -> sequences for the engine's Update.
 *
 * Failed episodes are left out (and counted); truncated ones are trained on
 * with whatever rewards their roles gave them.
 */
import { createHash } from 'node:crypto';
import {
  agentParents,
  aggregationWeights,
  broadcastAdvantages,
  computeAdvantages,
  computeAdvantagesByAgent,
  getEstimator,
  resolveOptions,
  episodeScoreOf,
  scoreOf,
  stepDiagnostics,
  turnScoreOf,
  type AgentStepDiagnostics,
  type Sample,
} from '../../rl';
import type { OptimizerSettings } from '../../schema/optimizer';
import { toAdvantageSpec } from '../../schema/optimizer';
import type { StoredEpisode } from '../store/trajectories';

export interface UpdateSequence {
  /** The agent whose turn this is, and the version that sampled it (the behaviour version; its first token's). */
  agent: string;
  version: number;
  /** Its task group in the step (`g<index>`), for the off-policy correction's per-group baseline; absent in batches built elsewhere. */
  group?: string;
  /** The version that sampled each token, where not all of them are `version` (a carried episode's turn). */
  tokenVersions?: number[];
  context: number[];
  tokens: number[];
  mask: number[];
  advantages: number[];
  oldLogprobs: number[];
  weights: number[];
}

export interface StepBatch {
  /** Sequences per model, ready for the engine. */
  models: Record<string, UpdateSequence[]>;
  diagnostics: Record<string, AgentStepDiagnostics>;
  /** Mean of each reward component per agent over its turns in non-failed episodes. */
  rewards: Record<string, Record<string, number>>;
  /**
   * Policy entropy per agent, estimated as the mean −log p of its sampled tokens (E[−log p] = H
   * under temperature-1 sampling). Per agent even when agents share a model, so a role whose
   * policy collapses onto one answer shows it (the update's entropy is per model).
   */
  entropy: Record<string, number>;
  counts: { episodes: number; completed: number; truncated: number; failed: number; samples: number; excluded: number };
  /** Per agent: the step's episodes it acted in, and the shares of those that ended truncated or failed. */
  endings: Record<string, AgentEndings>;
  /** Per agent: how long its episodes are, in its own turns and generated tokens. */
  lengths: Record<string, AgentLengths>;
  /**
   * Per agent: mean and std of its trained samples' scores (weighted reward sums with its
   * role's weights), i.e. the advantage before the estimator's baseline and normalization;
   * `diagnostics[agent].advantage` is the same after.
   */
  scores: Record<string, { mean: number; std: number }>;
  /** The advantage each trained turn received (excluded ones, e.g. MC-GRPO pivots, received none). */
  turnAdvantages: TurnAdvantage[];
  /** Per agent: the gateway's counts summed over the step's episodes (gatewayCalls, retokenizedTurns, unparsedToolCalls); only agents that used it. */
  counters?: Record<string, Record<string, number>>;
}

export interface TurnAdvantage {
  episodeId: string;
  turn: number;
  model: string;
  advantage: number;
}

export interface AgentLengths {
  /** Mean turns the agent took per episode it acted in. */
  turns: number;
  /** Mean tokens it generated per episode it acted in. */
  tokens: number;
}

export interface AgentEndings {
  episodes: number;
  truncatedShare: number;
  failedShare: number;
}

/** Truncated and failed shares per agent: a truncated episode still trains, but its outcome is undefined, so its rewards usually collapse. */
export function agentEndings(episodes: readonly Pick<StoredEpisode, 'trajectory'>[]): Record<string, AgentEndings> {
  const n: Record<string, { episodes: number; truncated: number; failed: number }> = {};
  for (const e of episodes) {
    for (const agent of new Set(e.trajectory.turns.map((t) => t.agent))) {
      const c = (n[agent] ??= { episodes: 0, truncated: 0, failed: 0 });
      c.episodes++;
      if (e.trajectory.status === 'truncated') c.truncated++;
      if (e.trajectory.status === 'failed') c.failed++;
    }
  }
  return Object.fromEntries(
    Object.entries(n).map(([a, c]) => [a, { episodes: c.episodes, truncatedShare: c.truncated / c.episodes, failedShare: c.failed / c.episodes }]),
  );
}

/** Episode length per agent, over the episodes it acted in (failed ones too: a failure may be a runaway length). */
export function agentLengths(episodes: readonly Pick<StoredEpisode, 'trajectory'>[]): Record<string, AgentLengths> {
  const n: Record<string, { episodes: number; turns: number; tokens: number }> = {};
  for (const e of episodes) {
    const seen = new Set<string>();
    for (const t of e.trajectory.turns) {
      const c = (n[t.agent] ??= { episodes: 0, turns: 0, tokens: 0 });
      if (!seen.has(t.agent)) c.episodes++;
      seen.add(t.agent);
      c.turns++;
      c.tokens += t.responseTokens.length;
    }
  }
  return Object.fromEntries(Object.entries(n).map(([a, c]) => [a, { turns: c.turns / c.episodes, tokens: c.tokens / c.episodes }]));
}

/** The trajectories' per-agent counters (gateway/), summed over episodes. */
export function agentCounters(episodes: readonly Pick<StoredEpisode, 'trajectory'>[]): Record<string, Record<string, number>> {
  const sums: Record<string, Record<string, number>> = {};
  for (const e of episodes)
    for (const [agent, counts] of Object.entries(e.trajectory.counters ?? {}))
      for (const [name, n] of Object.entries(counts)) (sums[agent] ??= {})[name] = (sums[agent]![name] ?? 0) + n;
  return sums;
}

export function buildStepBatch(
  episodes: readonly StoredEpisode[],
  settings: { models: Record<string, OptimizerSettings>; agents: Record<string, OptimizerSettings> },
): StepBatch {
  const counts = { episodes: episodes.length, completed: 0, truncated: 0, failed: 0, samples: 0, excluded: 0 };
  const samples: Sample[] = [];
  const turns: Array<StoredEpisode['trajectory']['turns'][number]> = [];
  const rewardSums: Record<string, Record<string, { sum: number; n: number }>> = {};
  const nll: Record<string, { sum: number; n: number }> = {};
  // Stable order (group, episode, turn) so the same step always makes the same batch.
  const ordered = [...episodes].sort((a, b) => a.meta.groupIndex - b.meta.groupIndex || a.meta.episodeIndex - b.meta.episodeIndex);
  for (const e of ordered) {
    counts[e.trajectory.status]++;
    if (e.trajectory.status === 'failed') continue;
    const byTurn = new Map(e.rewards.map((r) => [r.turn, r]));
    const after = agentParents(e.trajectory.turns);
    e.trajectory.turns.forEach((t, k) => {
      const scored = byTurn.get(t.index);
      const components = scored?.components ?? {};
      const { episode, turn } = splitComponents(components, scored?.perTurn);
      const contextHash = tokenHash(t.contextTokens);
      samples.push({
        sampleId: `${e.meta.episodeId}#${t.index}`,
        groupId: `g${e.meta.groupIndex}`,
        episodeId: e.meta.episodeId,
        agentId: t.agent,
        modelId: t.model,
        rewards: episode,
        ...(turn ? { turnRewards: turn } : {}),
        trainableTokens: t.lossMask.reduce<number>((n, m) => n + m, 0),
        turn: t.index,
        after: after[k]!,
        contextHash,
        turnHash: tokenHash(t.responseTokens, contextHash),
      });
      turns.push(t);
      const h = (nll[t.agent] ??= { sum: 0, n: 0 });
      t.lossMask.forEach((m, k) => {
        if (m === 1) {
          h.sum -= t.logprobs[k]!;
          h.n++;
        }
      });
      const agentSums = (rewardSums[t.agent] ??= {});
      for (const [k, v] of Object.entries(components)) {
        const s = (agentSums[k] ??= { sum: 0, n: 0 });
        s.sum += v;
        s.n++;
      }
    });
  }
  counts.samples = samples.length;

  const result = samples.length > 0 ? advantagesFor(samples, settings.agents) : { advantages: new Float64Array(0), excluded: [] as boolean[], diagnostics: {} };
  counts.excluded = result.excluded.filter(Boolean).length;

  const models: Record<string, UpdateSequence[]> = {};
  for (const model of Object.keys(settings.models)) {
    const idx = samples.map((s, i) => (s.modelId === model ? i : -1)).filter((i) => i >= 0);
    const masks = idx.map((i) => turns[i]!.lossMask);
    const s = settings.models[model]!;
    const agg = aggregationWeights(masks, s.lossAggregation, { excluded: idx.map((i) => result.excluded[i]!), ...(s.horizon ? { horizon: s.horizon } : {}) });
    const adv = broadcastAdvantages(
      idx.map((i) => result.advantages[i]!),
      masks,
    );
    models[model] = idx
      .map((i, k) => ({
        agent: turns[i]!.agent,
        version: turns[i]!.version,
        group: samples[i]!.groupId,
        ...(turns[i]!.tokenVersions ? { tokenVersions: turns[i]!.tokenVersions } : {}),
        context: turns[i]!.contextTokens,
        tokens: turns[i]!.responseTokens,
        mask: turns[i]!.lossMask,
        advantages: Array.from(adv[k]!),
        oldLogprobs: turns[i]!.logprobs,
        weights: Array.from(agg.weights[k]!),
      }))
      .filter((_, k) => !result.excluded[idx[k]!]);
  }

  // The scores through the same per-agent summary as the advantages: before and after are comparable.
  const scored = samples.map((s) => scoreOf(s, settings.agents[s.agentId]?.rewardWeights ?? {}));
  const scores = Object.fromEntries(
    Object.entries(stepDiagnostics(samples, { advantages: scored, excluded: result.excluded })).map(([agent, d]) => [
      agent,
      { mean: d.advantage.mean, std: d.advantage.std },
    ]),
  );
  const turnAdvantages = samples.flatMap((s, i) =>
    result.excluded[i] ? [] : [{ episodeId: s.episodeId, turn: turns[i]!.index, model: s.modelId, advantage: result.advantages[i]! }],
  );

  const rewards: Record<string, Record<string, number>> = {};
  for (const [agent, comps] of Object.entries(rewardSums)) rewards[agent] = Object.fromEntries(Object.entries(comps).map(([k, s]) => [k, s.sum / s.n]));
  const entropy = Object.fromEntries(
    Object.entries(nll)
      .filter(([, h]) => h.n > 0)
      .map(([agent, h]) => [agent, h.sum / h.n]),
  );
  return {
    models,
    diagnostics: stepDiagnostics(samples, result),
    rewards,
    entropy,
    counts,
    endings: agentEndings(episodes),
    lengths: agentLengths(episodes),
    counters: agentCounters(episodes),
    scores,
    turnAdvantages,
  };
}

/** A turn's components split into episode and per-turn ones (`turn` undefined without any). */
function splitComponents(components: Record<string, number>, perTurn: readonly string[] | undefined) {
  if (!perTurn || perTurn.length === 0) return { episode: components, turn: undefined };
  const episode: Record<string, number> = {};
  const turn: Record<string, number> = {};
  for (const [k, v] of Object.entries(components)) (perTurn.includes(k) ? turn : episode)[k] = v;
  return { episode, turn };
}

/** A short hash of token ids (chained onto `prefix`): equal hashes mean equal token sequences, for step groups. */
function tokenHash(tokens: readonly number[], prefix = ''): string {
  return createHash('sha256')
    .update(prefix)
    .update(Buffer.from(Uint32Array.from(tokens).buffer))
    .digest('base64url')
    .slice(0, 22);
}

/**
 * Advantages of a step through the registry. When every role uses the same
 * estimator, scope and normalisation, the whole batch goes to it in one call,
 * so scope `group` really is the global baseline (each turn gets its episode's
 * average score over all roles) and `batch` spans all roles. Per-role reward
 * weights are applied first (each turn scored with its role's weights) unless
 * the estimator is `perComponent` (it needs the components themselves: then
 * role by role). Roles with different estimators are estimated role by role
 * (each role its own batch).
 */
export function advantagesFor(samples: Sample[], agents: Record<string, OptimizerSettings>) {
  const specs = Object.fromEntries(Object.entries(agents).map(([role, s]) => [role, toAdvantageSpec(s)]));
  const list = Object.values(specs);
  // compared as resolved (defaults filled): `normalizeStd: true` written out is the default, not another setting
  const shape = (s: (typeof list)[number]) => {
    const o = resolveOptions(getEstimator(s.estimator), s.options);
    return JSON.stringify([s.estimator, o.scope, o.normalizeStd, o.gamma]);
  };
  const weights = (s: (typeof list)[number]) => JSON.stringify(Object.entries(s.options?.weights ?? {}).sort());
  if (list.length === 0 || list.some((s) => shape(s) !== shape(list[0]!))) return computeAdvantagesByAgent(samples, specs);
  const first = list[0]!;
  if (list.every((s) => weights(s) === weights(first))) return computeAdvantages(samples, first);
  if (getEstimator(first.estimator).perComponent) return computeAdvantagesByAgent(samples, specs);
  // Episode and per-turn parts stay apart: turn-level estimators tell them apart.
  const scored = samples.map((s) => {
    const w = specs[s.agentId]?.options?.weights ?? {};
    return { ...s, rewards: { score: episodeScoreOf(s, w) }, ...(s.turnRewards ? { turnRewards: { turnScore: turnScoreOf(s, w) } } : {}) };
  });
  return computeAdvantages(scored, { estimator: first.estimator, options: { ...first.options, weights: {} } });
}
