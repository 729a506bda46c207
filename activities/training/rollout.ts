/**
 * Batched rollouts: many episodes in the pool worker's process against the
 * engine, which coalesces their turns into batched runs; each finished episode
 * scored and stored.
 */
import { setMaxListeners } from 'node:events';
import { Context, heartbeat } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { CallJournal, GenerateCall, GenerateReply } from '../../agents/episode';
import type { Sampling } from '../../agents/agent';
import type { Split } from '../../agents/tasks';
import { loadTeam } from '../../agents/team-registry';
import type { Sql } from '../../infra/db';
import { openGatewaySessions } from '../../gateway';
import { gatewayJournal } from '../store/gateway-journal';
import { saveEpisodes, storedEpisodeIds, type StoredEpisode } from '../store/trajectories';
import { addEpisode, firstFailures, rolloutProgressSignal, type RolloutPartProgress } from '../../schema/rollout-progress';
import { loadTasks } from '../tasks';
import { executeTool, failRunOn } from '../tools';
import { episodeEnded } from '../../agents/tool';
import { scoredEpisode, type TeamRef } from './control';
import { heartbeating } from './engine-work';
import type { EngineVersions } from './engine-versions';
import { runBatchedEpisode } from './episode-sandbox';
import type { EpisodeThreads, ThreadEpisode } from './episode-threads';
import { episodesOf, type RolloutEpisodes } from './plan';
import type { StepBatches } from './step-batches';

/** Finished episodes per store transaction in a batched rollout: few round trips, early progress. */
const ROLLOUT_FLUSH = 32;

/** One batched episode, scored. */
export type RunEpisode = (
  team: ReturnType<typeof loadTeam>,
  signal: AbortSignal,
  generate: (call: GenerateCall) => Promise<GenerateReply>,
  episode: ThreadEpisode,
  journal?: CallJournal,
) => Promise<StoredEpisode>;

/** Runs batched episodes on episode threads where the worker has them (a runaway episode cannot block the others), else here (activities called directly, as some tests do). */
export function episodeRunner(episodes: EpisodeThreads | undefined): RunEpisode {
  return (team, signal, generate, episode, journal) =>
    episodes
      ? episodes.run(episode, { cpuMs: team.limits.cpuMs, generate, journal, stopped: (trajectory) => scoredEpisode(team, episode.meta, trajectory), signal })
      : runBatchedEpisode(team, episode.input, {
          generate,
          callTool: async (req) => failRunOn(await executeTool(team, req, signal)),
          now: () => Date.now(),
          openSessions: openGatewaySessions,
          journal,
        })
          .then((trajectory) => scoredEpisode(team, episode.meta, trajectory))
          .finally(() => episodeEnded(episode.input.episodeId));
}

export type RolloutBatchInput = TeamRef & {
  runId: string;
  step: number;
  split: Split;
  versions: Record<string, number>;
  sampling?: Partial<Sampling>;
  /** How often to report progress to the run (rolloutProgressSignal); absent: never (runs that predate it, direct calls). */
  reportEverySeconds?: number;
} & RolloutEpisodes;

/**
 * Counts a part's finished episodes and sends them to its run every `everySeconds` while they
 * change (a signal: a few history events each, so the workflow spaces them by the part count).
 * A report that fails (the run closed, Temporal busy) is dropped: the next one carries the totals.
 */
function progressReporter(ctx: Context, step: number, split: Split, from: number, everySeconds: number | undefined) {
  const counts: RolloutPartProgress = { step, split, from, done: 0, failed: 0, turns: 0, errors: {} };
  let sent = '';
  const send = () => {
    const now = JSON.stringify(counts);
    if (now === sent) return;
    sent = now;
    const run = ctx.info.workflowExecution;
    if (!run) return; // a standalone activity: no run to tell
    ctx.client.workflow
      .getHandle(run.workflowId, run.runId)
      .signal(rolloutProgressSignal, counts)
      .catch(() => undefined);
  };
  const timer = everySeconds === undefined ? undefined : setInterval(send, everySeconds * 1000);
  return {
    add: (e: StoredEpisode) => addEpisode(counts, { status: e.trajectory.status, turns: e.trajectory.turns.length, error: e.trajectory.error }),
    stop: () => clearInterval(timer),
  };
}

