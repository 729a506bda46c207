/**
 * A step's or eval's rollout, in the run's mode: durable (one child workflow per
 * episode or per episodesPerWorkflow episodes, through rollout nodes past rolloutNodeSize episodes) or batched (activities of up to ROLLOUT_CHUNK episodes on the pool).
 * Returns how many episodes failed.
 */
import { executeChild, patched } from '@temporalio/workflow';
import type { Sampling } from '../../agents/agent';
import type { Split } from '../../agents/tasks';
import { rolloutNodeIdOf, type EpisodeSpec, type StepPlan } from '../../activities/training/plan';
import { poolsOf, type PartialShape } from '../../schema/run-config';
import { episodeWorkflow } from '../episode';
import { Patch } from '../patches';
import { rolloutNode, runEpisodeChildren } from '../rollout-node';
import { poolAt } from './activities';
import type { RolloutDone, RunState } from './state';

/** Episodes per batched rollout activity. */
const ROLLOUT_CHUNK = 256;

/** A model's sampling pool (rollouts) or training pool (version 0, updates): the same one unless the team or run splits them. */
export function poolOf(run: RunState, model: string, role: 'sample' | 'train' = 'sample') {
  const pool = poolsOf(run.config, run.resolved.team, model)[role];
  return poolAt(run.poolQueues?.[pool] ?? pool);
}

/** Task queue of each model's sampling pool, for durable episodes (only where a run or team moved one). */
function sampleQueues(run: RunState) {
  const { config, team } = run.resolved;
  if (!config.pools && run.models.every((m) => !team.models[m]!.trainPool)) return {};
  return {
    modelQueues: Object.fromEntries(
      run.models.map((m) => {
        const p = poolsOf(config, team, m).sample;
        return [m, run.poolQueues?.[p] ?? p];
      }),
    ),
  };
}

/** Every pool the run's models use (sampling and training), for the task queue lookup. */
export const poolsUsed = (run: RunState) => [...new Set(run.models.flatMap((m) => Object.values(poolsOf(run.config, run.resolved.team, m))))];

/** Seconds between one part's progress reports; the run gets about one report per this many seconds, however many parts. */
const REPORT_EVERY_S = 5;

/** A part of a rollout finished: its counts, as the progress shows them; returns `failed`. */
function finished(run: RunState, step: number, split: Split, from: number, episodes: number, failed: number): number {
  run.progress.partFinished(step, split, from, episodes, failed, Date.now());
  run.publishDetails();
  return failed;
}

/** The episodes of a plan (by reference), sampling the `serving` versions; their progress shows live while they run. */
export async function rolloutPlan(
  run: RunState,
  plan: StepPlan,
  sampling?: Partial<Sampling>,
  serving: Record<string, number> = run.versions,
): Promise<number> {
  const split = plan.rule.split;
  run.progress.begin(plan.step, split, plan.episodes, Date.now());
  run.publishDetails();
  try {
    return await rolloutParts(run, plan, sampling, serving);
  } finally {
    run.progress.end(plan.step, split);
    run.publishDetails();
  }
}

