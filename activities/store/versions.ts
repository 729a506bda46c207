/**
 * Model versions: immutable checkpoints with weights and optimizer state.
 * Version v+1 of a model is committed once, together with the step's update
 * metrics, in one transaction keyed by (run, model, step): an update activity
 * that runs twice finds the first commit and returns it.
 *
 * Bytes of small versions stay inline in the row; larger ones go to the
 * checkpoint store's files first, and the row that names them (with size and
 * sha256) commits after, so a committed version never names a torn file.
 */
import type { Row } from 'postgres';
import type { Sql } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { sha256Hex, type BlobRef, type CheckpointStore } from '../../infra/checkpoint-store';

/** A version without its bytes: what bookkeeping and idempotent updates need. */
export interface VersionMeta {
  runId: string;
  model: string;
  version: number;
  step: number;
  spec: unknown;
  /** sha256 of the weights bytes. */
  sha256: string;
  metrics: Record<string, number>;
}

export interface StoredVersion extends VersionMeta {
  weights: Uint8Array;
  optimizerState: Uint8Array;
}

/** Where a version's bytes are: in the row, in the store's files, or pruned by gc. */
export type VersionBytes =
  { kind: 'inline'; weights: Uint8Array; optimizerState: Uint8Array } | { kind: 'files'; weights: BlobRef; optimizer: BlobRef } | { kind: 'pruned' };

const META = 'run_id, model, version, step, spec, sha256, metrics';

/** A versions row (SELECT *) read back as its columns are declared in schema/migrations. */
function metaOf(r: Row): VersionMeta {
  return { runId: r.run_id, model: r.model, version: r.version, step: r.step, spec: r.spec, sha256: r.sha256, metrics: r.metrics };
}

function bytesOf(r: Row): VersionBytes {
  if (r.pruned_at) return { kind: 'pruned' };
  if (r.weights_file) {
    return {
      kind: 'files',
      weights: { file: r.weights_file, size: Number(r.weights_size), sha256: r.sha256 },
      optimizer: { file: r.optimizer_file, size: Number(r.optimizer_size), sha256: r.optimizer_sha256 },
    };
  }
  return { kind: 'inline', weights: new Uint8Array(r.weights), optimizerState: new Uint8Array(r.optimizer_state) };
}

/** A version's metadata and where its bytes are (nothing read from files yet). */
export async function locateVersion(sql: Sql, runId: string, model: string, version: number): Promise<(VersionMeta & { bytes: VersionBytes }) | undefined> {
  const [r] = await sql`SELECT * FROM versions WHERE run_id = ${runId} AND model = ${model} AND version = ${version}`;
  return r ? { ...metaOf(r), bytes: bytesOf(r) } : undefined;
}

/** Reads a version's bytes wherever they are, checked against their recorded sha256. */
export async function readVersionBytes(
  store: CheckpointStore,
  v: VersionMeta & { bytes: VersionBytes },
): Promise<{ weights: Uint8Array; optimizerState: Uint8Array }> {
  const b = v.bytes;
  if (b.kind === 'pruned') throw new TroupeError(`version ${v.version} of ${v.model} in run ${v.runId} was pruned by troupe gc; its bytes are gone`);
  if (b.kind === 'inline') {
    if (sha256Hex(b.weights) !== v.sha256)
      throw new TroupeError(`version ${v.version} of ${v.model} in run ${v.runId}: inline weights do not match their recorded sha256`);
    return { weights: b.weights, optimizerState: b.optimizerState };
  }
  return { weights: await store.read(b.weights), optimizerState: await store.read(b.optimizer) };
}

/** A version with its bytes (read from the store's files when not inline). */
export async function getVersion(sql: Sql, store: CheckpointStore, runId: string, model: string, version: number): Promise<StoredVersion | undefined> {
  const v = await locateVersion(sql, runId, model, version);
  if (!v) return undefined;
  const { bytes: _, ...meta } = v;
  return { ...meta, ...(await readVersionBytes(store, v)) };
}

export async function versionOfStep(sql: Sql, runId: string, model: string, step: number): Promise<VersionMeta | undefined> {
  const [r] = await sql`SELECT ${sql.unsafe(META)} FROM versions WHERE run_id = ${runId} AND model = ${model} AND step = ${step}`;
  return r ? metaOf(r) : undefined;
}

/** The newest version of each model of a run. */
export async function latestVersions(sql: Sql, runId: string): Promise<Record<string, { version: number; step: number }>> {
  const rows = await sql`SELECT DISTINCT ON (model) model, version, step FROM versions WHERE run_id = ${runId} ORDER BY model, version DESC`;
  return Object.fromEntries(rows.map((r) => [r.model, { version: r.version, step: r.step }]));
}

/** Lists (model, version, step) of a run, for checks that versions are contiguous. */
export async function listVersions(sql: Sql, runId: string): Promise<Array<{ model: string; version: number; step: number; sha256: string }>> {
  const rows = await sql`SELECT model, version, step, sha256 FROM versions WHERE run_id = ${runId} ORDER BY model, version`;
  return rows.map((r) => ({ model: r.model, version: r.version, step: r.step, sha256: r.sha256 }));
}

