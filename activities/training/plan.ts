/**
 * Which episodes a step (or an eval) runs: pure and deterministic, so a
 * retried or resumed step plans exactly the same episodes with the same ids
 * and seeds. Seeds depend on the run seed, never on the run id, so two runs
 * with the same config produce the same trajectories.
 */
import { deriveSeed } from '../../agents/seed';
import { selectTasks, type Task } from '../../agents/tasks';

export interface EpisodeSpec {
  episodeId: string;
  taskId: string;
  task: unknown;
  groupIndex: number;
  episodeIndex: number;
  seed: number;
}

export function planTrainEpisodes(all: readonly Task[], o: { runId: string; step: number; seed: number; groupsPerStep: number; groupSize: number }): EpisodeSpec[] {
  const tasks = selectTasks(all, 'train', o.groupsPerStep, o.seed, o.step);
  const out: EpisodeSpec[] = [];
  tasks.forEach((t, g) => {
    for (let e = 0; e < o.groupSize; e++) {
      out.push({ episodeId: `${o.runId}:s${o.step}:g${g}:e${e}`, taskId: t.id, task: t.data, groupIndex: g, episodeIndex: e, seed: deriveSeed(o.seed, 'train', o.step, g, e) });
    }
  });
  return out;
}

/** One greedy episode per held-out task (all of them when count is 0). */
export function planEvalEpisodes(all: readonly Task[], o: { runId: string; step: number; seed: number; count: number }): EpisodeSpec[] {
  const pool = all.filter((t) => t.split === 'eval');
  const tasks = o.count > 0 && o.count < pool.length ? selectTasks(all, 'eval', o.count, o.seed, -1) : pool;
  return tasks.map((t, i) => ({ episodeId: `${o.runId}:eval${o.step}:t${i}`, taskId: t.id, task: t.data, groupIndex: i, episodeIndex: 0, seed: deriveSeed(o.seed, 'eval', t.id) }));
}
