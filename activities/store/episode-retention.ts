/**
 * Episode retention (issue #49): which training episodes of a run, with their turns, tool
 * calls, rewards and gateway journal, the store keeps, and the pruning of the others.
 *
 * Kept, whatever the policy: every eval episode, and every episode of a step at or after the
 * run's resume point (activities/training/resume.ts: the earliest step some model has not
 * committed). The training workflow reads back only those: an update loads its own step's
 * training episodes, an eval its step's eval episodes, and a resumed run redoes the steps from
 * its resume point on, reusing the episodes they already stored. A step before the resume
 * point has been committed by every model and is never read again by a run.
 *
 * Of the older training episodes the policy keeps those inside its window, by age (`keepDays`:
 * created less than that many days ago) and / or by step (`keepSteps`: the run's newest that
 * many steps with training episodes); with both, either window keeps an episode; with neither,
 * only the sample and the evals stay. A deterministic `sample` of the rest stays too: an episode
 * is in it when the first 32 bits of sha256(episode id), as a fraction of 2^32, are below
 * `sample`, so every pass (and every reader) picks the same episodes.
 *
 * A pass also deletes the partial rollouts' working state before the resume point (migration
 * 008: the episodes carried into a step, and a step's stored rollout result), whatever the window:
 * only that step's own rollout reads them, and a step before the resume point never rolls out
 * again. Nothing shows them; a carried episode's generations can be as large as its turns.
 *
 * Pruning deletes at most `batchSize` episodes per transaction (their child rows go by ON
 * DELETE CASCADE, their journal with them), so no lock is held for long and a crash loses
 * nothing but the rest of the pass. Each batch adds what it deleted to the run's row of
 * episode_retention (migration 010) in the same transaction: the dashboard's "N training
 * episodes pruned (policy ...)" is exact.
 */
import { createHash } from 'node:crypto';
import type { Sql } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { resumePoint } from '../training/resume';

export interface EpisodeRetentionPolicy {
  /** Keep training episodes created less than this many days ago (> 0). */
  keepDays?: number;
  /** Keep the training episodes of the run's newest this many steps (a whole number >= 1). */
  keepSteps?: number;
  /** Also keep this fraction (0..1) of the other training episodes, chosen by a hash of the episode id. */
  sample: number;
}

/** What each field is called where a policy comes from (flags of `troupe gc`, variables of the control worker). */
export type PolicyFieldNames = Record<keyof EpisodeRetentionPolicy, string>;

const FIELD_NAMES: PolicyFieldNames = { keepDays: 'keepDays', keepSteps: 'keepSteps', sample: 'sample' };

/** The policy, or a TroupeError naming the first bad field (as `names` calls it). */
export function validateEpisodePolicy(p: EpisodeRetentionPolicy, names: PolicyFieldNames = FIELD_NAMES): EpisodeRetentionPolicy {
  if (p.keepDays !== undefined && !(Number.isFinite(p.keepDays) && p.keepDays > 0))
    throw new TroupeError(`${names.keepDays}: must be a number of days > 0 (got ${p.keepDays})`);
  if (p.keepSteps !== undefined && !(Number.isInteger(p.keepSteps) && p.keepSteps >= 1))
    throw new TroupeError(`${names.keepSteps}: must be a whole number of steps >= 1 (got ${p.keepSteps})`);
  if (!(Number.isFinite(p.sample) && p.sample >= 0 && p.sample <= 1))
    throw new TroupeError(`${names.sample}: must be a fraction from 0 to 1 (got ${p.sample})`);
  return p;
}

/** The policy in words, as the dashboard and logs show it. */
export function describeEpisodePolicy(p: EpisodeRetentionPolicy): string {
  const window = [
    p.keepDays === undefined ? undefined : `the last ${p.keepDays} day(s)`,
    p.keepSteps === undefined ? undefined : `the last ${p.keepSteps} step(s)`,
  ].filter((w): w is string => w !== undefined);
  const parts = [
    'evals',
    ...(window.length ? [window.join(' or ')] : []),
    ...(p.sample > 0 ? [`a ${+(p.sample * 100).toFixed(4)}% sample by episode id`] : []),
  ];
  return `keep ${parts.join(', ')}`;
}

/** Whether an episode is in the policy's sample: sha256(id)'s first 32 bits / 2^32 < fraction. */
export function inSample(episodeId: string, fraction: number): boolean {
  if (fraction <= 0) return false;
  if (fraction >= 1) return true;
  return createHash('sha256').update(episodeId).digest().readUInt32BE(0) / 2 ** 32 < fraction;
}

export interface EpisodeFacts {
  episodeId: string;
  step: number;
  split: 'train' | 'eval';
  createdAt: Date;
}

export interface RunFacts {
  /** The run's resume point: its episodes from this step on may still be read. */
  safeBefore: number;
  /** The run's newest step with training episodes (the step window counts back from it). */
  newestStep: number;
  now: Date;
}

