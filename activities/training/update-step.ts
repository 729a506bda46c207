/**
 * One RL step's update of one model, as pure functions: what the `updateModel`
 * activity (pool.ts) and the benchmarks' in-process trainer
 * (bench/lib/inprocess.ts) both do between a StepBatch and the engine, so the
 * two send the same requests.
 *
 *   skipReason       a model without a trained token gets no update
 *   needsReference   the KL term is on: version 0 scores the tokens first
 *   scoreRequest     Score of the sequences' tokens (reference, or off-policy base)
 *   updateSamples    the engine's samples, with reference log-probs when scored
 *   updateRequest    the engine's Update, with engineSettings
 *   updateMetrics    the engine's answer as the version's metrics
 *   updateRows       the step's metric rows (per model, team and agent)
 *
 * No I/O here: the callers score, update, store and record.
 */
import type { ScoreRequest, UpdateRequest, UpdateResponse, UpdateSampleInput, UpdateSettingsInput } from '../../engines/protocol/types';
import type { OptimizerSettings } from '../../schema/optimizer';
import type { MetricRow } from '../store/metrics';
import type { StepBatch, UpdateSequence } from './batch';
import type { OffPolicyMetrics } from './off-policy';

/** The engine's key of a run's model: every engine call names it. */
export const modelKey = (runId: string, model: string) => `${runId}/${model}`;

/** A metric row of the step being updated (the caller adds the step). */
export type StepRow = Omit<MetricRow, 'step'>;

/** Why the model gets no update this step, or undefined: it is skipped when no token of any sequence has a weight. */
export function skipReason(sequences: readonly UpdateSequence[]): string | undefined {
  return sequences.every((s) => s.weights.every((w) => w === 0)) ? 'no trainable tokens' : undefined;
}

/** Whether the update needs reference log-probs (version 0's): the model's KL term is on. */
export function needsReference(s: OptimizerSettings): boolean {
  return s.kl.type !== 'none' && s.kl.coef !== 0;
}

/** The engine Score of the sequences' tokens under `version`. */
export function scoreRequest(key: string, version: number, sequences: readonly UpdateSequence[]): ScoreRequest {
  return { modelKey: key, version, sequences: sequences.map((q) => ({ context: q.context, tokens: q.tokens })) };
}

/** The engine's samples of the sequences; `refLogprobs[i]` (the reference's Score) goes with sequence i. */
export function updateSamples(sequences: readonly UpdateSequence[], refLogprobs?: readonly number[][]): UpdateSampleInput[] {
  return sequences.map((q, i) => ({
    context: q.context,
    tokens: q.tokens,
    lossMask: q.mask,
    advantages: q.advantages,
    oldLogprobs: q.oldLogprobs,
    lossWeights: q.weights,
    ...(refLogprobs ? { refLogprobs: refLogprobs[i]! } : {}),
  }));
}

/** An attempt of the update: the first, or the retry after a non-finite one at a tenth of the lr (its own request id). */
export interface UpdateAttempt {
  lrScale: number;
  /** Appended to the request id. */
  suffix: string;
}
export const FIRST_ATTEMPT: UpdateAttempt = { lrScale: 1, suffix: '' };
export const REDUCED_LR: UpdateAttempt = { lrScale: 0.1, suffix: '/lr0.1' };

/**
 * The engine Update of `model` for `step` on `baseVersion`. The request id names
 * run, model, step and attempt, so a retried activity's request is answered
 * with the engine's stored result; a stale base is allowed (asynchronous runs).
 */
export function updateRequest(
  at: { runId: string; model: string; step: number; baseVersion: number },
  samples: UpdateSampleInput[],
  settings: OptimizerSettings,
  attempt: UpdateAttempt = FIRST_ATTEMPT,
): UpdateRequest {
  return {
    modelKey: modelKey(at.runId, at.model),
    baseVersion: at.baseVersion,
    requestId: `${at.runId}/${at.model}/step${at.step}${attempt.suffix}`,
    allowStaleBase: true,
    samples,
    settings: engineSettings(settings, attempt.lrScale),
  };
}

/** Our optimizer settings in the engine's terms. */
export function engineSettings(s: OptimizerSettings, lrScale = 1): UpdateSettingsInput {
  return {
    lr: s.lr * lrScale,
    beta1: s.betas[0],
    beta2: s.betas[1],
    eps: s.eps,
    weightDecay: s.weightDecay,
    maxGradNorm: s.gradClipMaxNorm ?? 0,
    clipLow: s.clipLow,
    clipHigh: s.clipHigh,
    dualClip: s.dualClip ?? 0,
    klCoef: s.kl.type === 'none' ? 0 : s.kl.coef,
    ...(s.kl.type === 'none' ? {} : { klType: s.kl.type }),
    entropyCoef: s.entropyCoef,
    innerSteps: 1,
  };
}