/**
 * Runs many episodes in this process against the engine (batched mode).
 * Finished episodes are scored at once and stored in flushes of
 * ROLLOUT_FLUSH (one transaction each, overlapping the episodes still
 * generating). Episodes already stored are skipped, so a retry only does
 * what is left; progress is heartbeated as the ids stored so far.
 */
export async function rolloutBatch(
  { sql, versions, runOne, batches }: { sql: Sql; versions: EngineVersions; runOne: RunEpisode; batches?: Pick<StepBatches, 'stored'> },
  input: RolloutBatchInput,
): Promise<{ episodes: number; skipped: number; failed: number }> {
  const team = loadTeam(input.team, input.teamOptions);
  const ctx = Context.current();
  // Episodes by reference (a plan and a slice), or listed (workflows started before plans were references).
  const specs = 'plan' in input ? episodesOf(loadTasks(team), input.plan, input.from, input.to) : input.specs;
  const previously = new Set<string>((ctx.info.heartbeatDetails as { finished?: string[] } | undefined)?.finished ?? []);
  const stored = await storedEpisodeIds(
    sql,
    specs.map((s) => s.episodeId),
  );
  const finished: string[] = [...stored];
  const todo = specs.filter((s) => !stored.has(s.episodeId) && !previously.has(s.episodeId));
  let failed = 0;
  let pending: StoredEpisode[] = [];
  let writing: Promise<unknown> = Promise.resolve();
  // One flush after another on one connection; the ids count as finished once committed.
  const flush = () => {
    const batch = pending;
    pending = [];
    if (batch.length > 0) {
      writing = writing.then(async () => {
        await saveEpisodes(sql, batch);
        for (const e of batch) finished.push(e.meta.episodeId);
      });
      writing.catch(() => undefined); // surfaced by the final await, not as an unhandled rejection
    }
    return writing;
  };
  // Every episode listens on the activity's cancellation, and on this rollout's own stop (FAIL_FAST, schema/rollout-progress.ts).
  const stop = new AbortController();
  const signal = AbortSignal.any([ctx.cancellationSignal, stop.signal]);
  setMaxListeners(0, ctx.cancellationSignal, stop.signal, signal);
  const watch = firstFailures(todo.length, input.step, input.split);
  const progress = progressReporter(ctx, input.step, input.split, 'from' in input ? input.from : 0, input.reportEverySeconds);
  await heartbeating(
    () => ({ finished }),
    async () => {
      const generate = (call: GenerateCall) => versions.generate(input.runId, call);
      // gateway calls are journaled: a retry of this rollout answers them again without sampling
      const journal = gatewayJournal(sql, input.runId);
      // All episodes in flight at once: the engine coalesces their turns into batched runs.
      await Promise.all(
        todo.map(async (spec) => {
          const episode = await runOne(
            team,
            signal,
            generate,
            {
              team: { team: input.team, teamOptions: input.teamOptions },
              input: { episodeId: spec.episodeId, seed: spec.seed, task: spec.task, versions: input.versions, sampling: input.sampling },
              meta: { ...spec, runId: input.runId, step: input.step, split: input.split, mode: 'batched' },
            },
            journal,
          );
          if (episode.trajectory.status === 'failed') failed++;
          progress.add(episode);
          pending.push(episode);
          const failing = watch.add({ status: episode.trajectory.status, error: episode.trajectory.error });
          if (failing !== undefined) {
            await flush(); // stored, so `troupe status` counts them
            const failure = ApplicationFailure.nonRetryable(failing, 'EpisodesFailing');
            stop.abort(failure);
            throw failure;
          }
          if (pending.length >= ROLLOUT_FLUSH) void flush();
        }),
      );
      await flush();
    },
  ).finally(progress.stop);
  heartbeat({ finished });
  // every episode of this part is committed: the step's update may find its batch read ahead (step-batches.ts)
  if ('plan' in input && input.plan.rule.split === 'train') {
    const { groupsPerStep, groupSize } = input.plan.rule;
    void batches?.stored(input.runId, input.step, input.from, input.to, groupsPerStep * groupSize);
  }
  return { episodes: specs.length, skipped: specs.length - todo.length, failed };
}
