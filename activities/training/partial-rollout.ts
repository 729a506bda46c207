/**
 * A step's partial rollout (batched mode; partial.ts): groups carried into the
 * step and new ones run in lockstep rounds until enough whole groups finished;
 * the whole groups are stored for the step's update, the rest carried into the
 * next step, in one transaction.
 */
import { setMaxListeners } from 'node:events';
import { Context } from '@temporalio/activity';
import type { GenerateCall } from '../../agents/episode';
import { loadTeam } from '../../agents/team-registry';
import type { Sql } from '../../infra/db';
import { commitPartialRollout, loadCarried, partialRolloutOf, type CarriedEpisode, type PartialRolloutResult } from '../store/carried';
import type { StoredEpisode } from '../store/trajectories';
import { loadTasks } from '../tasks';
import type { TeamRef } from './control';
import { heartbeating } from './engine-work';
import type { EngineVersions } from './engine-versions';
import { CarriedOver, continuing, groupKey, heldGroups, Lockstep, type Generation } from './partial';
import { planTrainEpisodes } from './plan';
import type { RunEpisode } from './rollout';

export type RolloutPartialInput = TeamRef & {
  runId: string;
  step: number;
  seed: number;
  groupSize: number;
  inFlight: number;
  minFinished: number;
  maxCarrySteps?: number;
  versions: Record<string, number>;
};

/**
 * A step's partial rollout (batched mode; partial.ts): the groups carried into this step
 * and new ones up to `inFlight` groups run in lockstep rounds until `minFinished` whole
 * groups finished (and every group carried `maxCarrySteps` times, when set); the whole
 * groups are stored for this step's update, the rest carried into the next step, all in
 * one transaction. A retry redoes the rollout from the same stored inputs (same cut, same
 * episodes), or returns the committed result.
 */
export async function rolloutPartial(
  { sql, versions, runOne }: { sql: Sql; versions: EngineVersions; runOne: RunEpisode },
  input: RolloutPartialInput,
): Promise<PartialRolloutResult> {
  const { runId, step } = input;
  const committed = await partialRolloutOf(sql, runId, step);
  if (committed) return committed;
  const team = loadTeam(input.team, input.teamOptions);
  const ctx = Context.current();
  const carriedIn = await loadCarried(sql, runId, step);
  const carriedGroups = new Set(carriedIn.map((c) => groupKey(c.fromStep, c.spec.groupIndex)));
  const fresh = Math.max(0, input.inFlight - carriedGroups.size);
  const planned: CarriedEpisode[] =
    fresh === 0
      ? []
      : planTrainEpisodes(loadTasks(team), { runId, step, seed: input.seed, groupsPerStep: fresh, groupSize: input.groupSize }).map((spec) => ({
          spec,
          fromStep: step,
          carries: 0,
          generations: [],
        }));
  const all = [...carriedIn, ...planned];
  // groups carried maxCarrySteps times are finished here: decided from the stored carried rows alone
  const held = heldGroups(
    step,
    carriedIn.map((c) => ({ key: groupKey(c.fromStep, c.spec.groupIndex), fromStep: c.fromStep })),
    input.maxCarrySteps,
  );
  const lock = new Lockstep(
    all.map((e) => groupKey(e.fromStep, e.spec.groupIndex)),
    input.minFinished,
    held,
  );
  const ended: Array<StoredEpisode | undefined> = all.map((e) => e.finished && { ...e.finished, meta: { ...e.finished.meta, step } });
  const records: Generation[][] = all.map(() => []);
  let generatedTokens = 0;
  let replayedTokens = 0;
  all.forEach((e, i) => e.finished && lock.finish(i));
  setMaxListeners(0, ctx.cancellationSignal);
  await heartbeating(
    () => ({ rounds: lock.rounds }),
    () =>
      Promise.all(
        all.map(async (e, i) => {
          if (e.finished) return;
          const live = async (call: GenerateCall) => {
            await lock.enter(i);
            try {
              const reply = await versions.generate(runId, call);
              generatedTokens += reply.tokens.length;
              return reply;
            } finally {
              lock.leave(i);
            }
          };
          const gen = continuing(e.generations, live, records[i]!);
          try {
            ended[i] = await runOne(team, ctx.cancellationSignal, gen.generate, {
              team: { team: input.team, teamOptions: input.teamOptions },
              input: { episodeId: e.spec.episodeId, seed: e.spec.seed, task: e.spec.task, versions: input.versions },
              meta: { ...e.spec, runId, step, split: 'train', mode: 'batched' },
            });
          } catch (err) {
            if (!(err instanceof CarriedOver)) throw err;
          } finally {
            replayedTokens += gen.replayedTokens();
            lock.finish(i);
          }
        }),
      ),
  );
  const whole = lock.wholeGroups();
  const trained: StoredEpisode[] = [];
  const carried: CarriedEpisode[] = [];
  // A step's groups are told apart by their index: whole groups are numbered in order (carried ones first).
  const renumbered = new Map<string, number>();
  all.forEach((e, i) => {
    const done = ended[i];
    const key = groupKey(e.fromStep, e.spec.groupIndex);
    if (done && whole.has(key)) {
      if (!renumbered.has(key)) renumbered.set(key, renumbered.size);
      trained.push({ ...done, meta: { ...done.meta, groupIndex: renumbered.get(key)! } });
    } else
      carried.push({
        spec: e.spec,
        fromStep: e.fromStep,
        carries: e.carries + 1,
        ...(done ? { finished: done } : {}),
        generations: done ? [] : records[i]!,
      });
  });
  return commitPartialRollout(sql, {
    runId,
    step,
    trained,
    carried,
    result: {
      episodes: trained.length,
      failed: trained.filter((e) => e.trajectory.status === 'failed').length,
      groups: whole.size,
      carried: carried.length,
      carriedGroups: new Set(carried.map((e) => groupKey(e.fromStep, e.spec.groupIndex))).size,
      carriedMaxAge: Math.max(0, ...carried.map((e) => step + 1 - e.fromStep)),
      trainedMaxAge: Math.max(0, ...all.filter((e) => whole.has(groupKey(e.fromStep, e.spec.groupIndex))).map((e) => step - e.fromStep)),
      heldGroups: held.size,
      generatedTokens,
      replayedTokens,
      rounds: lock.rounds,
    },
  });
}
