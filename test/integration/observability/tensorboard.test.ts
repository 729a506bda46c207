/**
 * A short real run (two models, staleness 1: per-agent and per-model training metrics, eval
 * success and per-role eval rewards, off-policy metrics) writes TensorBoard event files that
 * TensorBoard's own reader (event_accumulator, from PyPI's tensorboard) reads back: every
 * scalar of the store, at its step, with its value (float32, as TensorBoard keeps them),
 * exactly once; the run config as text. An export repeated (a retried activity, a resumed
 * run) adds nothing, and one cut short by a crash is repaired by the next.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { trainingRun } from '../../../workflows';
import { EVENT_FILE, exportRunToTensorBoard } from '../../../activities/store/tensorboard';
import { startHarness, type Harness } from '../../../testing/stack';
import { pythonTool } from '../../helpers/python-tools';

const READER = path.join(__dirname, '..', '..', 'helpers', 'tensorboard_scalars.py');

type Read = { scalars: Record<string, Array<[number, number, number]>>; texts: Record<string, Array<[number, string]>> };

describe('TensorBoard event files', () => {
  let h: Harness;
  let python: string;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-tb-'));
  const dirOf = (runId: string) => path.join(root, runId);
  before(async () => {
    python = pythonTool('tensorboard');
    h = await startHarness({ tensorboardDirs: dirOf });
  });
  after(async () => {
    await h?.shutdown();
    fs.rmSync(root, { recursive: true, force: true });
  });

  const read = (dir: string): Read => JSON.parse(execFileSync(python, [READER, dir], { encoding: 'utf8', maxBuffer: 64 << 20 })) as Read;

  /** Every store metric is one point of the file at its step with its value; nothing else but time/ and config. */
  async function assertMatchesStore(runId: string, got: Read) {
    const rows = await h.db.sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${runId}`;
    const want = new Map<string, Array<[number, number]>>();
    for (const r of rows) {
      const tag = `${r.kind}/${r.scope}/${r.name}`;
      want.set(tag, [...(want.get(tag) ?? []), [r.step as number, r.value as number]]);
    }
    for (const [tag, points] of want) {
      const events = got.scalars[tag];
      assert.ok(events, `${tag}: in the event files`);
      assert.deepEqual(
        events.map(([step]) => step).sort((a, b) => a - b),
        points.map(([step]) => step).sort((a, b) => a - b),
        `${tag}: one point per step, no duplicate`,
      );
      for (const [step, value] of points) {
        const point: [number, number, number] | undefined = events.find(([s]) => s === step);
        assert.equal(point?.[1], Math.fround(value), `${tag} at step ${step}`);
      }
    }
    const extra = Object.keys(got.scalars).filter((t) => !want.has(t) && t !== 'time/elapsedSeconds');
    assert.deepEqual(extra, [], 'no scalar the store lacks');
    const steps = await h.db.sql`SELECT step FROM steps WHERE run_id = ${runId} AND finished_at IS NOT NULL ORDER BY step`;
    assert.deepEqual(
      (got.scalars['time/elapsedSeconds'] ?? []).map(([s]) => s),
      steps.map((s) => s.step as number),
      'elapsed time per finished step',
    );
    return want;
  }

  it('a run with two models and staleness 1 writes every scalar of the store once, readable by TensorBoard', async () => {
    const runId = 'tb-two-models';
    const config = {
      team: 'math',
      teamOptions: { models: 'separate' },
      steps: 3,
      groupsPerStep: 3,
      groupSize: 4,
      staleness: 1,
      evalEvery: 1,
      evalTasks: 4,
      seed: 3,
    };
    const summary = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [config] });
    assert.equal(summary.status, 'completed');
    const got = read(dirOf(runId));
    const want = await assertMatchesStore(runId, got);
    // What the issue names, present: per-agent and per-model training metrics, eval success and rewards, off-policy metrics.
    for (const tag of [
      'train/solver/loss',
      'train/verifier/entropy',
      'update/solver/updateMs',
      'eval/team/success',
      'train/solver/staleness',
      'train/team/updateSeconds',
    ])
      assert.ok(want.has(tag), `the store has ${tag}`);
    assert.ok(
      [...want.keys()].some((t) => t.startsWith('eval/solver/reward.')),
      'per-role eval rewards',
    );
    assert.deepEqual(
      got.scalars['eval/team/success']?.map(([s]) => s),
      [0, 1, 2, 3],
    );
    const [text] = got.texts.config ?? [];
    assert.equal(text?.[0], 0);
    assert.deepEqual(JSON.parse(text?.[1] ?? ''), (await h.db.sql`SELECT config FROM runs WHERE run_id = ${runId}`)[0]?.config);
  });

  it('an export repeated adds nothing; one cut short by a crash is repaired by the next, without duplicates', async () => {
    const runId = 'tb-two-models';
    const file = path.join(dirOf(runId), EVENT_FILE);
    assert.equal(await exportRunToTensorBoard(h.db.sql, runId, dirOf(runId)), 0, 'a retried export writes nothing');
    const whole = fs.readFileSync(file);
    // A crash in the middle of an append: the last 40 points lost, the record before them half-written.
    const records: number[] = [];
    for (let at = 0; at < whole.length;) {
      records.push(at);
      at += 16 + Number(whole.readBigUInt64LE(at));
    }
    const cut = records[records.length - 40] ?? assert.fail('a short file');
    fs.writeFileSync(file, whole.subarray(0, cut + 7));
    assert.equal(await exportRunToTensorBoard(h.db.sql, runId, dirOf(runId)), 40, 'the lost points, once');
    assert.equal(fs.statSync(file).size, whole.length);
    await assertMatchesStore(runId, read(dirOf(runId)));
  });
});
