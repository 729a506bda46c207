/**
 * A run's curves in MLflow, exported from the store (the source of truth; MLflow is a projection).
 *
 * A run names a tracking server with its config's `mlflow` (else the control worker's
 * MLFLOW_TRACKING_URI); `off` names none. Its MLflow run lives in experiment
 * `troupe/<team>` (created or reused), tagged `troupe.run_id`, with the run config as params
 * (flattened: `optimizer.lr`), every scalar of the store as a metric (the TensorBoard tags and
 * wall times, store/tensorboard.ts runPoints), and the run's end as its status (completed:
 * FINISHED; stopped, cancelled: KILLED; failed, terminated, timed-out: FAILED; a resumed run
 * is RUNNING again). Before its end status, its artifacts: `config.json`, the curves
 * `curves/curves.png` and `curves/curves.svg` (store/plot.ts, as `troupe plot` draws them),
 * and for a completed run each model's last version as `model/<model>/` (store/model-export.ts,
 * the files `troupe export-model` writes; a model with no Hugging Face layout is skipped and
 * logged). Each end uploads them again at the same paths, so a resumed run's later end
 * replaces them with its own.
 *
 * Exactly once: the server is the cursor. An export reads which (metric, step) points the
 * MLflow run holds (its metrics' histories, once per process and run, again after any error
 * or after another process exported the run: `mlflow_runs.passes` counts the passes) and
 * sends only the others, with the store's values and wall times. A point sent twice anyway
 * (a crash between the send and the reading) is the identical row, which MLflow's SQL store
 * keeps once (its primary key is the whole point). Exports of one run are serialized by a
 * PostgreSQL advisory lock, so two control workers never race on one run. A retried activity,
 * a resumed run or a restarted control worker adds nothing and loses nothing.
 *
 * Never failing or slowing a run: activities only nudge the export, which runs in the
 * background, one run at a time per process, on the exporter's own database connection. A
 * server that is down or refuses is reported once per outage (a warning, and the run event
 * `mlflow-export-failing` the dashboard lists; `mlflow-export-caught-up` when it recovers) and
 * tried again with backoff until the run is caught up. Which runs export where is durable
 * (`mlflow_runs`, written before the server is first called), so a control worker that starts
 * catches up every export a previous one left unfinished.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CheckpointFileError, type CheckpointStore } from '../../infra/checkpoint-store';
import type { Sql } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { MlflowClient, MlflowError, type MlflowMetric, type MlflowRunStatus } from '../../infra/mlflow-client';
import { readMetrics } from './metrics';
import { exportModelVersion } from './model-export';
import { curves, renderCurves } from './plot';
import { recordEvent, type RunStatus } from './runs';
import { runPoints } from './tensorboard';

const END_STATUS: Partial<Record<RunStatus, MlflowRunStatus>> = {
  completed: 'FINISHED',
  stopped: 'KILLED',
  cancelled: 'KILLED',
  failed: 'FAILED',
  terminated: 'FAILED',
  'timed-out': 'FAILED',
};

/** MLflow metric keys allow letters, digits, `_ - . / ` and spaces. */
const metricKey = (tag: string) => tag.replace(/[^A-Za-z0-9_\-./ ]/g, '_');

/** A config as MLflow params: dotted paths to leaf values (arrays as JSON), each at most 6,000 characters. */
export function configParams(config: unknown, prefix = ''): Record<string, string> {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    const text = typeof config === 'string' ? config : JSON.stringify(config);
    return prefix ? { [prefix]: text.slice(0, 6000) } : {};
  }
  return Object.assign({}, ...Object.entries(config).map(([k, v]) => configParams(v, prefix ? `${prefix}.${k}` : k))) as Record<string, string>;
}

/** The tracking server a run exports to: its config's `mlflow`, else the default; undefined: none. */
export function trackingUriOf(config: unknown, defaultUri: string | undefined): string | undefined {
  const uri = (config as { mlflow?: string } | null)?.mlflow ?? defaultUri;
  return uri && uri !== 'off' ? uri : undefined;
}

/** What this process knows of a run's MLflow run; dropped after any error. */
interface Target {
  uri: string;
  client: MlflowClient;
  mlflowRunId: string;
  status: MlflowRunStatus;
  artifactUri: string;
  /** `<step>\0<key>` of every point the MLflow run holds. */
  points: Set<string>;
  /** mlflow_runs.passes after this process's last pass: another number means another process exported since. */
  passes: number;
}

export interface MlflowExportOptions {
  /** Server of runs whose config names none (MLFLOW_TRACKING_URI). */
  defaultUri?: string;
  /** Where failures and recoveries are reported (default console.warn). */
  log?: (line: string) => void;
  /** Wait before the n-th retry in a row (default 1 s doubling to 60 s). */
  retryMs?: (failures: number) => number;
}

export class MlflowExport {
  private readonly targets = new Map<string, Target>();
  /** Runs to export, in order; each once however often it was nudged. */
  private readonly queue = new Set<string>();
  private draining: Promise<void> | undefined;
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private stopped = false;

