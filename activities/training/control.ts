/**
 * Control-queue activities of a training run: the run's bookkeeping, planning,
 * tool calls and scoring of durable episodes, and eval summaries. Workflows
 * call these with ids and small JSON; trajectories go to Postgres here.
 */
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { ToolCallReply, ToolCallRequest } from '../../agents/episode';
import { scoreEpisode } from '../../agents/rewards';
import type { AnyTeam } from '../../agents/team';
import { listingRefusal, listTeamServers } from './tool-listing';
import { loadTeam } from '../../agents/team-registry';
import type { Sql } from '../../infra/db';
import { parseRunConfig, type RunConfig } from '../../schema/run-config';
import type { Trajectory } from '../../schema/trajectory';
import { createRun, getRun, hasExecution, recordEvent, recordExecution, recordWorkflowPatches, setRunStatus, type RunStatus } from '../store/runs';
import { mergeStepMetrics, writeMetrics } from '../store/metrics';
import { tensorBoardExporter, type TensorBoardDirs } from '../store/tensorboard';
import type { MlflowExport } from '../store/mlflow';
import { episodeOutcome, loadStepEpisodes, saveEpisodes, type EpisodeMeta, type StoredEpisode } from '../store/trajectories';
import { loadTasks } from '../tasks';
import { failRunOn } from '../tools';
import { durableEpisodeMeta, episodesOf, type EpisodeSpec, type StepPlan } from './plan';
import { readCheckpointTokenizers } from './pretrained';
import { completeCommittedSteps, resumePoint, versionsBefore } from './resume';
import { checkInitSources, InitSourceError } from './init-from';
import { checkSftSource } from './sft';

type SpecRequest = TeamRef & { plan: Omit<StepPlan, 'episodes'>; index: number };

/**
 * The plan's episode at `index`, planned again from the team's tasks. Each episode of a durable
 * step asks for its own spec, and planning orders every task of the split, so the last few plans
 * are kept (newest last): a step of n episodes costs one planning, not n. A plan is a pure
 * function of its key, so a kept plan is the plan.
 */
function specLookup(keep = 8): (input: SpecRequest) => EpisodeSpec {
  const recent = new Map<string, EpisodeSpec[]>();
  return (input) => {
    const key = JSON.stringify([input.team, input.teamOptions, input.plan]);
    const specs = recent.get(key) ?? episodesOf(loadTasks(loadTeam(input.team, input.teamOptions)), input.plan);
    recent.delete(key);
    recent.set(key, specs);
    if (recent.size > keep) recent.delete(recent.keys().next().value!);
    const spec = specs[input.index];
    if (!spec) throw ApplicationFailure.nonRetryable(`episode ${input.index} is not in the plan of step ${input.plan.step}`, 'InvalidPlan');
    return spec;
  };
}

/** The reason a terminated workflow's history records, if it was terminated. */
async function terminationReason(client: Client, workflowId: string): Promise<string | undefined> {
  const { events } = await client.workflow.getHandle(workflowId).fetchHistory();
  const terminated = [...(events ?? [])].reverse().find((e) => e.workflowExecutionTerminatedEventAttributes);
  return terminated?.workflowExecutionTerminatedEventAttributes?.reason || undefined;
}

export interface TeamRef {
  team: string;
  teamOptions: Record<string, unknown>;
}

export interface EvalSummary {
  step: number;
  success: number;
  episodes: number;
  /** Mean reward components per agent. */
  rewards: Record<string, Record<string, number>>;
}

/** Where durable episodes' tools and scoring run: off the worker's own thread (user-code-threads.ts). */
export interface UserCode {
  callTool(team: AnyTeam, ref: TeamRef, req: ToolCallRequest, signal?: AbortSignal): Promise<ToolCallReply>;
  score(team: AnyTeam, ref: TeamRef, meta: EpisodeMeta, trajectory: Trajectory): Promise<StoredEpisode>;
  /** The episode is over: what its tools hold for it in the threads is released (mcpServer scope 'episode'). */
  endEpisode?(episodeId: string): void;
}

export type StartRunInput = { runId: string; config: RunConfig; workflowId: string; executionId: string; models: string[]; resume?: boolean };

