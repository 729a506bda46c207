/**
 * What a run left in the store, and how a chaos run differs from an
 * uninterrupted run with the same config. Everything that must not change is
 * compared: every version's weights and optimizer state bytes (so an update
 * applied twice or lost shows up at the first version it touches), one step
 * row per step, and every stored episode (tokens, log-probs, masks, tool calls,
 * rewards) per (step, split, group, episode).
 */
import { createHash } from 'node:crypto';
import { checkpointStoreOf } from '../../infra/checkpoint-store';
import { loadConfig } from '../../infra/config';
import type { Sql } from '../../infra/db';
import { getVersion } from '../../activities/store/versions';

export interface StoredRun {
  runId: string;
  versions: Array<{ model: string; version: number; step: number; sha256: string; weightsSha256: string; optimizerSha256: string }>;
  steps: Array<{ step: number; status: string }>;
  /** Per "split/step": the episodes in (group, episode) order, without ids, times or durations. */
  episodes: Map<string, string[]>;
  events: Array<{ step: number; kind: string; detail: unknown }>;
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

export async function loadStoredRun(sql: Sql, runId: string): Promise<StoredRun> {
  // Bytes read through the store (inline or files, hash-checked), as the run itself reads them.
  const store = checkpointStoreOf(loadConfig());
  const listed = await sql`SELECT model, version FROM versions WHERE run_id = ${runId} ORDER BY model, version`;
  const versions = await Promise.all(listed.map(async (r) => (await getVersion(sql, store, runId, r.model, r.version))!));
  const steps = await sql`SELECT step, status FROM steps WHERE run_id = ${runId} ORDER BY step`;
  const events = await sql`SELECT step, kind, detail FROM run_events WHERE run_id = ${runId} ORDER BY id`;
  const rows = await sql`
    SELECT e.episode_id, e.step, e.split, e.task_id, e.task, e.group_index, e.episode_index, e.seed, e.status, e.outcome, e.error, e.success
    FROM episodes e WHERE e.run_id = ${runId} ORDER BY e.split, e.step, e.group_index, e.episode_index`;
  const ids = rows.map((r) => r.episode_id as string);
  const turns = ids.length
    ? await sql`SELECT episode_id, turn_index, agent, model, version, parents, context_tokens, response_tokens, logprobs, loss_mask, stop_reason, token_versions FROM turns WHERE episode_id IN ${sql(ids)} ORDER BY episode_id, turn_index`
    : [];
  const calls = ids.length
    ? await sql`SELECT episode_id, turn_index, call_index, tool, input, output, error FROM tool_calls WHERE episode_id IN ${sql(ids)} ORDER BY episode_id, turn_index, call_index`
    : [];
  const rewards = ids.length
    ? await sql`SELECT episode_id, turn_index, agent, component, value FROM rewards WHERE episode_id IN ${sql(ids)} ORDER BY episode_id, turn_index, component`
    : [];
  const strip = (r: Record<string, unknown>) => {
    const { episode_id: _id, ...rest } = r;
    return rest;
  };
  const group = (list: readonly Record<string, unknown>[]) => {
    const m = new Map<string, unknown[]>();
    for (const r of list) {
      const id = r.episode_id as string;
      if (!m.has(id)) m.set(id, []);
      m.get(id)!.push(strip(r));
    }
    return m;
  };
  const turnsOf = group(turns);
  const callsOf = group(calls);
  const rewardsOf = group(rewards);
  const episodes = new Map<string, string[]>();
  for (const r of rows) {
    const key = `${r.split}/${r.step}`;
    if (!episodes.has(key)) episodes.set(key, []);
    const id = r.episode_id as string;
    episodes
      .get(key)!
      .push(
        JSON.stringify({ ...strip(r), seed: String(r.seed), turns: turnsOf.get(id) ?? [], calls: callsOf.get(id) ?? [], rewards: rewardsOf.get(id) ?? [] }),
      );
  }
  // Partial rollouts: the episodes carried into each step, their generations and finished trajectories (ids hold the run id).
  const carried = await sql`
    SELECT into_step, from_step, carries, spec, finished, generations FROM carried_episodes
    WHERE run_id = ${runId} ORDER BY into_step, from_step, (spec->>'groupIndex')::int, (spec->>'episodeIndex')::int`;
  for (const r of carried) {
    const key = `carried/${r.into_step}`;
    if (!episodes.has(key)) episodes.set(key, []);
    // ids hold the run id, durations the timing: neither may differ from the twin
    const drop = (k: string, v: unknown) => (k === 'episodeId' || k === 'runId' || k === 'durationMs' ? undefined : v);
    episodes.get(key)!.push(JSON.stringify({ from: r.from_step, carries: r.carries, spec: r.spec, finished: r.finished, generations: r.generations }, drop));
  }
  return {
    runId,
    versions: versions.map((v) => ({
      model: v.model,
      version: v.version,
      step: v.step,
      sha256: v.sha256,
      weightsSha256: sha(v.weights),
      optimizerSha256: sha(v.optimizerState),
    })),
    steps: steps.map((s) => ({ step: s.step, status: s.status })),
    episodes,
    events: events.map((e) => ({ step: e.step, kind: e.kind, detail: e.detail })),
  };
}

export interface Comparison {
  /** Human-readable problems; empty when the chaos run is identical where it must be. */
  problems: string[];
  /** The final weights' sha256 per model (chaos run). */
  finalSha: Record<string, string>;
  episodesCompared: number;
  versionsCompared: number;
}

/** Bookkeeping of one run on its own: versions 0..steps contiguous, one per step, one step row per step. */
export function checkBookkeeping(run: StoredRun, steps: number, models: string[]): string[] {
  const problems: string[] = [];
  for (const m of models) {
    const mine = run.versions.filter((v) => v.model === m);
    const want = Array.from({ length: steps + 1 }, (_, i) => `${i}@${i - 1}`).join(' ');
    const got = mine.map((v) => `${v.version}@${v.step}`).join(' ');
    if (got !== want) problems.push(`${run.runId} ${m}: versions@steps are [${got}], want [${want}] (contiguous, one per step)`);
    for (const v of mine) if (v.sha256 !== v.weightsSha256) problems.push(`${run.runId} ${m} v${v.version}: stored sha256 does not match the stored weights`);
  }
  const stepRows = run.steps.map((s) => `${s.step}:${s.status}`).join(' ');
  const wantSteps = Array.from({ length: steps }, (_, i) => `${i}:completed`).join(' ');
  if (stepRows !== wantSteps) problems.push(`${run.runId}: step rows [${stepRows}], want [${wantSteps}]`);
  return problems;
}

/** The chaos run against the uninterrupted one. */
export function compareRuns(baseline: StoredRun, chaos: StoredRun, steps: number, models: string[]): Comparison {
  const problems = [...checkBookkeeping(baseline, steps, models).map((p) => `baseline: ${p}`), ...checkBookkeeping(chaos, steps, models)];
  let versionsCompared = 0;
  for (const v of baseline.versions) {
    const c = chaos.versions.find((x) => x.model === v.model && x.version === v.version);
    if (!c) continue; // reported by checkBookkeeping
    versionsCompared++;
    if (c.weightsSha256 !== v.weightsSha256)
      problems.push(`${v.model} v${v.version} (step ${v.step}): weights differ (${c.weightsSha256.slice(0, 12)} vs ${v.weightsSha256.slice(0, 12)})`);
    if (c.optimizerSha256 !== v.optimizerSha256) problems.push(`${v.model} v${v.version} (step ${v.step}): optimizer state differs`);
  }
  let episodesCompared = 0;
  const keys = new Set([...baseline.episodes.keys(), ...chaos.episodes.keys()]);
  for (const key of [...keys].sort()) {
    const a = baseline.episodes.get(key) ?? [];
    const b = chaos.episodes.get(key) ?? [];
    if (a.length !== b.length) problems.push(`${key}: ${b.length} stored episodes, uninterrupted run has ${a.length}`);
    for (let i = 0; i < Math.min(a.length, b.length); i++) {
      episodesCompared++;
      if (a[i] !== b[i]) problems.push(`${key} episode #${i}: trajectory differs: ${firstDifference(a[i]!, b[i]!)}`);
    }
  }
  const finalSha: Record<string, string> = {};
  for (const m of models) {
    const last = chaos.versions.filter((v) => v.model === m).at(-1);
    if (last) finalSha[m] = last.weightsSha256;
  }
  return { problems, finalSha, episodesCompared, versionsCompared };
}

function firstDifference(a: string, b: string): string {
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return `at char ${i}: ...${a.slice(Math.max(0, i - 40), i + 40)}... vs ...${b.slice(Math.max(0, i - 40), i + 40)}...`;
}