/** The update's metrics, stored with the new version: the engine's, and the off-policy correction's per model. */
export function updateMetrics(res: Pick<UpdateResponse, 'metrics' | 'tokens' | 'samples' | 'durationMs' | 'logprobGap'>, offPolicy?: OffPolicyMetrics) {
  const m = res.metrics;
  return {
    loss: m.loss,
    pgLoss: m.pgLoss,
    klLoss: m.klLoss,
    gradNorm: m.gradNorm,
    clipFraction: m.clipFraction,
    approxKl: m.approxKl,
    entropy: m.entropy,
    tokens: res.tokens,
    samples: res.samples,
    updateMs: res.durationMs,
    logprobGapMean: res.logprobGap.mean,
    logprobGapMax: res.logprobGap.max,
    ...offPolicy,
  };
}
export type UpdateMetricValues = ReturnType<typeof updateMetrics>;

/** The roles of `model` in team order: those trained this step (with diagnostics), and those that acted (also in failed episodes, which have none). */
export function agentsOfModel(
  team: { roles: readonly string[]; agents: Readonly<Record<string, { model: string }>> },
  model: string,
  batch: Pick<StepBatch, 'diagnostics' | 'endings'>,
) {
  const mine = team.roles.filter((a) => team.agents[a]!.model === model);
  return { trained: mine.filter((a) => batch.diagnostics[a]), acted: mine.filter((a) => batch.diagnostics[a] || batch.endings[a]) };
}

/**
 * The metric rows of a committed update: the update's metrics (scope: the model),
 * the step's rollout (scope: team), and per trained agent its advantages, scores,
 * the update's loss terms, its own entropy and off-policy correction; then
 * agentRows of every agent that acted.
 */
export function updateRows(
  model: string,
  metrics: UpdateMetricValues,
  rollout: { seconds: number; episodes: number; failed: number },
  batch: StepBatch,
  agents: { trained: readonly string[]; acted: readonly string[] },
  offPolicyAgents: Readonly<Record<string, OffPolicyMetrics>> = {},
): StepRow[] {
  const rows: StepRow[] = Object.entries(metrics).map(([name, value]) => ({ kind: 'update', scope: model, name, value }));
  rows.push(
    { kind: 'train', scope: 'team', name: 'rolloutSeconds', value: rollout.seconds },
    { kind: 'train', scope: 'team', name: 'episodes', value: rollout.episodes },
    { kind: 'train', scope: 'team', name: 'failedEpisodes', value: rollout.failed },
  );
  for (const agent of agents.trained) {
    const d = batch.diagnostics[agent]!;
    rows.push(
      { kind: 'train', scope: agent, name: 'advantage.mean', value: d.advantage.mean },
      { kind: 'train', scope: agent, name: 'advantage.std', value: d.advantage.std },
      { kind: 'train', scope: agent, name: 'advantage.min', value: d.advantage.min },
      { kind: 'train', scope: agent, name: 'advantage.max', value: d.advantage.max },
      // before the estimator's baseline and normalization: the scores it started from
      { kind: 'train', scope: agent, name: 'score.mean', value: batch.scores[agent]!.mean },
      { kind: 'train', scope: agent, name: 'score.std', value: batch.scores[agent]!.std },
      { kind: 'train', scope: agent, name: 'zeroAdvantageGroupFraction', value: d.zeroAdvantageGroupFraction },
      { kind: 'train', scope: agent, name: 'samples', value: d.samples },
      ...d.advantageByPosition.map((value, k) => ({ kind: 'train', scope: agent, name: `advantage.position.${k}`, value })),
      ...(d.stepGroupShare === null ? [] : [{ kind: 'train', scope: agent, name: 'stepGroupShare', value: d.stepGroupShare }]),
      ...(['loss', 'gradNorm', 'clipFraction', 'approxKl'] as const).map((name) => ({ kind: 'train', scope: agent, name, value: metrics[name] })),
      // the agent's own entropy, not its model's (agents may share one): a role's collapse shows
      { kind: 'train', scope: agent, name: 'entropy', value: batch.entropy[agent] ?? NaN },
      ...Object.entries(offPolicyAgents[agent] ?? {}).map(([name, value]) => ({ kind: 'train', scope: agent, name, value })),
    );
  }
  rows.push(...agentRows(batch, agents.acted));
  return rows;
}

/** A step's train rows per agent that need no update: reward components, episode endings and lengths, gateway counts. */
export function agentRows(batch: Pick<StepBatch, 'rewards' | 'endings' | 'lengths' | 'counters'>, agents: readonly string[]): StepRow[] {
  return agents.flatMap((agent) => [
    ...Object.entries(batch.rewards[agent] ?? {}).map(([name, value]) => ({ kind: 'train', scope: agent, name: `reward.${name}`, value })),
    ...(batch.endings[agent]
      ? [
          { kind: 'train', scope: agent, name: 'truncatedShare', value: batch.endings[agent].truncatedShare },
          { kind: 'train', scope: agent, name: 'failedShare', value: batch.endings[agent].failedShare },
        ]
      : []),
    ...(batch.lengths[agent]
      ? [
          { kind: 'train', scope: agent, name: 'episodeTurns', value: batch.lengths[agent].turns },
          { kind: 'train', scope: agent, name: 'episodeTokens', value: batch.lengths[agent].tokens },
        ]
      : []),
    ...Object.entries(batch.counters?.[agent] ?? {}).map(([name, value]) => ({ kind: 'train', scope: agent, name, value })),
  ]);
}