/**
 * The byte columns of a new version row: inline, or (above the store's inline
 * limit) files written durably now, before the row that names them commits.
 */
async function byteColumns(store: CheckpointStore, v: StoredVersion) {
  if (!store.wantsFiles(v.weights.length + v.optimizerState.length)) {
    return {
      weights: v.weights,
      optimizer_state: v.optimizerState,
      weights_file: null,
      weights_size: null,
      optimizer_file: null,
      optimizer_size: null,
      optimizer_sha256: null,
    };
  }
  const w = await store.put(v.runId, v.model, v.version, 'weights', v.weights);
  if (w.sha256 !== v.sha256) throw new TroupeError(`version ${v.version} of ${v.model}: the weights hash to ${w.sha256}, the engine said ${v.sha256}`);
  const o = await store.put(v.runId, v.model, v.version, 'optimizer', v.optimizerState);
  return {
    weights: null,
    optimizer_state: null,
    weights_file: w.file,
    weights_size: w.size,
    optimizer_file: o.file,
    optimizer_size: o.size,
    optimizer_sha256: o.sha256,
  };
}

function versionRow(v: StoredVersion, bytes: Awaited<ReturnType<typeof byteColumns>>, json: Sql['json']) {
  return {
    run_id: v.runId,
    model: v.model,
    version: v.version,
    step: v.step,
    spec: json(v.spec as never),
    sha256: v.sha256,
    metrics: json(v.metrics as never),
    ...bytes,
  };
}

/** Stores version 0 (made from the run seed); a second call is a no-op. */
export async function saveInitialVersion(sql: Sql, store: CheckpointStore, v: Omit<StoredVersion, 'step' | 'version' | 'metrics'>): Promise<void> {
  const full = { ...v, version: 0, step: -1, metrics: {} };
  await sql`INSERT INTO versions ${sql(versionRow(full, await byteColumns(store, full), sql.json))} ON CONFLICT DO NOTHING`;
}

export interface UpdateCommit {
  version: StoredVersion;
  /** Metric rows (kind 'train' or 'update', scope = agent or model). */
  metrics: Array<{ kind: string; scope: string; name: string; value: number }>;
  stepMetrics: Record<string, unknown>;
  settings: unknown;
  /** The advantage each of this model's trained turns received, kept on its turn row. */
  advantages?: ReadonlyArray<{ episodeId: string; turn: number; advantage: number }>;
}

/**
 * Commits an update exactly once. Returns the committed version: the one given,
 * or the one an earlier attempt already committed for (run, model, step).
 */
export async function commitUpdate(sql: Sql, store: CheckpointStore, c: UpdateCommit): Promise<{ committed: boolean; version: VersionMeta }> {
  const v = c.version;
  // Files first (outside the transaction: no lock held during a long write); the row names them after.
  const bytes = await byteColumns(store, v);
  return sql.begin(async (tx) => {
    // Serialise attempts for the same (run, model) so the base check below is reliable.
    await tx`SELECT pg_advisory_xact_lock(hashtext(${`${v.runId}/${v.model}`}))`;
    const [existing] = await tx`SELECT * FROM versions WHERE run_id = ${v.runId} AND model = ${v.model} AND step = ${v.step}`;
    if (existing) return { committed: false, version: metaOf(existing) };
    const [latest] = await tx`SELECT max(version) AS v FROM versions WHERE run_id = ${v.runId} AND model = ${v.model}`;
    if (latest?.v !== v.version - 1)
      throw new Error(`versions: ${v.model} v${v.version} must follow v${v.version - 1}, but the latest stored is v${latest?.v}`);
    await tx`INSERT INTO versions ${tx(versionRow(v, bytes, tx.json))}`;
    if (c.metrics.length > 0) {
      const rows = c.metrics.map((m) => ({ run_id: v.runId, step: v.step, kind: m.kind, scope: m.scope, name: m.name, value: m.value }));
      await tx`INSERT INTO metrics ${tx(rows)} ON CONFLICT (run_id, step, kind, scope, name) DO UPDATE SET value = excluded.value`;
    }
    if (c.advantages && c.advantages.length > 0) {
      // One statement (three array parameters) for the whole step: committed with the version or not at all.
      const a = c.advantages;
      await tx`
        UPDATE turns t SET advantage = v.advantage
        FROM unnest(${tx.array(
          a.map((x) => x.episodeId),
          25,
        )}::text[], ${tx.array(
          a.map((x) => x.turn),
          23,
        )}::int[], ${tx.array(
          a.map((x) => x.advantage),
          701,
        )}::float8[]) AS v(episode_id, turn_index, advantage)
        WHERE t.episode_id = v.episode_id AND t.turn_index = v.turn_index`;
    }
    await tx`
      INSERT INTO steps (run_id, step, status, metrics, settings, finished_at)
      VALUES (${v.runId}, ${v.step}, 'committed', ${tx.json(c.stepMetrics as never)}, ${tx.json(c.settings as never)}, now())
      ON CONFLICT (run_id, step) DO UPDATE SET metrics = steps.metrics || excluded.metrics, settings = steps.settings || excluded.settings, finished_at = now()`;
    const { weights: _w, optimizerState: _o, ...meta } = v;
    return { committed: true, version: meta };
  });
}