  constructor(
    private readonly sql: Sql,
    /** Where the runs' model versions are stored (a completed run's models are uploaded). */
    private readonly checkpoints: CheckpointStore,
    private readonly opts: MlflowExportOptions = {},
  ) {}

  /** Queues the run's export (it runs in the background); never throws, never waits. */
  nudge(runId: string): void {
    if (this.stopped) return;
    this.queue.add(runId);
    this.draining ??= this.drain().finally(() => (this.draining = undefined));
  }

  /** Resolves once no export is running or queued (a retry waiting for its timer does not count). */
  async idle(): Promise<void> {
    while (this.draining) await this.draining;
  }

  /** Exports still failing, by run, with how many tries in a row failed. */
  get failing(): ReadonlyMap<string, number> {
    return this.failures;
  }

  /** Nudges every run whose export did not finish (recorded in mlflow_runs), and running runs that have a server. */
  async catchUp(): Promise<void> {
    const rows = await this.sql`
      SELECT r.run_id, r.config, m.finished FROM runs r LEFT JOIN mlflow_runs m USING (run_id)
      WHERE (m.run_id IS NOT NULL AND NOT m.finished) OR (m.run_id IS NULL AND r.status IN ('running', 'paused'))
      ORDER BY r.created_at`;
    for (const r of rows) if (r.finished === false || trackingUriOf(r.config, this.opts.defaultUri)) this.nudge(r.run_id as string);
  }

