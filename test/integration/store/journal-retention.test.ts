// Retention of the gateway journal (gateway_calls) on real PostgreSQL: `troupe gc` deletes the
// journal of runs that completed or were stopped, and keeps those a run can still read (running,
// paused, and failed / terminated / timed-out runs, which resume in place and retry their step).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { JournaledCall } from '../../../agents/episode';
import { gatewayJournal } from '../../../activities/store/gateway-journal';
import { planJournalPrune, pruneJournals } from '../../../activities/store/retention';
import { repoRoot } from '../../../infra/paths';
import { createTestDatabase, type TestDatabase } from '../../helpers';

let db: TestDatabase;
const STATUSES = ['running', 'paused', 'completed', 'stopped', 'failed', 'terminated', 'timed-out', 'cancelled'];

const call = (index: number): JournaledCall => ({
  index,
  agent: 'solver',
  requestHash: `h${index}`,
  tokens: [index, index + 1],
  logprobs: [-0.5, -0.25],
  stopReason: 'eos',
  durationMs: 1,
});

/** Journal rows per run, as stored. */
async function rowsPerRun(): Promise<Record<string, number>> {
  const rows = await db.sql`SELECT run_id, count(*)::int AS n FROM gateway_calls GROUP BY run_id`;
  return Object.fromEntries(rows.map((r) => [r.run_id as string, r.n as number]));
}

const gc = (...args: string[]) =>
  new Promise<{ code: number; out: string; err: string }>((resolve) => {
    const child = spawn(process.execPath, [path.join(repoRoot, 'cli', 'bin.js'), 'gc', ...args], {
      env: { ...process.env, DATABASE_URL: db.url, TROUPE_CHECKPOINT_DIR: db.checkpoints.dir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('exit', (code) => resolve({ code: code ?? 1, out, err }));
  });

before(async () => {
  db = await createTestDatabase();
  // one run per status, each with a journal of (its position + 1) calls over two episodes
  for (const [i, status] of STATUSES.entries()) {
    await db.sql`INSERT INTO runs (run_id, team, config, status) VALUES (${status}, 'chat-digits', '{}', ${status})`;
    const journal = gatewayJournal(db.sql, status);
    for (let c = 0; c <= i; c++) await journal.record(`${status}-e${c % 2}`, call(c >> 1));
  }
});
after(async () => db?.drop());

describe('gateway journal retention', () => {
  it('plans the journals of completed and stopped runs only, and of one run when named', async () => {
    assert.deepEqual(await planJournalPrune(db.sql), [
      { runId: 'completed', calls: 3 },
      { runId: 'stopped', calls: 4 },
    ]);
    assert.deepEqual(await planJournalPrune(db.sql, 'stopped'), [{ runId: 'stopped', calls: 4 }]);
    assert.deepEqual(await planJournalPrune(db.sql, 'failed'), []);
  });

  it('a plan whose run is no longer final deletes nothing of it', async () => {
    const before = await rowsPerRun();
    await pruneJournals(db.sql, [{ runId: 'failed', calls: 5 }]);
    assert.deepEqual(await rowsPerRun(), before);
  });

  it('troupe gc --dry-run deletes nothing; troupe gc deletes exactly those journals and keeps every other row', async () => {
    const before = await rowsPerRun();
    const dry = await gc('--dry-run');
    assert.equal(dry.code, 0, dry.err);
    assert.match(dry.out, /would delete the gateway journal of completed \(3 call\(s\)\)/);
    assert.match(dry.out, /would delete the gateway journal of stopped \(4 call\(s\)\)/);
    assert.deepEqual(await rowsPerRun(), before);

    const real = await gc();
    assert.equal(real.code, 0, real.err);
    assert.match(real.err, /7 journaled gateway call\(s\) of 2 ended run\(s\)/);
    const { completed: _c, stopped: _s, ...kept } = before;
    assert.deepEqual(await rowsPerRun(), kept);
    assert.deepEqual(Object.keys(kept).sort(), ['cancelled', 'failed', 'paused', 'running', 'terminated', 'timed-out']);
    // what is kept still reads back whole: a resumed failed run replays its calls
    assert.deepEqual(await gatewayJournal(db.sql, 'failed').load('failed-e0'), [call(0), call(1), call(2)]);

    const again = await gc();
    assert.equal(again.code, 0, again.err);
    assert.match(again.err, /0 journaled gateway call\(s\) of 0 ended run\(s\)/);
  });
});
