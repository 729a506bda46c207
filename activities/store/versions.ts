/**
 * Model versions: immutable checkpoints with weights and optimizer state.
 * Version v+1 of a model is committed once, together with the step's update
 * metrics, in one transaction keyed by (run, model, step): an update activity
 * that runs twice finds the first commit and returns it.
 */
import type { Sql } from '../../infra/db';

export interface StoredVersion {
  runId: string;
  model: string;
  version: number;
  step: number;
  spec: unknown;
  weights: Uint8Array;
  optimizerState: Uint8Array;
  sha256: string;
  metrics: Record<string, number>;
}

function fromRow(r: any): StoredVersion {
  return {
    runId: r.run_id,
    model: r.model,
    version: r.version,
    step: r.step,
    spec: r.spec,
    weights: new Uint8Array(r.weights),
    optimizerState: new Uint8Array(r.optimizer_state),
    sha256: r.sha256,
    metrics: r.metrics,
  };
}

export async function getVersion(sql: Sql, runId: string, model: string, version: number): Promise<StoredVersion | undefined> {
  const [r] = await sql`SELECT * FROM versions WHERE run_id = ${runId} AND model = ${model} AND version = ${version}`;
  return r ? fromRow(r) : undefined;
}

export async function versionOfStep(sql: Sql, runId: string, model: string, step: number): Promise<StoredVersion | undefined> {
  const [r] = await sql`SELECT * FROM versions WHERE run_id = ${runId} AND model = ${model} AND step = ${step}`;
  return r ? fromRow(r) : undefined;
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

/** Stores version 0 (made from the run seed); a second call is a no-op. */
export async function saveInitialVersion(sql: Sql, v: Omit<StoredVersion, 'step' | 'version' | 'metrics'>): Promise<void> {
  await sql`
    INSERT INTO versions (run_id, model, version, step, spec, weights, optimizer_state, sha256)
    VALUES (${v.runId}, ${v.model}, 0, -1, ${sql.json(v.spec as never)}, ${v.weights}, ${v.optimizerState}, ${v.sha256})
    ON CONFLICT DO NOTHING`;
}

export interface UpdateCommit {
  version: Omit<StoredVersion, 'metrics'> & { metrics: Record<string, number> };
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
export async function commitUpdate(sql: Sql, c: UpdateCommit): Promise<{ committed: boolean; version: StoredVersion }> {
  const v = c.version;
  return sql.begin(async (tx) => {
    // Serialise attempts for the same (run, model) so the base check below is reliable.
    await tx`SELECT pg_advisory_xact_lock(hashtext(${`${v.runId}/${v.model}`}))`;
    const [existing] = await tx`SELECT * FROM versions WHERE run_id = ${v.runId} AND model = ${v.model} AND step = ${v.step}`;
    if (existing) return { committed: false, version: fromRow(existing) };
    const [latest] = await tx`SELECT max(version) AS v FROM versions WHERE run_id = ${v.runId} AND model = ${v.model}`;
    if (latest?.v !== v.version - 1) throw new Error(`versions: ${v.model} v${v.version} must follow v${v.version - 1}, but the latest stored is v${latest?.v}`);
    await tx`
      INSERT INTO versions (run_id, model, version, step, spec, weights, optimizer_state, sha256, metrics)
      VALUES (${v.runId}, ${v.model}, ${v.version}, ${v.step}, ${tx.json(v.spec as never)}, ${v.weights},
              ${v.optimizerState}, ${v.sha256}, ${tx.json(v.metrics as never)})`;
    if (c.metrics.length > 0) {
      const rows = c.metrics.map((m) => ({ run_id: v.runId, step: v.step, kind: m.kind, scope: m.scope, name: m.name, value: m.value }));
      await tx`INSERT INTO metrics ${tx(rows)} ON CONFLICT (run_id, step, kind, scope, name) DO UPDATE SET value = excluded.value`;
    }
    if (c.advantages && c.advantages.length > 0) {
      // One statement (three array parameters) for the whole step: committed with the version or not at all.
      const a = c.advantages;
      await tx`
        UPDATE turns t SET advantage = v.advantage
        FROM unnest(${tx.array(a.map((x) => x.episodeId), 25)}::text[], ${tx.array(a.map((x) => x.turn), 23)}::int[], ${tx.array(a.map((x) => x.advantage), 701)}::float8[]) AS v(episode_id, turn_index, advantage)
        WHERE t.episode_id = v.episode_id AND t.turn_index = v.turn_index`;
    }
    await tx`
      INSERT INTO steps (run_id, step, status, metrics, settings, finished_at)
      VALUES (${v.runId}, ${v.step}, 'committed', ${tx.json(c.stepMetrics as never)}, ${tx.json(c.settings as never)}, now())
      ON CONFLICT (run_id, step) DO UPDATE SET metrics = steps.metrics || excluded.metrics, settings = steps.settings || excluded.settings, finished_at = now()`;
    return { committed: true, version: { ...v } };
  });
}