  /** Stops exporting and retrying (the process is ending); resolves when the export in flight ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.queue.clear();
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    await this.idle();
  }

  private async drain(): Promise<void> {
    for (let runId = first(this.queue); runId !== undefined && !this.stopped; runId = first(this.queue)) {
      this.queue.delete(runId);
      try {
        await this.exportRun(runId);
        const failed = this.failures.get(runId);
        if (failed !== undefined) {
          this.failures.delete(runId);
          this.log(`run ${runId}: MLflow export caught up after ${failed} failed tries`);
          await this.note(runId, 'mlflow-export-caught-up', { failedTries: failed });
        }
      } catch (e) {
        await this.retryLater(runId, e);
      }
    }
  }

  private log(line: string): void {
    (this.opts.log ?? ((l: string) => console.warn(l)))(`troupe: ${line}`);
  }

  /** A run event (the dashboard lists them); a store that cannot take it is only logged. */
  private async note(runId: string, kind: string, detail: Record<string, unknown>): Promise<void> {
    try {
      const [s] = await this.sql`SELECT coalesce(max(step), 0) AS step FROM steps WHERE run_id = ${runId}`;
      await recordEvent(this.sql, { runId, step: Number(s?.step ?? 0), kind, detail });
    } catch (e) {
      this.log(`run ${runId}: could not record ${kind}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  private async retryLater(runId: string, e: unknown): Promise<void> {
    const n = (this.failures.get(runId) ?? 0) + 1;
    this.failures.set(runId, n);
    this.targets.delete(runId); // read the server's state again next time
    if (n === 1) {
      const error = e instanceof Error ? e.message : String(e);
      this.log(`run ${runId}: MLflow export failed, retrying until it succeeds: ${error}`);
      await this.note(runId, 'mlflow-export-failing', { error });
    }
    if (this.stopped) return;
    const ms = this.opts.retryMs?.(n) ?? Math.min(60_000, 1000 * 2 ** Math.min(n - 1, 6));
    clearTimeout(this.timers.get(runId));
    const timer = setTimeout(() => {
      this.timers.delete(runId);
      this.nudge(runId);
    }, ms);
    timer.unref();
    this.timers.set(runId, timer);
  }

  /** The run's MLflow run: this process's, or the recorded one, or one found by tag, or a new one. */
  private async target(tx: Sql, runId: string, run: { team: string; config: unknown; created_at: Date }, uri: string): Promise<Target> {
    const [row] = await tx`SELECT tracking_uri, mlflow_run_id, passes FROM mlflow_runs WHERE run_id = ${runId}`;
    const known = this.targets.get(runId);
    if (known && known.uri === uri && known.passes === Number(row?.passes)) return known;
    const client = new MlflowClient(uri);
    let mlflowRunId = row?.tracking_uri === uri ? ((row.mlflow_run_id as string | null) ?? undefined) : undefined;
    let info = mlflowRunId ? await client.run(mlflowRunId).catch(notFound) : undefined;
    if (!mlflowRunId || !info) {
      const experimentId = await client.experimentId(`troupe/${run.team}`);
      mlflowRunId =
        (await client.runByTag(experimentId, 'troupe.run_id', runId)) ??
        (await client.createRun(experimentId, runId, run.created_at.getTime(), { 'troupe.run_id': runId, 'troupe.team': run.team }));
      await client.logBatch(mlflowRunId, { params: configParams(run.config) });
      await tx`UPDATE mlflow_runs SET experiment_id = ${experimentId}, mlflow_run_id = ${mlflowRunId} WHERE run_id = ${runId}`;
      info = await client.run(mlflowRunId);
    }
    const points = new Set<string>();
    for (const key of info.metricKeys) for (const m of await client.history(mlflowRunId, key)) points.add(`${m.step}\u0000${key}`);
    const made = { uri, client, mlflowRunId, status: info.status, artifactUri: info.artifactUri, points, passes: -1 };
    this.targets.set(runId, made);
    return made;
  }

  /** One pass: the run's points MLflow lacks, then its status. */
  private async exportRun(runId: string): Promise<void> {
    const [named] = await this.sql`SELECT config FROM runs WHERE run_id = ${runId}`;
    const uri = named && trackingUriOf(named.config, this.opts.defaultUri);
    if (!uri) return;
    // Durable before the server is called: this run exports to uri (a new server: a new MLflow run).
    await this.sql`
      INSERT INTO mlflow_runs (run_id, tracking_uri) VALUES (${runId}, ${uri})
      ON CONFLICT (run_id) DO UPDATE SET tracking_uri = excluded.tracking_uri, experiment_id = NULL, mlflow_run_id = NULL, finished = false
      WHERE mlflow_runs.tracking_uri <> excluded.tracking_uri`;
    await this.sql.begin(async (txn) => {
      const tx = txn as unknown as Sql;
      await tx`SELECT pg_advisory_xact_lock(hashtext(${`troupe-mlflow:${runId}`}))`;
      const [run] = await tx`SELECT team, config, status, created_at, updated_at FROM runs WHERE run_id = ${runId}`;
      if (!run) return;
      const t = await this.target(tx, runId, { team: run.team as string, config: run.config, created_at: run.created_at as Date }, uri);
      const fresh: MlflowMetric[] = [];
      for (const p of await runPoints(tx, runId)) {
        if (!('value' in p)) continue;
        const key = metricKey(p.tag);
        if (t.points.has(`${p.step}\u0000${key}`)) continue;
        fresh.push({ key, value: p.value, timestamp: Math.round(p.wallTime * 1000), step: p.step });
      }
      if (fresh.length > 0) {
        await t.client.logBatch(t.mlflowRunId, { metrics: fresh });
        for (const m of fresh) t.points.add(`${m.step}\u0000${m.key}`);
      }
      const end = END_STATUS[run.status as RunStatus];
      if (end) {
        await this.uploadEndArtifacts(tx, t, runId, run.config, run.status as RunStatus);
        if (t.status !== end) await t.client.setStatus(t.mlflowRunId, end, (run.updated_at as Date).getTime());
      } else if (t.status !== 'RUNNING') {
        await t.client.setStatus(t.mlflowRunId, 'RUNNING'); // resumed
      }
      t.status = end ?? 'RUNNING';
      const [done] = await tx`UPDATE mlflow_runs SET finished = ${end !== undefined}, passes = passes + 1 WHERE run_id = ${runId} RETURNING passes`;
      t.passes = Number(done?.passes);
    });
  }

  /** config.json, the curves, and for a completed run each model's last version; the same paths at every end. */
  private async uploadEndArtifacts(tx: Sql, t: Target, runId: string, config: unknown, status: RunStatus): Promise<void> {
    await t.client.uploadArtifact(t.artifactUri, 'config.json', `${JSON.stringify(config, null, 2)}\n`);
    const rows = await readMetrics(tx, runId);
    if (rows.length > 0) {
      const plot = await renderCurves(curves(rows), `Troupe run ${runId}`);
      await t.client.uploadArtifact(t.artifactUri, 'curves/curves.png', Buffer.from(plot.png));
      await t.client.uploadArtifact(t.artifactUri, 'curves/curves.svg', plot.svg);
    }
    if (status !== 'completed') return;
    const last = await tx`SELECT model, max(version) AS version FROM versions WHERE run_id = ${runId} GROUP BY model ORDER BY model`;
    for (const { model, version } of last as unknown as Array<{ model: string; version: number }>) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-mlflow-model-'));
      try {
        try {
          await exportModelVersion(tx, this.checkpoints, { runId, model, version: Number(version), out: dir });
        } catch (e) {
          // a model with no Hugging Face layout (or whose base is gone) is skipped; a store that cannot be read is retried
          if (!(e instanceof TroupeError) || e instanceof CheckpointFileError) throw e;
          this.log(`run ${runId}: model ${model} version ${version} not uploaded to MLflow: ${e.message}`);
          continue;
        }
        for (const file of fs.readdirSync(dir).sort())
          await t.client.uploadArtifact(t.artifactUri, `model/${model}/${file}`, fs.readFileSync(path.join(dir, file)));
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }
  }
}

const first = <T>(s: Set<T>): T | undefined => s.values().next().value;

/** undefined for a run the server does not have (deleted, or a new database); other errors go on. */
function notFound(e: unknown): undefined {
  if (e instanceof MlflowError && e.body.includes('RESOURCE_DOES_NOT_EXIST')) return undefined;
  throw e;
}