export function createTrainingControlActivities({
  sql,
  workflowPatches,
  userCode,
  tensorboardDirs,
  mlflow,
}: {
  sql: Sql;
  workflowPatches?: readonly string[];
  userCode?: UserCode;
  tensorboardDirs?: TensorBoardDirs;
  mlflow?: MlflowExport;
}) {
  const toTensorBoard = tensorBoardExporter(sql, tensorboardDirs);
  // The store gained points: to TensorBoard now, to MLflow in the background (it never holds a run up).
  const exportCurves = async (runId: string) => {
    mlflow?.nudge(runId);
    await toTensorBoard(runId);
  };
  // A tool or reward with a synchronous loop would block this worker for good: they run only in threads.
  const threads = (what: string) => {
    if (!userCode) throw new Error(`${what}: this control worker runs no user code threads (createControlActivities needs userCode)`);
    return userCode;
  };
  readCheckpointTokenizers();
  const specAt = specLookup();
  return {
    /** Creates the run, or continues it when this start is a resume; tells the execution where to start (startRun below). */
    async startRun(input: StartRunInput) {
      return startRun(sql, workflowPatches, input);
    },

    /** Each model's serving version at each of `steps` (what an asynchronous run's rollout of a later step samples from). */
    async versionsAt(input: { runId: string; models: string[]; steps: number[] }): Promise<Record<number, Record<string, number>>> {
      return Object.fromEntries(await Promise.all(input.steps.map(async (s) => [s, await versionsBefore(sql, input.runId, input.models, s)] as const)));
    },

    /** Plans a step: returns a reference (rule and count); the rollout derives the episodes from it. */
    async planStep(input: TeamRef & { runId: string; step: number; seed: number; groupsPerStep: number; groupSize: number }): Promise<StepPlan> {
      const rule = { split: 'train' as const, seed: input.seed, groupsPerStep: input.groupsPerStep, groupSize: input.groupSize };
      return {
        runId: input.runId,
        step: input.step,
        rule,
        episodes: episodesOf(loadTasks(loadTeam(input.team, input.teamOptions)), { runId: input.runId, step: input.step, rule }).length,
      };
    },

    /** Plans an eval, as planStep does. */
    async planEval(input: TeamRef & { runId: string; step: number; seed: number; count: number }): Promise<StepPlan> {
      const rule = { split: 'eval' as const, seed: input.seed, count: input.count };
      return {
        runId: input.runId,
        step: input.step,
        rule,
        episodes: episodesOf(loadTasks(loadTeam(input.team, input.teamOptions)), { runId: input.runId, step: input.step, rule }).length,
      };
    },

    /** One episode of a plan (what a durable episode workflow runs). */
    async episodeSpec(input: TeamRef & { plan: Omit<StepPlan, 'episodes'>; index: number }): Promise<EpisodeSpec> {
      return specAt(input);
    },

    /** One tool call of a durable episode; one whose team says it fails the run fails this activity, not retried. */
    async callTool(input: TeamRef & { req: ToolCallRequest }): Promise<ToolCallReply> {
      const ref = { team: input.team, teamOptions: input.teamOptions };
      return failRunOn(await threads('callTool').callTool(loadTeam(input.team, input.teamOptions), ref, input.req, Context.current().cancellationSignal));
    },

    /** Scores a finished durable episode and stores it (idempotent by episode id). */
    async recordEpisode(input: TeamRef & { meta: EpisodeMeta; trajectory: Trajectory }) {
      const ref = { team: input.team, teamOptions: input.teamOptions };
      const episode = await threads('recordEpisode').score(loadTeam(input.team, input.teamOptions), ref, input.meta, input.trajectory);
      // the episode made its last tool call: its servers of scope 'episode' in this worker's threads end
      userCode?.endEpisode?.(episode.meta.episodeId);
      await saveEpisodes(sql, [episode]);
      return { episodeId: episode.meta.episodeId, status: episode.trajectory.status, success: episode.success };
    },

    /**
     * Stores a durable episode whose child workflow was terminated as failed (idempotent by
     * episode id), with the reason its termination recorded: the control worker's episode watch
     * (processes/episode-watch.ts) says why it stopped it; an operator's reason is quoted. An
     * episode its workflow had stored before (another episode of its group hung) keeps its record,
     * and the run is told what that record says.
     */
    async recordStoppedEpisode(
      input: TeamRef & { runId: string; step: number; split: EpisodeMeta['split']; plan: Omit<StepPlan, 'episodes'>; index: number; workflowId: string },
    ) {
      const spec = specAt(input);
      const reason = await terminationReason(Context.current().client, input.workflowId);
      const error = reason?.startsWith('episode: ') ? reason : `episode: terminated before it finished (${reason ? `reason: ${reason}` : 'no reason given'})`;
      const meta = durableEpisodeMeta(spec, input);
      userCode?.endEpisode?.(spec.episodeId);
      const inserted = await saveEpisodes(sql, [
        { meta, trajectory: { episodeId: spec.episodeId, status: 'failed', error, turns: [] }, rewards: [], success: null },
      ]);
      const stored = inserted.has(spec.episodeId) ? undefined : await episodeOutcome(sql, spec.episodeId);
      // the error too: the run's progress and its fail-fast check name it
      return stored ?? { episodeId: spec.episodeId, status: 'failed', success: null, turns: 0, error };
    },

    /** Summarises a finished eval from its stored episodes and writes its metrics. */
    async recordEval(input: { runId: string; step: number }): Promise<EvalSummary> {
      const summary = await recordEval(sql, input);
      await exportCurves(input.runId);
      return summary;
    },

    /** Timings and throughput of a finished step, merged into its row. */
    async finishStep(input: { runId: string; step: number; metrics: Record<string, number> }) {
      await mergeStepMetrics(sql, input.runId, input.step, 'completed', input.metrics);
      await writeMetrics(
        sql,
        input.runId,
        Object.entries(input.metrics).map(([name, value]) => ({ step: input.step, kind: 'train', scope: 'team', name, value })),
      );
      await exportCurves(input.runId);
    },

    async setRunStatus(input: { runId: string; status: RunStatus }) {
      await setRunStatus(sql, input.runId, input.status);
      await exportCurves(input.runId);
    },

    async recordEvent(input: { runId: string; step: number; kind: string; detail?: unknown }) {
      await recordEvent(sql, input);
    },
  };
}

