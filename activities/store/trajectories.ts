/**
 * Graph trajectories in Postgres: episodes, turns, tool calls, rewards.
 * `saveEpisodes` is idempotent (a retried rollout writes the same episode id
 * once), and `loadEpisode` gives back exactly what was written.
 */
import type { Row } from 'postgres';
import type { Sql } from '../../infra/db';
import { timedStoreWrite, troupeMetrics } from '../../infra/metrics';
import type { Split } from '../../agents/tasks';
import type { Trajectory, TurnRewards } from '../../schema/trajectory';
import { runStalledAgents, type StalledAgent } from './stalled-agents';

export interface EpisodeMeta {
  episodeId: string;
  runId: string;
  step: number;
  split: Split;
  taskId: string;
  task: unknown;
  groupIndex: number;
  episodeIndex: number;
  seed: number;
  mode: 'durable' | 'batched';
}

export interface StoredEpisode {
  meta: EpisodeMeta;
  trajectory: Trajectory;
  rewards: TurnRewards[];
  success: boolean | null;
}

/** Rows per INSERT statement: far below Postgres' 65535 bind parameters. */
const CHUNK = 1000;

function chunks<T>(xs: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += CHUNK) out.push(xs.slice(i, i + CHUNK));
  return out;
}

/**
 * Writes scored episodes (their trajectories carry the scored status) in one
 * transaction, one multi-row INSERT per table: a batched rollout stores a
 * whole flush at once instead of one transaction per episode. Episodes already
 * stored are skipped with their turns; returns the ids this call inserted.
 */
export async function saveEpisodes(sql: Sql, episodes: readonly StoredEpisode[]): Promise<Set<string>> {
  if (episodes.length === 0) return new Set();
  const inserted = await timedStoreWrite('episodes', () => sql.begin((tx) => insertEpisodes(tx as unknown as Sql, episodes)));
  countSavedEpisodes(episodes, inserted);
  return inserted;
}

/** Counts the episodes, turns and generated tokens a committed write inserted (infra/metrics.ts). */
export function countSavedEpisodes(episodes: readonly StoredEpisode[], inserted: ReadonlySet<string>): void {
  const m = troupeMetrics();
  for (const { meta, trajectory } of episodes) {
    if (!inserted.has(meta.episodeId)) continue;
    m.episodes.add(1, { split: meta.split, status: trajectory.status });
    m.turns.add(trajectory.turns.length, { split: meta.split });
    m.tokensGenerated.add(
      trajectory.turns.reduce((n, t) => n + t.responseTokens.length, 0),
      { split: meta.split },
    );
  }
}

/** saveEpisodes' inserts, inside a transaction the caller holds (partial rollouts commit more with them). */
export async function insertEpisodes(tx: Sql, episodes: readonly StoredEpisode[]): Promise<Set<string>> {
  const inserted = new Set<string>();
  for (const part of chunks(episodes)) {
    const rows = part.map(({ meta, trajectory, success }) => ({
      episode_id: meta.episodeId,
      run_id: meta.runId,
      step: meta.step,
      split: meta.split,
      task_id: meta.taskId,
      task: tx.json(meta.task as never),
      group_index: meta.groupIndex,
      episode_index: meta.episodeIndex,
      seed: meta.seed,
      mode: meta.mode,
      status: trajectory.status,
      outcome: trajectory.outcome === undefined ? null : tx.json(trajectory.outcome as never),
      error: trajectory.error ?? null,
      counters: trajectory.counters ? tx.json(trajectory.counters as never) : null,
      success,
    }));
    const got = await tx`INSERT INTO episodes ${tx(rows as never)} ON CONFLICT (episode_id) DO NOTHING RETURNING episode_id`;
    for (const r of got) inserted.add(r.episode_id as string);
  }
  const fresh = episodes.filter((e) => inserted.has(e.meta.episodeId));
  const turns = fresh.flatMap(({ meta, trajectory }) =>
    trajectory.turns.map((t) => ({
      episode_id: meta.episodeId,
      turn_index: t.index,
      agent: t.agent,
      model: t.model,
      version: t.version,
      parents: tx.array(t.parents, 23),
      context_tokens: tx.array(t.contextTokens, 23),
      response_tokens: tx.array(t.responseTokens, 23),
      logprobs: tx.array(t.logprobs, 701),
      loss_mask: tx.array(t.lossMask, 21),
      stop_reason: t.stopReason,
      token_versions: t.tokenVersions ? tx.array(t.tokenVersions, 23) : null,
      duration_ms: t.durationMs,
    })),
  );
  const calls = fresh.flatMap(({ meta, trajectory }) =>
    trajectory.turns.flatMap((t) =>
      t.toolCalls.map((c) => ({
        episode_id: meta.episodeId,
        turn_index: t.index,
        call_index: c.index,
        tool: c.tool,
        input: tx.json((c.input ?? null) as never),
        output: c.output === undefined ? null : tx.json(c.output as never),
        error: c.error ?? null,
        duration_ms: c.durationMs,
      })),
    ),
  );
  const rewards = fresh.flatMap(({ meta, rewards: rs }) =>
    rs.flatMap((r) =>
      Object.entries(r.components).map(([component, value]) => ({
        episode_id: meta.episodeId,
        turn_index: r.turn,
        agent: r.agent,
        component,
        value,
        per_turn: r.perTurn?.includes(component) ?? false,
      })),
    ),
  );
  for (const part of chunks(turns)) await tx`INSERT INTO turns ${tx(part as never)}`;
  for (const part of chunks(calls)) await tx`INSERT INTO tool_calls ${tx(part as never)}`;
  for (const part of chunks(rewards)) await tx`INSERT INTO rewards ${tx(part as never)}`;
  return inserted;
}

