/**
 * Which episodes a step (or an eval) runs: pure and deterministic, so a
 * retried or resumed step plans exactly the same episodes with the same ids
 * and seeds. Seeds depend on the run seed, never on the run id, so two runs
 * with the same config produce the same trajectories.
 *
 * A workflow carries only a StepPlan (a reference: what to plan and how many
 * episodes); activities derive the episode specs from it (`episodesOf`), so no
 * list of episodes goes through Temporal history.
 */
import { deriveSeed } from '../../agents/seed';
import { selectTasks, type Split, type Task } from '../../agents/tasks';
import type { EpisodeMeta } from '../store/trajectories';

export interface EpisodeSpec {
  episodeId: string;
  taskId: string;
  task: unknown;
  groupIndex: number;
  episodeIndex: number;
  seed: number;
}

/** What a durable episode is stored under: its spec, where its run put it. */
export function durableEpisodeMeta(spec: EpisodeSpec, at: { runId: string; step: number; split: Split }): EpisodeMeta {
  const { episodeId, taskId, task, groupIndex, episodeIndex, seed } = spec;
  return { episodeId, runId: at.runId, step: at.step, split: at.split, taskId, task, groupIndex, episodeIndex, seed, mode: 'durable' };
}

/** How a step's or an eval's episodes are chosen: enough to plan them again anywhere. */
export type PlanRule = { split: 'train'; seed: number; groupsPerStep: number; groupSize: number } | { split: 'eval'; seed: number; count: number };

/** A planned step or eval, by reference. */
export interface StepPlan {
  runId: string;
  step: number;
  rule: PlanRule;
  /** Episodes planned; specs are indexed 0..episodes-1. */
  episodes: number;
}

const trainEpisodeId = (runId: string, step: number, group: number, episode: number) => `${runId}:s${step}:g${group}:e${episode}`;
const evalEpisodeId = (runId: string, step: number, task: number) => `${runId}:eval${step}:t${task}`;

/** The id of a plan's index-th episode, without its tasks (workflow code names durable children with it). */
export function episodeIdOf(plan: Omit<StepPlan, 'episodes'>, index: number): string {
  const r = plan.rule;
  return r.split === 'train'
    ? trainEpisodeId(plan.runId, plan.step, Math.floor(index / r.groupSize), index % r.groupSize)
    : evalEpisodeId(plan.runId, plan.step, index);
}

/** The id of the workflow that runs a plan's episodes [from, to) together (workflows/episode.ts, episodeGroupWorkflow). */
export function episodeGroupIdOf(plan: Omit<StepPlan, 'episodes'>, from: number, to: number): string {
  return `${plan.runId}:${plan.rule.split === 'train' ? 's' : 'eval'}${plan.step}:e${from}-${to - 1}`;
}

/** The id of a durable rollout's node-th rollout node (workflows/rollout-node.ts). */
export function rolloutNodeIdOf(plan: Omit<StepPlan, 'episodes'>, node: number): string {
  return `${plan.runId}:${plan.rule.split === 'train' ? 's' : 'eval'}${plan.step}:n${node}`;
}

export function planTrainEpisodes(
  all: readonly Task[],
  o: { runId: string; step: number; seed: number; groupsPerStep: number; groupSize: number },
): EpisodeSpec[] {
  const tasks = selectTasks(all, 'train', o.groupsPerStep, o.seed, o.step);
  const out: EpisodeSpec[] = [];
  tasks.forEach((t, g) => {
    for (let e = 0; e < o.groupSize; e++) {
      out.push({
        episodeId: trainEpisodeId(o.runId, o.step, g, e),
        taskId: t.id,
        task: t.data,
        groupIndex: g,
        episodeIndex: e,
        seed: deriveSeed(o.seed, 'train', o.step, g, e),
      });
    }
  });
  return out;
}

/** One greedy episode per held-out task (all of them when count is 0). */
export function planEvalEpisodes(all: readonly Task[], o: { runId: string; step: number; seed: number; count: number }): EpisodeSpec[] {
  const pool = all.filter((t) => t.split === 'eval');
  const tasks = o.count > 0 && o.count < pool.length ? selectTasks(all, 'eval', o.count, o.seed, -1) : pool;
  return tasks.map((t, i) => ({
    episodeId: evalEpisodeId(o.runId, o.step, i),
    taskId: t.id,
    task: t.data,
    groupIndex: i,
    episodeIndex: 0,
    seed: deriveSeed(o.seed, 'eval', t.id),
  }));
}

/** The episodes of a plan, or of its slice [from, to). */
export function episodesOf(all: readonly Task[], plan: Omit<StepPlan, 'episodes'>, from = 0, to?: number): EpisodeSpec[] {
  const specs =
    plan.rule.split === 'train'
      ? planTrainEpisodes(all, { runId: plan.runId, step: plan.step, ...plan.rule })
      : planEvalEpisodes(all, { runId: plan.runId, step: plan.step, ...plan.rule });
  return specs.slice(from, to);
}

/** What one rollout activity runs: a slice [from, to) of a plan, or (histories from before plans were references) a list. */
export type RolloutEpisodes = { plan: Omit<StepPlan, 'episodes'>; from: number; to: number } | { specs: EpisodeSpec[] };
