/**
 * The update of one model for one step on the engine, committed exactly once
 * with its version, metrics and advantages; or the step skipped for the model,
 * saying why.
 */
import { ApplicationFailure } from '@temporalio/common';
import { loadTeam } from '../../agents/team-registry';
import type { UpdateProgress, UpdateRequest, UpdateResponse } from '../../engines/protocol/types';
import type { Sql } from '../../infra/db';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import type { OffPolicySetting, ResolvedTraining, SftSetting } from '../../schema/run-config';
import { readStepRewards, writeMetrics } from '../store/metrics';
import { recordEvent } from '../store/runs';
import { commitUpdate, versionOfStep } from '../store/versions';
import { timedStoreWrite, troupeMetrics } from '../../infra/metrics';
import type { TeamRef } from './control';
import { heartbeating } from './engine-work';
import { type EngineApi, type EngineVersions, reasonOf } from './engine-versions';
import { offPolicyCorrection } from './off-policy';
import { DEFAULT_MOMENTUM, staleBetas } from '../../rl';
import type { StepBatches } from './step-batches';
import type { ScoresAhead } from './scores-ahead';
import { type SftDatasets, sftRows, sftStepBatch, sftStepTurns, withBaseLogprobs } from './sft';
import {
  FIRST_ATTEMPT,
  REDUCED_LR,
  agentRows,
  agentsOfModel,
  modelKey,
  needsReference,
  skipReason,
  updateMetrics,
  updateRequest,
  updateRows,
  updateSamples,
  type UpdateAttempt,
} from './update-step';

export interface UpdateResult {
  version: number;
  /** false when an earlier attempt had already committed this step. */
  committed: boolean;
  skipped?: string;
  metrics: Record<string, number>;
  rewards: Record<string, Record<string, number>>;
}

export type UpdateModelInput = TeamRef & {
  runId: string;
  step: number;
  model: string;
  baseVersion: number;
  settings: ResolvedTraining;
  nonFinite: 'skip' | 'reduce-lr' | 'fail';
  /** The step's rollout, committed with the update so a step that is committed always has it. */
  rollout: { seconds: number; episodes: number; failed: number };
  /** Asynchronous runs (staleness > 0): the model's correction against the base version (off-policy.ts). */
  offPolicy?: OffPolicySetting;
  /** An SFT run's step (run config sft): the batch is `batch` stored turns drawn from (seed, step), not the step's rollout (sft.ts). */
  sft?: { setting: SftSetting; seed: number; frozen?: string[] };
};

export interface UpdateModelDeps {
  sql: Sql;
  engine: () => EngineApi;
  checkpoints: CheckpointStore;
  versions: EngineVersions;
  batches: StepBatches;
  ahead: ScoresAhead;
  sftData: SftDatasets;
}

/**
 * The update of one model for one step, committed exactly once: a retry
 * (or a second execution after a resume) finds the commit and returns it.
 */
export async function updateModel(deps: UpdateModelDeps, input: UpdateModelInput): Promise<UpdateResult> {
  const { sql, ahead } = deps;
  const { runId, step, model } = input;
  // until its export, this update's engine work holds back any Score ahead (scores-ahead.ts)
  const engineWorkOver = ahead.updating(runId, step);
  try {
    // a retry after the commit reads what was committed, and builds nothing
    const done = await versionOfStep(sql, runId, model, step);
    if (done) return { version: done.version, committed: false, metrics: done.metrics, rewards: await readStepRewards(sql, runId, step) };
    return await update(deps, input, engineWorkOver);
  } finally {
    engineWorkOver();
  }
}

