/**
 * Retention (what `troupe gc` prunes): model versions' bytes, and the gateway
 * journals of runs that have ended for good.
 *
 * Versions: per model of
 * a run it keeps version 0 (the KL reference and the init), the newest
 * `keepLast`, every `keepEvery`-th, the version each recorded eval was run
 * with, and everything from the run's resume point on, so a run can always
 * resume (and an idempotent update find its base). A pruned version keeps its
 * row (step, sha256, metrics): only the bytes go.
 */
import type { Sql } from '../../infra/db';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import { TroupeError } from '../../infra/errors';
import { resumePoint } from '../training/resume';

export interface RetentionPolicy {
  /** Keep every version whose number is a multiple of this (>= 1). */
  keepEvery: number;
  /** Keep this many newest versions of each model (>= 1). */
  keepLast: number;
}

export function validatePolicy(p: RetentionPolicy): RetentionPolicy {
  if (!Number.isInteger(p.keepEvery) || p.keepEvery < 1) throw new TroupeError(`keepEvery: must be a whole number >= 1 (got ${p.keepEvery})`);
  if (!Number.isInteger(p.keepLast) || p.keepLast < 1) throw new TroupeError(`keepLast: must be a whole number >= 1 (got ${p.keepLast})`);
  return p;
}

/**
 * The versions of one model to keep, given its versions (ascending, all
 * steps), the version a resume starts from, and versions evals used.
 */
export function keptVersions(
  versions: readonly { version: number; step: number }[],
  resumeFrom: number,
  evalSteps: readonly number[],
  p: RetentionPolicy,
): Set<number> {
  const keep = new Set<number>();
  const newest = versions.length ? versions[versions.length - 1]!.version : 0;
  for (const { version } of versions) {
    if (version === 0 || version > newest - p.keepLast || version % p.keepEvery === 0 || version >= resumeFrom) keep.add(version);
  }
  // An eval at step s ran with the newest version made before s.
  for (const s of evalSteps) {
    const used = versions.filter((v) => v.step < s).at(-1);
    if (used) keep.add(used.version);
  }
  return keep;
}

export interface PrunableVersion {
  runId: string;
  model: string;
  version: number;
  /** Bytes this frees (files, or the inline columns). */
  bytes: number;
}

/** What the policy would prune: versions that still hold bytes and are not kept. */
export async function planPrune(sql: Sql, p: RetentionPolicy, runId?: string): Promise<PrunableVersion[]> {
  validatePolicy(p);
  const runs = runId ? [runId] : (await sql`SELECT DISTINCT run_id FROM versions ORDER BY run_id`).map((r) => r.run_id as string);
  const out: PrunableVersion[] = [];
  for (const run of runs) {
    const rows = await sql`
      SELECT model, version, step, pruned_at IS NOT NULL AS pruned,
             coalesce(weights_size, 0) + coalesce(optimizer_size, 0) + coalesce(octet_length(weights), 0) + coalesce(octet_length(optimizer_state), 0) AS bytes
      FROM versions WHERE run_id = ${run} ORDER BY model, version`;
    const models = [...new Set(rows.map((r) => r.model as string))];
    const [config] = await sql`SELECT config->'frozen' AS frozen FROM runs WHERE run_id = ${run}`;
    const point = await resumePoint(sql, run, models, undefined, (config?.frozen as string[] | null) ?? []);
    for (const model of models) {
      const mine = rows.filter((r) => r.model === model);
      const keep = keptVersions(
        mine.map((r) => ({ version: r.version, step: r.step })),
        point.versions[model] ?? 0,
        point.evals,
        p,
      );
      for (const r of mine) if (!r.pruned && !keep.has(r.version)) out.push({ runId: run, model, version: r.version, bytes: Number(r.bytes) });
    }
  }
  return out;
}