/** Whether the policy prunes this episode of a run (the pure rule the module comment states). */
export function prunable(e: EpisodeFacts, run: RunFacts, p: EpisodeRetentionPolicy): boolean {
  if (e.split !== 'train' || e.step >= run.safeBefore) return false;
  if (p.keepSteps !== undefined && e.step > run.newestStep - p.keepSteps) return false;
  if (p.keepDays !== undefined && run.now.getTime() - e.createdAt.getTime() < p.keepDays * 86_400_000) return false;
  return !inSample(e.episodeId, p.sample);
}

export interface EpisodePrunePlan {
  runId: string;
  /** The resume point the plan respected. */
  safeBefore: number;
  /** Training episodes to prune, by step then id. */
  episodes: Array<{ episodeId: string; step: number }>;
  /** Rows of carried_episodes (into a step before safeBefore) and partial_rollouts (of such a step) to delete. */
  carriedEpisodes: number;
  partialRollouts: number;
}

/** Rows read per query while planning. */
const PAGE = 10_000;

/**
 * What the policy would prune, per run (every run, or `runId`), runs with nothing to prune left
 * out. Reads only training episodes before each run's resume point, a page at a time.
 */
export async function planEpisodePrune(sql: Sql, p: EpisodeRetentionPolicy, opts: { runId?: string; now?: Date } = {}): Promise<EpisodePrunePlan[]> {
  validateEpisodePolicy(p);
  const now = opts.now ?? new Date();
  const runs = opts.runId === undefined ? (await sql`SELECT run_id FROM runs ORDER BY run_id`).map((r) => r.run_id as string) : [opts.runId];
  const out: EpisodePrunePlan[] = [];
  for (const runId of runs) {
    const models = (await sql`SELECT DISTINCT model FROM versions WHERE run_id = ${runId} ORDER BY model`).map((r) => r.model as string);
    // No version yet: the run has not started a step's bookkeeping, nothing of it is safe.
    if (models.length === 0) continue;
    const { startStep, fresh } = await resumePoint(sql, runId, models);
    if (fresh || startStep <= 0) continue;
    const [newest] = await sql`SELECT max(step) AS step FROM episodes WHERE run_id = ${runId} AND split = 'train'`;
    if (newest?.step === null || newest?.step === undefined) continue;
    const facts: RunFacts = { safeBefore: startStep, newestStep: newest.step as number, now };
    const episodes: EpisodePrunePlan['episodes'] = [];
    let after = { step: -1, id: '' };
    for (;;) {
      const rows = await sql`
        SELECT episode_id, step, created_at FROM episodes
        WHERE run_id = ${runId} AND split = 'train' AND step < ${startStep} AND (step, episode_id) > (${after.step}, ${after.id})
        ORDER BY step, episode_id LIMIT ${PAGE}`;
      for (const r of rows) {
        const e: EpisodeFacts = { episodeId: r.episode_id as string, step: r.step as number, split: 'train', createdAt: r.created_at as Date };
        if (prunable(e, facts, p)) episodes.push({ episodeId: e.episodeId, step: e.step });
      }
      if (rows.length < PAGE) break;
      const last = rows[rows.length - 1];
      if (!last) break;
      after = { step: last.step as number, id: last.episode_id as string };
    }
    const [working] = await sql`
      SELECT (SELECT count(*) FROM carried_episodes WHERE run_id = ${runId} AND into_step < ${startStep})::int AS carried,
             (SELECT count(*) FROM partial_rollouts WHERE run_id = ${runId} AND step < ${startStep})::int AS partial`;
    const carriedEpisodes = (working?.carried as number | undefined) ?? 0;
    const partialRollouts = (working?.partial as number | undefined) ?? 0;
    if (episodes.length || carriedEpisodes || partialRollouts) out.push({ runId, safeBefore: startStep, episodes, carriedEpisodes, partialRollouts });
  }
  return out;
}

export interface EpisodePruneResult {
  runId: string;
  /** Training episodes deleted, their turns, and their journaled gateway calls. */
  episodes: number;
  turns: number;
  gatewayCalls: number;
  /** Partial rollouts' working state deleted: carried episodes and stored step results. */
  carriedEpisodes: number;
  partialRollouts: number;
}

/** Turns a plan's episodes hold now (what a dry run reports), counted a batch at a time. */
export async function plannedTurns(sql: Sql, plan: EpisodePrunePlan, batchSize = 1000): Promise<number> {
  let n = 0;
  for (let i = 0; i < plan.episodes.length; i += batchSize) {
    const ids = plan.episodes.slice(i, i + batchSize).map((e) => e.episodeId);
    const [r] = await sql`SELECT count(*)::int AS n FROM turns WHERE episode_id = ANY(${sql.array(ids)}::text[])`;
    n += (r?.n as number | undefined) ?? 0;
  }
  return n;
}