async function update(
  { sql, engine, checkpoints, versions, batches, ahead, sftData }: UpdateModelDeps,
  input: UpdateModelInput,
  engineWorkOver: () => void,
): Promise<UpdateResult> {
  const { runId, step, model } = input;
  const team = loadTeam(input.team, input.teamOptions);
  const sft = input.sft;
  const batch = sft
    ? sftStepBatch(sftStepTurns(await sftData.get({ sft: sft.setting, frozen: sft.frozen }, team), sft.setting, sft.seed, step), team, input.settings.models)
    : await batches.get(runId, step, input.settings);

  const modelSettings = input.settings.models[model]!;
  const batchSequences = batch.models[model] ?? [];
  const agents = agentsOfModel(team, model, batch);
  const skip = async (reason: string, detail: Record<string, unknown> = {}) => {
    // The step's rewards and endings are kept even without an update: they say why there was none.
    await writeMetrics(
      sql,
      runId,
      agentRows(batch, agents.acted).map((r) => ({ ...r, step })),
    );
    await recordEvent(sql, { runId, step, kind: 'update-skipped', detail: { model, reason, ...detail } });
    troupeMetrics().updates.add(1, { model, outcome: 'skipped' });
    return { version: input.baseVersion, committed: false, skipped: reason, metrics: {}, rewards: batch.rewards };
  };
  const untrainable = skipReason(batchSequences);
  if (untrainable) return skip(untrainable);

  const key = modelKey(runId, model);
  // SFT: the base version's own log-probs as the old ones (the ratio is 1, the PPO loss's gradient the cross-entropy's: sft.ts)
  const sequences = sft ? withBaseLogprobs(batchSequences, await versions.score(runId, model, input.baseVersion, batchSequences)) : batchSequences;
  const refLogprobs = needsReference(modelSettings) ? await versions.score(runId, model, 0, sequences) : undefined;
  const onPolicy = updateSamples(sequences, refLogprobs);
  // A stale rollout: the base version scores the tokens (the proximal policy), off-policy.ts weights them.
  const corrected =
    input.offPolicy &&
    offPolicyCorrection(sequences, onPolicy, await ahead.score(runId, model, input.baseVersion, sequences), input.baseVersion, input.offPolicy);
  const samples = corrected ? corrected.samples : onPolicy;
  // A stale model's Adam runs without its first moment by default (rl/corrections/momentum.ts); the version records what ran.
  const settings = input.offPolicy ? { ...modelSettings, betas: staleBetas(modelSettings.betas, input.offPolicy.momentum ?? DEFAULT_MOMENTUM) } : modelSettings;
  // A stale batch's step: the lr scaled by its effective sample share (rl/corrections/step-size.ts).
  const scaled = (attempt: UpdateAttempt): UpdateAttempt => (corrected ? { ...attempt, lrScale: attempt.lrScale * corrected.lrScale } : attempt);
  const request = (attempt: UpdateAttempt) => updateRequest({ runId, model, step, baseVersion: input.baseVersion }, samples, settings, scaled(attempt));
  // The engine's progress goes out with the heartbeats (visible in the Web UI's pending activity).
  let progress: UpdateProgress | undefined;
  const send = (req: UpdateRequest) => {
    const e = engine();
    return e.updateStream ? e.updateStream(req, (p) => void (progress = p)) : e.update(req);
  };
  // The engine's answer, or the step skipped after a non-finite update.
  const updated = await heartbeating(
    () => ({ phase: 'update', ...(progress ? { engine: progress } : {}) }),
    async (): Promise<UpdateResponse | UpdateResult> => {
      try {
        return await versions.withVersion(runId, model, input.baseVersion, () => send(request(FIRST_ATTEMPT)));
      } catch (e) {
        if (reasonOf(e) !== 'NON_FINITE_UPDATE') throw e;
        const message = (e as Error).message;
        await recordEvent(sql, { runId, step, kind: 'non-finite-update', detail: { model, message, policy: input.nonFinite } });
        if (input.nonFinite === 'fail')
          throw ApplicationFailure.nonRetryable(
            `step ${step}, model ${model}: non-finite update (${message}); the run's nonFinite policy is 'fail'`,
            'NonFiniteUpdate',
          );
        if (input.nonFinite === 'skip') return skip('non-finite', { message });
        try {
          return await versions.withVersion(runId, model, input.baseVersion, () => send(request(REDUCED_LR)));
        } catch (e2) {
          if (reasonOf(e2) !== 'NON_FINITE_UPDATE') throw e2;
          return skip('non-finite after reducing lr', { message: (e2 as Error).message });
        }
      }
    },
  );
  if (!('info' in updated)) return updated;
  const res = updated;
  const exported = await engine().exportVersion({ modelKey: key, version: res.info.version });
  engineWorkOver();
  // An asynchronous run's next proximal Score may start under this version (scores-ahead.ts). Not where the
  // update also scores a reference: the engine's Update reuses the last Score's log-probs, and that is the proximal one.
  if (!sft && !needsReference(modelSettings)) ahead.made(runId, step, model, res.info.version, batches.peek(runId, step + 1, input.settings));
  const metrics = updateMetrics(res, corrected?.model);
  const rows = [...updateRows(model, metrics, input.rollout, batch, agents, corrected?.agents), ...(sft ? sftRows(model, sequences) : [])];
  const commit = await timedStoreWrite('update', () =>
    commitUpdate(sql, checkpoints, {
      version: {
        runId,
        model,
        version: res.info.version,
        step,
        spec: exported.info.spec,
        weights: exported.weights,
        optimizerState: exported.optimizerState,
        sha256: exported.info.weightsSha256,
        metrics,
      },
      metrics: rows.filter((r) => Number.isFinite(r.value)),
      stepMetrics: { counts: batch.counts, [`update.${model}`]: metrics },
      settings: { [model]: settings },
      advantages: batch.turnAdvantages.filter((a) => a.model === model),
    }),
  );
  if (commit.committed) {
    const m = troupeMetrics();
    m.updates.add(1, { model, outcome: 'committed' });
    m.modelVersion.set(commit.version.version, { run: runId, model });
    m.tokensTrained.add(
      sequences.reduce((n, q) => n + q.mask.reduce((k, x) => k + (x > 0 ? 1 : 0), 0), 0),
      { model },
    );
  }
  return { version: commit.version.version, committed: commit.committed, metrics: commit.version.metrics, rewards: batch.rewards };
}
