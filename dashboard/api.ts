/**
 * The dashboard's read-only API over the store: runs, a run's metrics and
 * events, a step's episodes, one episode. Every query is bounded (a page of at
 * most MAX_LIMIT rows); bad parameters are a 400 naming the parameter, unknown
 * ids a 404 saying which.
 */
import type { Row } from 'postgres';
import type { Sql } from '../infra/db';
import { episodeRetentionOf } from '../activities/store/episode-retention';
import { runStalledAgents } from '../activities/store/stalled-agents';
import { loadEpisode } from '../activities/store/trajectories';
import { loadTeam } from '../agents/team-registry';
import { BOS, EOS, PAD, type Tokenizer } from '../agents/tokenizer';
import { errorMessage } from '../infra/errors';

export const MAX_LIMIT = 1000;
/** Metric rows per page: a run's curves are many small rows. */
export const MAX_METRIC_LIMIT = 20_000;

export class ApiError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 405 | 502 | 503,
    message: string,
  ) {
    super(message);
  }
}

type Query = URLSearchParams;

/** An integer query parameter in [min, max], or its default when absent. */
export function intParam(q: Query, name: string, dflt: number | undefined, min: number, max: number): number | undefined {
  const raw = q.get(name);
  if (raw === null || raw === '') return dflt;
  if (!/^-?\d+$/.test(raw)) throw new ApiError(400, `${name}: must be an integer, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ApiError(400, `${name}: must be between ${min} and ${max}, got ${n}`);
  return n;
}

export function numberParam(q: Query, name: string): number | undefined {
  const raw = q.get(name);
  if (raw === null || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n)) throw new ApiError(400, `${name}: must be a finite number, got "${raw}"`);
  return n;
}

export function enumParam<T extends string>(q: Query, name: string, values: readonly T[]): T | undefined {
  const raw = q.get(name);
  if (raw === null || raw === '') return undefined;
  if (!values.includes(raw as T)) throw new ApiError(400, `${name}: must be one of ${values.join(', ')}, got "${raw}"`);
  return raw as T;
}

function page(q: Query, max = MAX_LIMIT) {
  return { limit: intParam(q, 'limit', Math.min(100, max), 1, max)!, offset: intParam(q, 'offset', 0, 0, 1e9)! };
}

const RUN_STATUSES = ['running', 'paused', 'completed', 'stopped', 'failed', 'terminated', 'timed-out', 'cancelled'] as const;

export interface RunRow {
  runId: string;
  team: string;
  status: string;
  /** Steps committed (the step the run is at). */
  step: number;
  steps: number | null;
  /** The latest eval's success rate, if any eval finished. */
  evalSuccess: number | null;
  evalStep: number | null;
  startedAt: string;
  updatedAt: string;
  durationSeconds: number;
  resumedFrom: string | null;
}

function runRow(r: Row): RunRow {
  const started = new Date(r.created_at);
  const end = r.status === 'running' || r.status === 'paused' ? new Date() : new Date(r.updated_at);
  return {
    runId: r.run_id,
    team: r.team,
    status: r.status,
    step: r.step ?? 0,
    steps: typeof r.config?.steps === 'number' ? r.config.steps : null,
    evalSuccess: r.eval_success ?? null,
    evalStep: r.eval_step ?? null,
    startedAt: started.toISOString(),
    updatedAt: new Date(r.updated_at).toISOString(),
    durationSeconds: Math.max(0, (end.getTime() - started.getTime()) / 1000),
    resumedFrom: r.resumed_from,
  };
}

/** Per run: steps committed (its newest version's step + 1) and its latest eval. */
function runColumns(sql: Sql) {
  return sql`
    r.*,
    (SELECT max(v.step) + 1 FROM versions v WHERE v.run_id = r.run_id) AS step,
    e.value AS eval_success, e.step AS eval_step`;
}
function latestEval(sql: Sql) {
  return sql`LEFT JOIN LATERAL (
    SELECT m.value, m.step FROM metrics m
    WHERE m.run_id = r.run_id AND m.kind = 'eval' AND m.scope = 'team' AND m.name = 'success'
    ORDER BY m.step DESC LIMIT 1) e ON true`;
}

/** GET /api/runs?team=&status=&limit=&offset= — newest first. */
export async function listRuns(sql: Sql, q: Query) {
  const { limit, offset } = page(q);
  const team = q.get('team') || null;
  const status = enumParam(q, 'status', RUN_STATUSES) ?? null;
  const where = sql`(${team}::text IS NULL OR r.team = ${team}) AND (${status}::text IS NULL OR r.status = ${status})`;
  const rows =
    await sql`SELECT ${runColumns(sql)} FROM runs r ${latestEval(sql)} WHERE ${where} ORDER BY r.created_at DESC, r.run_id LIMIT ${limit} OFFSET ${offset}`;
  const { total } = (await sql`SELECT count(*)::int AS total FROM runs r WHERE ${where}`)[0]!;
  return { runs: rows.map(runRow), total: total as number, limit, offset };
}

/** GET /api/pipelines/:id's runs: each stage run's row (status, step, latest eval), for the ones stored. */
export async function stageRuns(sql: Sql, runIds: readonly string[]): Promise<RunRow[]> {
  if (runIds.length === 0) return [];
  const rows = await sql`SELECT ${runColumns(sql)} FROM runs r ${latestEval(sql)} WHERE r.run_id IN ${sql([...runIds])}`;
  return rows.map(runRow);
}

async function requireRun(sql: Sql, runId: string) {
  const [row] = await sql`SELECT ${runColumns(sql)} FROM runs r ${latestEval(sql)} WHERE r.run_id = ${runId}`;
  if (!row) throw new ApiError(404, `run "${runId}" not found`);
  return row;
}

/**
 * GET /api/runs/:id — the run, its config, its newest events (at most `eventLimit`, default 200),
 * what episode retention pruned of it (null: nothing), and its agents without a learning signal.
 */
export async function getRunDetail(sql: Sql, runId: string, q: Query) {
  const eventLimit = intParam(q, 'eventLimit', 200, 1, MAX_LIMIT)!;
  const row = await requireRun(sql, runId);
  const events = await sql`
    SELECT id, step, kind, detail, at FROM (
      SELECT * FROM run_events WHERE run_id = ${runId} ORDER BY id DESC LIMIT ${eventLimit}) x ORDER BY id`;
  const { steps } = (await sql`SELECT count(*)::int AS steps FROM steps WHERE run_id = ${runId}`)[0]!;
  return {
    run: runRow(row),
    config: row.config,
    stepRows: steps as number,
    retention: await episodeRetentionOf(sql, runId),
    stalledAgents: await runStalledAgents(sql, runId),
    events: events.map((e) => ({ id: Number(e.id), step: e.step, kind: e.kind, detail: e.detail, at: new Date(e.at).toISOString() })),
  };
}

/**
 * GET /api/runs/:id/metrics?fromStep=&kind=&limit=&offset= — metric rows in
 * (step, kind, scope, name) order. A live page polls with fromStep = the last
 * step it has (that step may still gain its eval rows). The first page also has the
 * learning rate per model and step and when each step committed (`stepTimes`).
 */
export async function getRunMetrics(sql: Sql, runId: string, q: Query) {
  const { limit, offset } = page(q, MAX_METRIC_LIMIT);
  const fromStep = intParam(q, 'fromStep', -1, -1, 1e9)!;
  const kind = enumParam(q, 'kind', ['train', 'eval', 'update'] as const) ?? null;
  await requireRun(sql, runId);
  const rows = await sql`
    SELECT step, kind, scope, name, value FROM metrics
    WHERE run_id = ${runId} AND step >= ${fromStep} AND (${kind}::text IS NULL OR kind = ${kind})
    ORDER BY step, kind, scope, name LIMIT ${limit + 1} OFFSET ${offset}`;
  const more = rows.length > limit;
  // The learning rate in force per model and step (from the step's settings), with the first page.
  const lr =
    offset > 0
      ? []
      : await sql`
    SELECT s.step, m.key AS model, (m.value->>'lr')::float8 AS lr FROM steps s, jsonb_each(s.settings) m
    WHERE s.run_id = ${runId} AND s.step >= ${fromStep} AND jsonb_typeof(m.value) = 'object' AND m.value ? 'lr'
    ORDER BY s.step, m.key LIMIT ${MAX_METRIC_LIMIT}`;
  // When each step committed, for the page's wall-time axis; with the first page too.
  const stepTimes =
    offset > 0 ? [] : await sql`SELECT step, finished_at FROM steps WHERE run_id = ${runId} AND step >= ${fromStep} ORDER BY step LIMIT ${MAX_METRIC_LIMIT}`;
  return {
    metrics: rows.slice(0, limit).map((r) => ({ step: r.step, kind: r.kind, scope: r.scope, name: r.name, value: r.value })),
    lr: lr.map((r) => ({ step: r.step, model: r.model, lr: r.lr })),
    stepTimes: stepTimes.map((r) => ({ step: r.step as number, finishedAt: r.finished_at ? new Date(r.finished_at).toISOString() : null })),
    limit,
    offset,
    nextOffset: more ? offset + limit : null,
  };
}

/**
 * GET /api/runs/:id/steps/:step/episodes?split=&status=&task=&minReward=&maxReward=&limit=&offset=
 * — a step's episodes (train split by default) with their summed reward, in (group, episode) order.
 */
export async function listStepEpisodes(sql: Sql, runId: string, step: number, q: Query) {
  const { limit, offset } = page(q);
  const split = enumParam(q, 'split', ['train', 'eval'] as const) ?? 'train';
  const status = enumParam(q, 'status', ['completed', 'truncated', 'failed'] as const) ?? null;
  const task = q.get('task') || null;
  const minReward = numberParam(q, 'minReward') ?? null;
  const maxReward = numberParam(q, 'maxReward') ?? null;
  await requireRun(sql, runId);
  const where = sql`
    e.run_id = ${runId} AND e.step = ${step} AND e.split = ${split}
    AND (${status}::text IS NULL OR e.status = ${status})
    AND (${task}::text IS NULL OR e.task_id = ${task})
    AND (${minReward}::float8 IS NULL OR coalesce(rw.total, 0) >= ${minReward})
    AND (${maxReward}::float8 IS NULL OR coalesce(rw.total, 0) <= ${maxReward})`;
  const from = sql`
    episodes e LEFT JOIN LATERAL (SELECT sum(value) AS total FROM rewards WHERE episode_id = e.episode_id) rw ON true
    LEFT JOIN LATERAL (SELECT count(*)::int AS turns FROM turns WHERE episode_id = e.episode_id) t ON true`;
  const rows = await sql`
    SELECT e.episode_id, e.task_id, e.group_index, e.episode_index, e.status, e.success, e.error, rw.total, t.turns
    FROM ${from} WHERE ${where} ORDER BY e.group_index, e.episode_index, e.episode_id LIMIT ${limit} OFFSET ${offset}`;
  const { total } = (await sql`SELECT count(*)::int AS total FROM ${from} WHERE ${where}`)[0]!;
  return {
    episodes: rows.map((r) => ({
      episodeId: r.episode_id,
      taskId: r.task_id,
      groupIndex: r.group_index,
      episodeIndex: r.episode_index,
      status: r.status,
      success: r.success,
      error: r.error,
      reward: r.total ?? 0,
      turns: r.turns,
    })),
    total: total as number,
    limit,
    offset,
  };
}

/**
 * The turn graph of an episode: a node per turn and per tool call; an edge per
 * `after` (parent → turn) and from each turn to its tool calls.
 */
export function turnGraph(
  turns: ReadonlyArray<{ index: number; agent: string; parents: number[]; toolCalls: ReadonlyArray<{ index: number; tool: string; error?: string }> }>,
) {
  const nodes: Array<{ id: string; kind: 'turn' | 'tool'; agent: string; label: string; turn: number }> = [];
  const edges: Array<{ from: string; to: string; kind: 'after' | 'call' }> = [];
  for (const t of turns) {
    nodes.push({ id: `t${t.index}`, kind: 'turn', agent: t.agent, label: `${t.index}: ${t.agent}`, turn: t.index });
    for (const p of t.parents) edges.push({ from: `t${p}`, to: `t${t.index}`, kind: 'after' });
    for (const c of t.toolCalls) {
      nodes.push({ id: `t${t.index}c${c.index}`, kind: 'tool', agent: t.agent, label: c.error ? `${c.tool} (error)` : c.tool, turn: t.index });
      edges.push({ from: `t${t.index}`, to: `t${t.index}c${c.index}`, kind: 'call' });
    }
  }
  return { nodes, edges };
}

const SPECIAL: Record<number, string> = { [PAD]: '⟨pad⟩', [BOS]: '⟨bos⟩', [EOS]: '⟨eos⟩' };

/** Each token's text, so the page can shade tokens one by one. */
export function tokenPieces(tok: Tokenizer, ids: readonly number[]): string[] {
  return ids.map((id) => SPECIAL[id] ?? tok.decode([id]));
}

/** GET /api/episodes/:id — the stored episode (turns with tokens and their text, log-probs, loss mask, tool calls, rewards, advantage) and its graph. */
export async function getEpisode(sql: Sql, episodeId: string) {
  const ep = await loadEpisode(sql, episodeId);
  if (!ep) throw new ApiError(404, `episode "${episodeId}" not found`);
  // The run's team decodes the tokens; a team that no longer loads leaves them as ids.
  const [run] = await sql`SELECT team, config FROM runs WHERE run_id = ${ep.meta.runId}`;
  let tok: Tokenizer | undefined;
  let decodeError: string | null = null;
  try {
    if (run) tok = loadTeam(run.team, run.config?.teamOptions ?? {}).tokenizer;
  } catch (e) {
    decodeError = errorMessage(e);
  }
  // Kept on the turn row by the step's update; null where the turn received none (see migration 003).
  const advantages = new Map(
    (await sql`SELECT turn_index, advantage FROM turns WHERE episode_id = ${episodeId} AND advantage IS NOT NULL`).map((r) => [
      r.turn_index as number,
      r.advantage as number,
    ]),
  );
  return {
    ...ep.meta,
    status: ep.trajectory.status,
    outcome: ep.trajectory.outcome ?? null,
    error: ep.trajectory.error ?? null,
    success: ep.success,
    decodeError,
    turns: ep.trajectory.turns.map((t) => ({
      ...t,
      contextText: tok ? tokenPieces(tok, t.contextTokens) : null,
      responseText: tok ? tokenPieces(tok, t.responseTokens) : null,
      advantage: advantages.get(t.index) ?? null,
    })),
    rewards: ep.rewards,
    graph: turnGraph(ep.trajectory.turns),
  };
}