async function rolloutParts(run: RunState, plan: StepPlan, sampling: Partial<Sampling> | undefined, serving: Record<string, number>): Promise<number> {
  const { episodes, ...byRef } = plan;
  const split = plan.rule.split;
  const at = plan.step;
  const { ref, runId, poolQueues } = run;
  if (run.config.rollout === 'durable') {
    const recordLocally = patched(Patch.localRecordEpisode) ? { recordLocally: true } : {};
    const children = { ...ref, runId, step: at, split, plan: byRef, versions: serving, sampling, poolQueues, ...sampleQueues(run), ...recordLocally };
    const size = run.config.rolloutNodeSize;
    // Runs that predate the setting have none (and one episode per workflow); only runs that set it reach the patch.
    const per = (run.config.episodesPerWorkflow ?? 1) > 1 && patched(Patch.episodeGroups) ? { perWorkflow: run.config.episodesPerWorkflow } : {};
    // Up to one node's worth of episodes stays flat: a node would add its own history and a workflow task hop for nothing.
    if (episodes <= size || !patched(Patch.rolloutTree))
      return runEpisodeChildren(children, 0, episodes, (r) => run.progress.episodeDone(at, split, 0, r, Date.now()), per.perWorkflow);
    const nodes = Math.ceil(episodes / size);
    const failed = await Promise.all(
      Array.from({ length: nodes }, (_, k) => {
        const [from, to] = [k * size, Math.min((k + 1) * size, episodes)];
        return executeChild(rolloutNode, {
          workflowId: rolloutNodeIdOf(byRef, k),
          args: [{ episodes: children, from, to, reportEverySeconds: REPORT_EVERY_S * nodes, ...per }],
        }).then((f) => finished(run, at, split, from, to - from, f));
      }),
    );
    return failed.reduce((n, f) => n + f, 0);
  }
  const parts: Array<[number, number]> = [];
  for (let from = 0; from < episodes; from += ROLLOUT_CHUNK) parts.push([from, Math.min(from + ROLLOUT_CHUNK, episodes)]);
  const reportEverySeconds = REPORT_EVERY_S * parts.length;
  const results = await Promise.all(
    parts.map(([from, to]) =>
      poolOf(run, run.models[0]!)
        .rolloutBatch({ ...ref, runId, step: at, split, plan: byRef, from, to, versions: serving, sampling, reportEverySeconds })
        .then((r) => ({ ...r, failed: finished(run, at, split, from, to - from, r.failed) })),
    ),
  );
  return results.reduce((n, r) => n + r.failed, 0);
}

/**
 * A step's partial rollout (activities/training/partial.ts): one activity runs the groups carried
 * into step `at` and new ones, sampling the `serving` versions, stores the whole groups for the
 * step's update and carries the rest into step at + 1.
 */
export async function rolloutPartialStep(run: RunState, at: number, shape: PartialShape, serving: Record<string, number>): Promise<RolloutDone> {
  const t0 = Date.now();
  const r = await poolOf(run, run.models[0]!).rolloutPartial({
    ...run.ref,
    runId: run.runId,
    step: at,
    seed: run.config.seed,
    groupSize: run.config.groupSize,
    ...shape,
    versions: serving,
  });
  return {
    seconds: (Date.now() - t0) / 1000,
    episodes: r.episodes,
    failed: r.failed,
    partial: {
      'partial.groups': r.groups,
      'partial.carriedEpisodes': r.carried,
      'partial.carriedGroups': r.carriedGroups,
      'partial.carriedMaxAge': r.carriedMaxAge,
      // results committed before these were counted (and their replays) have none
      ...(r.trainedMaxAge === undefined ? {} : { 'partial.trainedMaxAge': r.trainedMaxAge }),
      ...(r.heldGroups === undefined ? {} : { 'partial.heldGroups': r.heldGroups }),
      'partial.generatedTokens': r.generatedTokens,
      'partial.replayedTokens': r.replayedTokens,
      'partial.rounds': r.rounds,
    },
  };
}

/** Histories from before plans were references: planStep/planEval returned the episode list. */
export async function rolloutListed(run: RunState, specs: EpisodeSpec[], split: Split, at: number, sampling?: Partial<Sampling>): Promise<number> {
  const { ref, runId, poolQueues, versions } = run;
  if (run.config.rollout === 'durable') {
    const results = await Promise.all(
      specs.map((spec) =>
        executeChild(episodeWorkflow, {
          workflowId: spec.episodeId,
          args: [{ ...ref, runId, step: at, split, spec, versions, sampling, poolQueues, ...sampleQueues(run) }],
        }),
      ),
    );
    return results.filter((r) => r.status === 'failed').length;
  }
  const parts: EpisodeSpec[][] = [];
  for (let i = 0; i < specs.length; i += ROLLOUT_CHUNK) parts.push(specs.slice(i, i + ROLLOUT_CHUNK));
  const results = await Promise.all(
    parts.map((part) => poolOf(run, run.models[0]!).rolloutBatch({ ...ref, runId, step: at, split, specs: part, versions, sampling })),
  );
  return results.reduce((n, r) => n + r.failed, 0);
}