/**
 * Deletes a plan's episodes, `batchSize` per transaction: locks the batch's episode rows that
 * still exist (a concurrent pass that got there first leaves none), counts their turns, deletes
 * their journal and them (turns, tool calls and rewards cascade), and adds the counts to the
 * run's episode_retention row with the policy. Safe to repeat and to run beside another pass.
 */
export async function pruneEpisodes(sql: Sql, plan: EpisodePrunePlan, p: EpisodeRetentionPolicy, batchSize = 500): Promise<EpisodePruneResult> {
  if (!(Number.isInteger(batchSize) && batchSize >= 1)) throw new TroupeError(`batchSize: must be a whole number >= 1 (got ${batchSize})`);
  const total: EpisodePruneResult = { runId: plan.runId, episodes: 0, turns: 0, gatewayCalls: 0, carriedEpisodes: 0, partialRollouts: 0 };
  const policy = { ...p, described: describeEpisodePolicy(p) };
  for (let i = 0; i < plan.episodes.length; i += batchSize) {
    const wanted = plan.episodes.slice(i, i + batchSize).map((e) => e.episodeId);
    const done = await sql.begin(async (tx) => {
      const locked = (
        await tx`SELECT episode_id FROM episodes WHERE episode_id = ANY(${tx.array(wanted)}::text[]) AND run_id = ${plan.runId} AND split = 'train' FOR UPDATE`
      ).map((r) => r.episode_id as string);
      if (locked.length === 0) return { episodes: 0, turns: 0, gatewayCalls: 0 };
      const ids = tx.array(locked);
      const [t] = await tx`SELECT count(*)::int AS n FROM turns WHERE episode_id = ANY(${ids}::text[])`;
      const calls = await tx`DELETE FROM gateway_calls WHERE episode_id = ANY(${ids}::text[]) AND run_id = ${plan.runId}`;
      const gone = await tx`DELETE FROM episodes WHERE episode_id = ANY(${ids}::text[])`;
      const counts = { episodes: gone.count, turns: (t?.n as number | undefined) ?? 0, gatewayCalls: calls.count };
      await tx`
        INSERT INTO episode_retention (run_id, train_episodes, turns, gateway_calls, policy, last_pruned_at)
        VALUES (${plan.runId}, ${counts.episodes}, ${counts.turns}, ${counts.gatewayCalls}, ${tx.json(policy)}, now())
        ON CONFLICT (run_id) DO UPDATE SET
          train_episodes = episode_retention.train_episodes + EXCLUDED.train_episodes,
          turns = episode_retention.turns + EXCLUDED.turns,
          gateway_calls = episode_retention.gateway_calls + EXCLUDED.gateway_calls,
          policy = EXCLUDED.policy,
          last_pruned_at = EXCLUDED.last_pruned_at`;
      return counts;
    });
    total.episodes += done.episodes;
    total.turns += done.turns;
    total.gatewayCalls += done.gatewayCalls;
  }
  if (plan.carriedEpisodes || plan.partialRollouts)
    await sql.begin(async (tx) => {
      total.carriedEpisodes = (await tx`DELETE FROM carried_episodes WHERE run_id = ${plan.runId} AND into_step < ${plan.safeBefore}`).count;
      total.partialRollouts = (await tx`DELETE FROM partial_rollouts WHERE run_id = ${plan.runId} AND step < ${plan.safeBefore}`).count;
    });
  return total;
}

/** The working-state part of a prune's line ('' when there is none): "; deleted N carried episode(s) ...". */
export function describeWorkingState(r: { carriedEpisodes: number; partialRollouts: number }, verb = 'deleted'): string {
  if (!r.carriedEpisodes && !r.partialRollouts) return '';
  return `; ${verb} ${r.carriedEpisodes} carried episode(s) and ${r.partialRollouts} partial rollout result(s) of committed steps`;
}

/** What a run's pruning so far removed (episode_retention), or null when nothing was pruned. */
export interface EpisodeRetentionRecord {
  trainEpisodes: number;
  turns: number;
  gatewayCalls: number;
  /** The policy of the last pass, in words. */
  policy: string;
  lastPrunedAt: string;
}

export async function episodeRetentionOf(sql: Sql, runId: string): Promise<EpisodeRetentionRecord | null> {
  const [r] = await sql`SELECT train_episodes, turns, gateway_calls, policy, last_pruned_at FROM episode_retention WHERE run_id = ${runId}`;
  if (!r) return null;
  return {
    trainEpisodes: Number(r.train_episodes),
    turns: Number(r.turns),
    gatewayCalls: Number(r.gateway_calls),
    policy: String((r.policy as { described?: string }).described ?? ''),
    lastPrunedAt: new Date(r.last_pruned_at as Date).toISOString(),
  };
}
