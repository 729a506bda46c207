/**
 * A durable rollout's episodes as child workflows, and the rollout node that
 * lets a rollout grow past Temporal's 2,000 pending children per workflow:
 * the run starts ceil(n / rolloutNodeSize) nodes, each node starts its slice
 * of episodes. Episode ids are the plan's (episodeIdOf) in both shapes, so a
 * retried or resumed rollout runs the same episodes either way.
 *
 * A node's history is ~3 events per episode child (initiated, started,
 * completed) plus its workflow tasks; at rolloutNodeSize <= 1,000 that stays
 * well under Temporal's history limits (docs/performance.md has the counts),
 * so a node never continues as new: it cannot while its children are pending.
 */
import {
  ApplicationFailure,
  ChildWorkflowFailure,
  executeChild,
  getExternalWorkflowHandle,
  patched,
  proxyActivities,
  TerminatedFailure,
  workflowInfo,
} from '@temporalio/workflow';
import type { TrainingControlActivities } from '../activities/training/control';
import { episodeIdOf, episodeGroupIdOf } from '../activities/training/plan';
import { addEpisode, firstFailures, rolloutProgressSignal, type RolloutPartProgress } from '../schema/rollout-progress';
import { episodeGroupWorkflow, episodeWorkflow, type EpisodeOutcome, type PlannedEpisodesInput } from './episode';
import { Patch } from './patches';
import { controlActivities } from './timeouts';

const control = proxyActivities<TrainingControlActivities>(controlActivities);

/** What every episode child of a rollout gets, less its index in the plan. */
export type EpisodeChildrenInput = PlannedEpisodesInput;

/** What a finished episode child says of itself: turns and error from children started since they say so. */
export type EpisodeChildResult = { status: string; turns?: number; error?: string };

/**
 * Runs the plan's episodes [from, to) as child workflows, one per episode or, at `perWorkflow` > 1, one
 * per that many episodes (episodeGroupWorkflow), telling `onDone` of each episode as its workflow
 * finishes; returns how many failed. Its first FAIL_FAST finishers all failed the same way: it fails
 * (EpisodesFailing, naming the error) and its other children end with the workflow.
 */
export async function runEpisodeChildren(
  input: EpisodeChildrenInput,
  from: number,
  to: number,
  onDone?: (r: EpisodeChildResult) => void,
  perWorkflow = 1,
): Promise<number> {
  // Runs before this check went on past such failures: their histories replay as they were.
  const watch = patched(Patch.durableFailFast) ? firstFailures(to - from, input.step, input.split) : undefined;
  const done = (r: EpisodeChildResult, watched = true) => {
    onDone?.(r);
    const failing = watched ? watch?.add(r) : undefined;
    if (failing !== undefined) throw ApplicationFailure.create({ message: failing, type: 'EpisodesFailing', nonRetryable: true });
    return r;
  };
  const children: Array<Promise<EpisodeChildResult[]>> = [];
  if (perWorkflow > 1)
    for (let at = from; at < to; at += perWorkflow)
      children.push(
        // a stopped workflow's episodes failed of one cause (one of them hung): one finisher to the fail-fast watch
        episodeGroupChild(input, at, Math.min(at + perWorkflow, to)).then(({ results, stopped }) => results.map((r, i) => done(r, !stopped || i === 0))),
      );
  else for (let i = from; i < to; i++) children.push(episodeChild(input, i).then((r) => [done(r)]));
  const results = (await Promise.all(children)).flat();
  return results.filter((r) => r.status === 'failed').length;
}

/**
 * One durable episode as a child workflow. A child that was terminated (the control worker
 * stops an episode whose code never yields, processes/episode-watch.ts; or an operator did) is
 * stored as a failed episode with the reason its termination recorded, and the rollout goes on;
 * before the stopped-episodes patch it failed the run.
 */
async function episodeChild(input: EpisodeChildrenInput, index: number): Promise<EpisodeChildResult> {
  const workflowId = episodeIdOf(input.plan, index);
  try {
    return await executeChild(episodeWorkflow, { workflowId, args: [{ ...input, index }] });
  } catch (e) {
    if (!(e instanceof ChildWorkflowFailure && e.cause instanceof TerminatedFailure) || !patched(Patch.stoppedEpisodes)) throw e;
    return stopped(input, index, workflowId);
  }
}

/**
 * The plan's episodes [from, to) as one child workflow. Terminated, its episodes that had not been
 * stored are stored as failed with its termination's reason; those it had stored keep their record.
 */
async function episodeGroupChild(input: EpisodeChildrenInput, from: number, to: number): Promise<{ results: EpisodeChildResult[]; stopped?: true }> {
  const workflowId = episodeGroupIdOf(input.plan, from, to);
  try {
    return { results: await executeChild(episodeGroupWorkflow, { workflowId, args: [{ episodes: input, from, to }] }) };
  } catch (e) {
    if (!(e instanceof ChildWorkflowFailure && e.cause instanceof TerminatedFailure)) throw e;
    return { results: await Promise.all(Array.from({ length: to - from }, (_, i) => stopped(input, from + i, workflowId))), stopped: true };
  }
}

function stopped(input: EpisodeChildrenInput, index: number, workflowId: string): Promise<EpisodeOutcome> {
  const { team, teamOptions, runId, step, split, plan } = input;
  return control.recordStoppedEpisode({ team, teamOptions, runId, step, split, plan, index, workflowId });
}

export interface RolloutNodeInput {
  episodes: EpisodeChildrenInput;
  from: number;
  to: number;
  /** Report progress to the run at most this often (workflow time); absent in nodes that predate it: no reports. */
  reportEverySeconds?: number;
  /** Episodes per child workflow (run setting episodesPerWorkflow); absent: one. */
  perWorkflow?: number;
}

/**
 * One node of a durable rollout: its slice of the plan's episodes; returns how many failed. While
 * they run it reports its counts to the run (rolloutProgressSignal), at most once per
 * reportEverySeconds of workflow time, on an episode's completion: a report is a command, so it
 * is made only where replay makes it again.
 */
export async function rolloutNode(input: RolloutNodeInput): Promise<number> {
  const { step, split } = input.episodes;
  const parent = workflowInfo().parent;
  const every = input.reportEverySeconds;
  if (every === undefined || !parent) return runEpisodeChildren(input.episodes, input.from, input.to, undefined, input.perWorkflow);
  const counts: RolloutPartProgress = { step, split, from: input.from, done: 0, failed: 0, turns: 0, errors: {} };
  const run = getExternalWorkflowHandle(parent.workflowId, parent.runId);
  let last = Date.now();
  return runEpisodeChildren(
    input.episodes,
    input.from,
    input.to,
    (r) => {
      addEpisode(counts, r);
      if (Date.now() - last < every * 1000 || counts.done === input.to - input.from) return;
      last = Date.now();
      // the run may have closed (a stop --now): its children go with it, the report with them
      run.signal(rolloutProgressSignal, { ...counts, errors: { ...counts.errors } }).catch(() => undefined);
    },
    input.perWorkflow,
  );
}