/**
 * Creates the run, or continues it when this start is a resume; tells the
 * execution where to start. A start never touches a run it does not own: a
 * new start of an existing run id is refused (whatever its config), and a
 * resume only continues a run that did not finish. A retry of this very
 * execution's startRun finds its own execution row and goes on.
 */
async function startRun(sql: Sql, workflowPatches: readonly string[] | undefined, input: StartRunInput) {
  const existing = await getRun(sql, input.runId);
  if (existing && !(await hasExecution(sql, input.runId, input.executionId))) {
    if (!input.resume) {
      const hint =
        existing.status === 'completed' || existing.status === 'stopped'
          ? 'start it under a new run id'
          : `start a new run id, or continue this one with troupe resume ${input.runId}`;
      throw ApplicationFailure.nonRetryable(
        `run ${input.runId} already exists (${existing.status}); a new start never continues or changes an existing run: ${hint}`,
        'RunExists',
      );
    }
    if (existing.status === 'completed' || existing.status === 'stopped')
      throw ApplicationFailure.nonRetryable(`run ${input.runId} is ${existing.status}; only a failed, terminated or timed-out run can be resumed`, 'RunExists');
    if (!sameConfig(existing.config, input.config)) {
      throw ApplicationFailure.nonRetryable(
        `run ${input.runId} already exists with a different config; start a new run id, or resume it with its stored config (troupe resume ${input.runId})`,
        'RunConfigMismatch',
      );
    }
  }
  // init-from, fork and sft: a bad source is refused before the run exists (a config typed into the Temporal UI)
  if (!existing && (input.config.init || input.config.fork || input.config.sft)) {
    const team = loadTeam(input.config.team, input.config.teamOptions);
    try {
      await checkInitSources(sql, input.config, team);
    } catch (e) {
      if (e instanceof InitSourceError) throw ApplicationFailure.nonRetryable(e.message, 'InvalidInit');
      throw e;
    }
    try {
      await checkSftSource(sql, input.config, team);
    } catch (e) {
      if (e instanceof InitSourceError) throw ApplicationFailure.nonRetryable(e.message, 'InvalidSft');
      throw e;
    }
  }
  // the team's MCP servers listed (tools/list) before the run exists: a refused start stores nothing
  const listings = existing ? [] : await listTeamServers(loadTeam(input.config.team, input.config.teamOptions));
  const refusal = listingRefusal(listings);
  if (refusal) throw ApplicationFailure.nonRetryable(`${refusal}; the server says onError 'fail-run'`, 'ToolListing');
  if (
    !existing &&
    !(await createRun(sql, {
      runId: input.runId,
      team: input.config.team,
      config: input.config,
      workflowId: input.workflowId,
      executionId: input.executionId,
    }))
  ) {
    throw ApplicationFailure.nonRetryable(`run ${input.runId} was just created by another start; pick a new run id`, 'RunExists');
  }
  // What this run's history may now hold: a Troupe whose workflow code lacks any of these cannot replay it.
  if (workflowPatches) await recordWorkflowPatches(sql, input.runId, workflowPatches);
  const point = await resumePoint(sql, input.runId, input.models, input.config.optimizer, input.config.frozen);
  await recordExecution(sql, { runId: input.runId, workflowId: input.workflowId, executionId: input.executionId, startStep: point.startStep });
  await setRunStatus(sql, input.runId, 'running');
  if (listings.length > 0) await recordEvent(sql, { runId: input.runId, step: 0, kind: 'tools-listed', detail: { servers: listings } });
  if (existing) {
    const completed = await completeCommittedSteps(sql, input.runId, point.startStep);
    await recordEvent(sql, {
      runId: input.runId,
      step: point.startStep,
      kind: 'resumed',
      detail: { executionId: input.executionId, versions: point.versions, ...(completed.length > 0 ? { completedSteps: completed } : {}) },
    });
  }
  return point;
}