export async function loadEpisode(sql: Sql, episodeId: string): Promise<StoredEpisode | undefined> {
  const [episode] = await loadEpisodes(sql, sql`e.episode_id = ${episodeId}`);
  return episode;
}

/** What a stored episode came to: its status, error, success and turn count (without loading its trajectory). */
export async function episodeOutcome(
  sql: Sql,
  episodeId: string,
): Promise<{ episodeId: string; status: string; error?: string; success: boolean | null; turns: number } | undefined> {
  const [row] = await sql<{ status: string; error: string | null; success: boolean | null; turns: number }[]>`
    SELECT status, error, success, (SELECT count(*)::int FROM turns t WHERE t.episode_id = e.episode_id) AS turns
    FROM episodes e WHERE e.episode_id = ${episodeId}`;
  if (!row) return undefined;
  return { episodeId, status: row.status, ...(row.error === null ? {} : { error: row.error }), success: row.success, turns: row.turns };
}

/** All stored episodes of a step and split, trajectories and rewards included. */
export async function loadStepEpisodes(sql: Sql, runId: string, step: number, split: Split): Promise<StoredEpisode[]> {
  return loadEpisodes(sql, stepEpisodes(sql, runId, step, split));
}

/** The episodes of a step and split, as a condition on `episodes e` (matches the index episodes_run_step). */
export function stepEpisodes(sql: Sql, runId: string, step: number, split: Split): ReturnType<Sql> {
  return sql`e.run_id = ${runId} AND e.step = ${step} AND e.split = ${split}`;
}

/**
 * The four queries that read the episodes matching `where` (a condition on `episodes e`).
 * Turns, tool calls and rewards are joined from the episodes, not selected by a list of
 * ids: on a table without statistics (autovacuum off, never ANALYZEd) the planner takes
 * `episode_id IN (128 ids)` for half the table and scans all of it, while the join probes
 * each child table's primary key once per episode whatever the statistics say.
 */
export function episodeQueries(sql: Sql, where: ReturnType<Sql>) {
  return {
    episodes: () => sql`SELECT e.* FROM episodes e WHERE ${where} ORDER BY e.group_index, e.episode_index, e.episode_id`,
    turns: () => sql`SELECT t.* FROM episodes e JOIN turns t ON t.episode_id = e.episode_id WHERE ${where} ORDER BY t.episode_id, t.turn_index`,
    calls: () =>
      sql`SELECT c.* FROM episodes e JOIN tool_calls c ON c.episode_id = e.episode_id WHERE ${where} ORDER BY c.episode_id, c.turn_index, c.call_index`,
    rewards: () =>
      sql`SELECT r.* FROM episodes e JOIN rewards r ON r.episode_id = e.episode_id WHERE ${where} ORDER BY r.episode_id, r.turn_index, r.component`,
  };
}

