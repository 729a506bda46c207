/**
 * Carried episodes of partial rollouts (migration 007): the unfinished groups a
 * step's rollout hands to the next step's. A step's rollout commits its whole
 * finished groups, the groups it carries and its result in one transaction, so
 * a crash at any point either keeps all of it or none (the retry redoes it).
 */
import type { Sql } from '../../infra/db';
import type { EpisodeSpec } from '../training/plan';
import type { Generation } from '../training/partial';
import { countSavedEpisodes, insertEpisodes, type StoredEpisode } from './trajectories';
import { timedStoreWrite } from '../../infra/metrics';

export interface CarriedEpisode {
  spec: EpisodeSpec;
  /** The step that planned it. */
  fromStep: number;
  /** Rollouts that carried it so far (1: carried once). */
  carries: number;
  /** Its scored episode, when it finished and waits for the rest of its group. */
  finished?: StoredEpisode;
  /** Its generations so far (empty once finished). */
  generations: Generation[];
}

/** What a step's partial rollout did (returned again to a retried activity). */
export interface PartialRolloutResult {
  /** Episodes of whole groups stored for this step's update, and how many of them failed. */
  episodes: number;
  failed: number;
  groups: number;
  /** Episodes carried into the next step, and their groups. */
  carried: number;
  carriedGroups: number;
  /** Steps since the oldest carried episode was planned, counted into the next step (0: none carried). */
  carriedMaxAge: number;
  /**
   * Steps from planning to this step of the oldest episode trained here (0: none carried), and the
   * groups carried partialRollouts.maxCarrySteps times that the rollout held until they finished.
   * Unset in results stored before they were counted.
   */
  trainedMaxAge?: number;
  heldGroups?: number;
  /** Tokens sampled in this rollout, and tokens of carried episodes served from the store instead. */
  generatedTokens: number;
  replayedTokens: number;
  rounds: number;
}

/** The episodes carried into `step`, in (fromStep, group, episode) order. */
export async function loadCarried(sql: Sql, runId: string, step: number): Promise<CarriedEpisode[]> {
  const rows = await sql`
    SELECT from_step, carries, spec, finished, generations FROM carried_episodes
    WHERE run_id = ${runId} AND into_step = ${step}
    ORDER BY from_step, (spec->>'groupIndex')::int, (spec->>'episodeIndex')::int`;
  return rows.map((r) => ({
    spec: r.spec as EpisodeSpec,
    fromStep: r.from_step as number,
    carries: r.carries as number,
    ...(r.finished === null ? {} : { finished: r.finished as StoredEpisode }),
    generations: r.generations as Generation[],
  }));
}

/** The stored result of a step's partial rollout, if it committed. */
export async function partialRolloutOf(sql: Sql, runId: string, step: number): Promise<PartialRolloutResult | undefined> {
  const [row] = await sql`SELECT result FROM partial_rollouts WHERE run_id = ${runId} AND step = ${step}`;
  return row?.result as PartialRolloutResult | undefined;
}

/**
 * Commits a step's partial rollout: its whole groups' episodes (for its update), the episodes
 * it carries into step + 1 and its result. A second commit of the same step changes nothing.
 */
export async function commitPartialRollout(
  sql: Sql,
  c: { runId: string; step: number; trained: readonly StoredEpisode[]; carried: readonly CarriedEpisode[]; result: PartialRolloutResult },
): Promise<PartialRolloutResult> {
  let inserted: Set<string> = new Set();
  const result = await timedStoreWrite('episodes', () =>
    sql.begin(async (t) => {
      const tx = t as unknown as Sql;
      const [first] = await tx`
      INSERT INTO partial_rollouts (run_id, step, result) VALUES (${c.runId}, ${c.step}, ${tx.json(c.result as never)})
      ON CONFLICT (run_id, step) DO NOTHING RETURNING step`;
      if (!first) return (await partialRolloutOf(tx, c.runId, c.step))!;
      inserted = await insertEpisodes(tx, c.trained);
      const rows = c.carried.map((e) => ({
        run_id: c.runId,
        into_step: c.step + 1,
        episode_id: e.spec.episodeId,
        from_step: e.fromStep,
        carries: e.carries,
        spec: tx.json(e.spec as never),
        finished: e.finished ? tx.json(e.finished as never) : null,
        generations: tx.json(e.generations as never),
      }));
      for (let i = 0; i < rows.length; i += 500) await tx`INSERT INTO carried_episodes ${tx(rows.slice(i, i + 500) as never)}`;
      return c.result;
    }),
  );
  countSavedEpisodes(c.trained, inserted);
  return result;
}

/** Carried episodes and their age (steps since planned), per step they were carried into: for status and tests. */
export async function carriedSummary(sql: Sql, runId: string): Promise<Array<{ step: number; episodes: number; maxAge: number }>> {
  const rows = await sql`
    SELECT into_step, count(*)::int AS n, max(into_step - from_step)::int AS age FROM carried_episodes
    WHERE run_id = ${runId} GROUP BY into_step ORDER BY into_step`;
  return rows.map((r) => ({ step: r.into_step as number, episodes: r.n as number, maxAge: r.age as number }));
}