/** Summarises a finished eval from its stored episodes and writes its metrics. */
async function recordEval(sql: Sql, input: { runId: string; step: number }): Promise<EvalSummary> {
  const episodes = await loadStepEpisodes(sql, input.runId, input.step, 'eval');
  const solved = episodes.filter((e) => e.success === true).length;
  const sums: Record<string, Record<string, { s: number; n: number }>> = {};
  for (const e of episodes)
    for (const r of e.rewards)
      for (const [k, v] of Object.entries(r.components)) {
        const c = ((sums[r.agent] ??= {})[k] ??= { s: 0, n: 0 });
        c.s += v;
        c.n++;
      }
  const rewards = Object.fromEntries(Object.entries(sums).map(([a, cs]) => [a, Object.fromEntries(Object.entries(cs).map(([k, c]) => [k, c.s / c.n]))]));
  const success = episodes.length === 0 ? 0 : solved / episodes.length;
  await writeMetrics(sql, input.runId, [
    { step: input.step, kind: 'eval', scope: 'team', name: 'success', value: success },
    { step: input.step, kind: 'eval', scope: 'team', name: 'episodes', value: episodes.length },
    ...Object.entries(rewards).flatMap(([agent, cs]) =>
      Object.entries(cs).map(([name, value]) => ({ step: input.step, kind: 'eval', scope: agent, name: `reward.${name}`, value })),
    ),
  ]);
  return { step: input.step, success, episodes: episodes.length, rewards };
}

/**
 * An episode scored with the team's rewards and success check, as the store
 * keeps it (the trajectory carries the scored status); shared by both rollout modes.
 */
export function scoredEpisode(team: ReturnType<typeof loadTeam>, meta: EpisodeMeta, trajectory: Trajectory): StoredEpisode {
  const scored = scoreEpisode(team, meta.task, trajectory);
  let success: boolean | null = null;
  if (scored.status !== 'failed') {
    try {
      success = team.success({ task: meta.task, outcome: trajectory.status === 'completed' ? trajectory.outcome : undefined, status: scored.status }) === true;
    } catch {
      success = false;
    }
  }
  return {
    meta,
    trajectory: { ...trajectory, status: scored.status, ...(scored.error === undefined ? {} : { error: scored.error }) },
    rewards: scored.rewards,
    success,
  };
}

/**
 * Same run config? The stored one is parsed again (so fields added since with
 * defaults compare equal) and both compared with sorted keys (jsonb reorders them).
 */
function sameConfig(stored: unknown, config: RunConfig): boolean {
  let parsed: unknown;
  try {
    parsed = parseRunConfig(stored);
  } catch {
    parsed = stored;
  }
  return JSON.stringify(canonical(parsed)) === JSON.stringify(canonical(config));
}

function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.keys(v as object)
        .sort()
        .map((k) => [k, canonical((v as Record<string, unknown>)[k])]),
    );
  return v;
}

export type TrainingControlActivities = ReturnType<typeof createTrainingControlActivities>;