/**
 * Prunes versions: the row stops naming bytes (one transaction each), then
 * its files are removed unless another row (a fork's version 0) still names them, so a crash in between leaves only unreferenced files
 * (removed by pruneOrphans), never a row naming a missing file.
 */
export async function pruneVersions(sql: Sql, store: CheckpointStore, list: readonly PrunableVersion[]): Promise<void> {
  for (const v of list) {
    const files = await sql.begin(async (tx) => {
      const [r] =
        await tx`SELECT weights_file, optimizer_file FROM versions WHERE run_id = ${v.runId} AND model = ${v.model} AND version = ${v.version} AND pruned_at IS NULL FOR UPDATE`;
      if (!r) return [];
      await tx`
        UPDATE versions SET weights = NULL, optimizer_state = NULL, weights_file = NULL, optimizer_file = NULL, pruned_at = now()
        WHERE run_id = ${v.runId} AND model = ${v.model} AND version = ${v.version}`;
      const files = [r.weights_file, r.optimizer_file].filter((f): f is string => !!f);
      // A fork's or init-from's version 0 names the files of the version it started from: those stay while a row names them.
      const shared = files.length
        ? await tx`SELECT weights_file, optimizer_file FROM versions WHERE pruned_at IS NULL AND (weights_file = ANY(${tx.array(files)}::text[]) OR optimizer_file = ANY(${tx.array(files)}::text[]))`
        : [];
      const named = new Set(shared.flatMap((s) => [s.weights_file as string, s.optimizer_file as string]));
      return files.filter((f) => !named.has(f));
    });
    for (const f of files) await store.remove(f);
  }
}

/**
 * Files of the store no row names (a crash between a file's write and its
 * row's commit, or during a prune) and leftover temp files. Only those older
 * than `graceMs` count: a newer one may belong to a commit in progress.
 */
export async function orphanFiles(sql: Sql, store: CheckpointStore, graceMs: number, now = Date.now()): Promise<string[]> {
  const named = new Set<string>();
  for (const r of await sql`SELECT weights_file, optimizer_file FROM versions WHERE weights_file IS NOT NULL`) {
    named.add(r.weights_file);
    named.add(r.optimizer_file);
  }
  return (await store.list()).filter((f) => !named.has(f.file) && now - f.mtimeMs > graceMs).map((f) => f.file);
}

/**
 * Run statuses that end a run for good: `troupe resume` refuses them. A failed, terminated or
 * timed-out run can resume in place and retry its unfinished step, whose gateway calls its
 * journal answers again (gateway/journal.ts), so its journal stays.
 */
export const FINAL_RUN_STATUSES = ['completed', 'stopped'] as const;

export interface PrunableJournal {
  runId: string;
  /** Journaled gateway calls (rows of gateway_calls) of the run. */
  calls: number;
}

/** Runs whose gateway journal nothing can read again: those ended with a final status. */
export async function planJournalPrune(sql: Sql, runId?: string): Promise<PrunableJournal[]> {
  const rows = await sql`
    SELECT g.run_id, count(*)::int AS calls FROM gateway_calls g JOIN runs r ON r.run_id = g.run_id
    WHERE r.status = ANY(${sql.array([...FINAL_RUN_STATUSES])}::text[]) ${runId === undefined ? sql`` : sql`AND g.run_id = ${runId}`}
    GROUP BY g.run_id ORDER BY g.run_id`;
  return rows.map((r) => ({ runId: r.run_id as string, calls: r.calls as number }));
}

/** Deletes those runs' journals; a run whose status changed since the plan (none can leave a final one) keeps its rows. */
export async function pruneJournals(sql: Sql, list: readonly PrunableJournal[]): Promise<void> {
  for (const j of list)
    await sql`
      DELETE FROM gateway_calls g USING runs r
      WHERE g.run_id = ${j.runId} AND r.run_id = g.run_id AND r.status = ANY(${sql.array([...FINAL_RUN_STATUSES])}::text[])`;
}