/** Four queries for any number of episodes, assembled in (group, episode) order. */
export async function loadEpisodes(sql: Sql, where: ReturnType<Sql>): Promise<StoredEpisode[]> {
  const q = episodeQueries(sql, where);
  const episodes = await q.episodes();
  if (episodes.length === 0) return [];
  const turns = await q.turns();
  const calls = await q.calls();
  const rewards = await q.rewards();
  const byEpisode = (rows: readonly Row[]) => {
    const m = new Map<string, Row[]>();
    for (const r of rows) {
      const id = String(r.episode_id);
      let list = m.get(id);
      if (!list) m.set(id, (list = []));
      list.push(r);
    }
    return m;
  };
  const turnsOf = byEpisode(turns);
  const callsOf = byEpisode(calls);
  const rewardsOf = byEpisode(rewards);
  return episodes.map((e) => {
    const episodeCalls = callsOf.get(e.episode_id) ?? [];
    return {
      meta: {
        episodeId: e.episode_id,
        runId: e.run_id,
        step: e.step,
        split: e.split,
        taskId: e.task_id,
        task: e.task,
        groupIndex: e.group_index,
        episodeIndex: e.episode_index,
        seed: Number(e.seed),
        mode: e.mode,
      },
      trajectory: {
        episodeId: e.episode_id,
        status: e.status,
        ...(e.outcome === null ? {} : { outcome: e.outcome }),
        ...(e.error === null ? {} : { error: e.error }),
        ...(e.counters === null ? {} : { counters: e.counters }),
        turns: (turnsOf.get(e.episode_id) ?? []).map((t) => ({
          index: t.turn_index,
          agent: t.agent,
          model: t.model,
          version: t.version,
          parents: t.parents,
          contextTokens: t.context_tokens,
          responseTokens: t.response_tokens,
          logprobs: t.logprobs,
          lossMask: t.loss_mask,
          stopReason: t.stop_reason,
          ...(t.token_versions === null ? {} : { tokenVersions: t.token_versions }),
          durationMs: t.duration_ms,
          toolCalls: episodeCalls
            .filter((c) => c.turn_index === t.turn_index)
            .map((c) => ({
              index: c.call_index,
              tool: c.tool,
              input: c.input,
              ...(c.output === null ? {} : { output: c.output }),
              ...(c.error === null ? {} : { error: c.error }),
              durationMs: c.duration_ms,
            })),
        })),
      },
      rewards: groupRewards((rewardsOf.get(e.episode_id) ?? []) as RewardRow[]),
      success: e.success,
    };
  });
}

type RewardRow = { turn_index: number; agent: string; component: string; value: number; per_turn: boolean };
function groupRewards(rows: RewardRow[]): TurnRewards[] {
  const byTurn = new Map<number, TurnRewards>();
  for (const r of rows) {
    let t = byTurn.get(r.turn_index);
    if (!t) byTurn.set(r.turn_index, (t = { turn: r.turn_index, agent: r.agent, components: {} }));
    t.components[r.component] = r.value;
    if (r.per_turn) (t.perTurn ??= []).push(r.component);
  }
  return [...byTurn.values()].sort((a, b) => a.turn - b.turn);
}

/** Episode ids of a step that are already stored (a retried rollout skips them). */
export async function storedEpisodeIds(sql: Sql, ids: readonly string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await sql`SELECT episode_id FROM episodes WHERE episode_id IN ${sql(ids as string[])}`;
  return new Set(rows.map((r) => r.episode_id as string));
}

/** What went wrong with a run's episodes: failed and empty (no agent turn) counts, the most common errors first. */
export interface EpisodeProblems {
  /** Train and eval episodes stored. */
  episodes: number;
  failed: number;
  /** Episodes that ended without a single agent turn: nothing in them can train. */
  empty: number;
  errors: Array<{ error: string; count: number }>;
  /** Updates skipped, per model and reason (events `update-skipped`): steps that trained nothing. */
  skippedUpdates: Array<{ model: string; reason: string; steps: number }>;
  /** Agents without a learning signal for their last steps, below their first step's reward (stalled-agents.ts). */
  stalledAgents: StalledAgent[];
}

export async function episodeProblems(sql: Sql, runId: string, topErrors = 3): Promise<EpisodeProblems> {
  const [counts] = await sql`
    SELECT count(*)::int AS episodes,
      count(*) FILTER (WHERE e.status = 'failed')::int AS failed,
      count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM turns t WHERE t.episode_id = e.episode_id))::int AS empty
    FROM episodes e WHERE e.run_id = ${runId}`;
  const errors = await sql`
    SELECT error, count(*)::int AS count FROM episodes
    WHERE run_id = ${runId} AND status = 'failed' AND error IS NOT NULL
    GROUP BY error ORDER BY count DESC, error LIMIT ${topErrors}`;
  const skipped = await sql`
    SELECT detail->>'model' AS model, detail->>'reason' AS reason, count(*)::int AS steps FROM run_events
    WHERE run_id = ${runId} AND kind = 'update-skipped' GROUP BY 1, 2 ORDER BY 1, 2`;
  return {
    episodes: counts!.episodes,
    failed: counts!.failed,
    empty: counts!.empty,
    errors: errors.map((r) => ({ error: r.error as string, count: r.count as number })),
    skippedUpdates: skipped.map((r) => ({ model: r.model as string, reason: r.reason as string, steps: r.steps as number })),
    stalledAgents: await runStalledAgents(sql, runId),
  };
}
