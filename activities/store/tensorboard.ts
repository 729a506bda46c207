/**
 * A run's curves as TensorBoard event files, written from the store.
 *
 * Every scalar the store holds for a run (the `metrics` table: per-agent and per-model
 * training metrics, eval success and per-role eval rewards, off-policy and update metrics,
 * the step's timings) becomes a point with tag `<kind>/<scope>/<name>` at its step, plus
 * `time/elapsedSeconds` per finished step; each point's wall time is when its step finished.
 * The run config is the text `config` at step 0.
 *
 * Exactly once: the event file is its own durable cursor. Each export reads the file back
 * (cutting off a record a crash left half-written), and appends, in one write, only the
 * (step, tag) points it lacks, so a retried activity, a second control worker or a resumed
 * run never writes a point twice, and a point missed by a failed export comes with the next.
 * Exports of one run are serialized by a PostgreSQL advisory lock. A value the store rewrites
 * later (a retried step's timings) keeps its first value in the file.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Sql } from '../../infra/db';
import { decodeEvent, encodeEvent, FILE_VERSION, frameRecord, readRecords, type EventPoint } from '../../infra/tensorboard-events';

/** The file each run's points go to, in the run's TensorBoard folder. */
export const EVENT_FILE = 'events.out.tfevents.troupe';

/** Where a run's event files go; undefined: this run writes none. */
export type TensorBoardDirs = (runId: string) => string | undefined;

/** Every point of a run as the store has it now, ordered by step and tag. */
export async function runPoints(sql: Sql, runId: string): Promise<EventPoint[]> {
  const [run] = await sql`SELECT config, created_at FROM runs WHERE run_id = ${runId}`;
  if (!run) return [];
  const created = (run.created_at as Date).getTime();
  const steps = await sql`SELECT step, finished_at FROM steps WHERE run_id = ${runId} AND finished_at IS NOT NULL ORDER BY step`;
  const finished = steps.map((s) => ({ step: s.step as number, at: (s.finished_at as Date).getTime() }));
  // A point's wall time: when the last step at or before it finished (an eval at step s follows step s-1).
  const wallTime = (step: number) => (finished.filter((s) => s.step <= step).pop()?.at ?? created) / 1000;
  const metrics = await sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${runId}`;
  const points: EventPoint[] = [
    { step: 0, wallTime: created / 1000, tag: 'config', text: configText(run.config) },
    ...finished.map((s) => ({ step: s.step, wallTime: s.at / 1000, tag: 'time/elapsedSeconds', value: (s.at - created) / 1000 })),
    ...metrics.map((m) => ({ step: m.step as number, wallTime: wallTime(m.step), tag: `${m.kind}/${m.scope}/${m.name}`, value: m.value as number })),
  ];
  return points.sort((a, b) => a.step - b.step || (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0));
}

/** The run config as TensorBoard's text plugin shows it: markdown, the JSON as a code block. */
function configText(config: unknown): string {
  return JSON.stringify(config, null, 2)
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n');
}

/** The (step, tag) keys an event file holds; cuts off a record a crash left half-written. */
function pointsInFile(file: string): Set<string> | undefined {
  if (!fs.existsSync(file)) return undefined;
  const buf = fs.readFileSync(file);
  const { records, validBytes } = readRecords(buf);
  if (validBytes < buf.length) fs.truncateSync(file, validBytes);
  if (validBytes === 0) return undefined;
  return new Set(records.flatMap((r) => decodeEvent(r).map((p) => key(p.step, p.tag))));
}

const key = (step: number, tag: string) => `${step}\u0000${tag}`;

/** Appends the run's points its event file lacks; returns how many. */
export async function exportRunToTensorBoard(sql: Sql, runId: string, dir: string): Promise<number> {
  return sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(hashtext(${`troupe-tensorboard:${runId}`}))`;
    const points = await runPoints(tx as unknown as Sql, runId);
    if (points.length === 0) return 0;
    fs.mkdirSync(dir, { recursive: true });
    const file = path.join(dir, EVENT_FILE);
    const have = pointsInFile(file);
    const fresh = points.filter((p) => !have?.has(key(p.step, p.tag)));
    if (fresh.length === 0) return 0;
    const records = fresh.map((p) => frameRecord(encodeEvent(p)));
    if (!have) records.unshift(frameRecord(encodeEvent({ fileVersion: FILE_VERSION, wallTime: points[0]?.wallTime ?? 0 })));
    const fd = fs.openSync(file, 'a');
    try {
      fs.writeSync(fd, Buffer.concat(records));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    return fresh.length;
  });
}

/**
 * What control activities call when the store gained points (a step or an eval finished, a
 * run ended): the export, whose failure is logged and never fails the run; the next call
 * catches up.
 */
export function tensorBoardExporter(sql: Sql, dirs: TensorBoardDirs | undefined): (runId: string) => Promise<void> {
  return async (runId) => {
    const dir = dirs?.(runId);
    if (!dir) return;
    try {
      await exportRunToTensorBoard(sql, runId, dir);
    } catch (e) {
      console.warn(`troupe: run ${runId}: TensorBoard export to ${dir} failed (the next step retries it): ${e instanceof Error ? e.message : String(e)}`);
    }
  };
}
