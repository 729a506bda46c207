/**
 * postgres.js 3.4.9 lets connection losses escape as an unhandled rejection or an uncaught
 * TypeError (porsager/postgres#1154) and so ends the process. Workers drop exactly those
 * (infra/db.ts dropPostgresJsStrays); the client reconnects and queries go on. (Without
 * the guard the same fixture ends with exit code 1 once postgres.js throws: GUARD=0.
 * Whether it throws in a given run depends on timing.)
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';
import { isPostgresJsStray } from '../../../infra/db';
import { testDatabaseServer } from '../../helpers';

const fixture = path.join(__dirname, 'fixtures', 'postgres-strays.ts');

test("a process whose client's backends are terminated again and again survives with the guard, and queries after a restart", async (t) => {
  const server = await testDatabaseServer();
  const guarded = spawnSync(process.execPath, ['--import', 'tsx', fixture], {
    env: { ...process.env, DATABASE_URL: server.url, GUARD: '1', MAX_KILLS: '600' },
    encoding: 'utf8',
    timeout: 180_000,
  });
  assert.equal(guarded.status, 0, guarded.stderr.slice(-2000));
  const r = JSON.parse(guarded.stdout.trim().split('\n').at(-1)!) as {
    kills: number;
    done: number;
    failed: number;
    after: number;
    recoveredMs: number;
    probeMs: number;
    inflight: number;
    strays: number;
    restartMs: number;
  };
  assert.ok(r.restartMs >= 0, `after its backends are terminated once (a restart), a client serves queries within 30 s: ${JSON.stringify(r)}`);
  // The race is timing-dependent: on a loaded 2-core host it hit within a few hundred kills,
  // on a quiet one it may not hit at all; either way the process must live.
  t.diagnostic(`postgres.js threw ${r.strays} time(s) in ${r.kills} kills, dropped by the guard: ${JSON.stringify(r)}`);
  // The storm's own client may stay wedged (a postgres.js fault, see the fixture): reported.
  if (r.probeMs < 0) t.diagnostic(`the storm left its client wedged: no fresh query settled within 60 s (${r.inflight} pending)`);
});

test('only postgres.js connection losses count as strays', () => {
  const pgStack = 'PostgresError: terminating\n    at ErrorResponse (/app/node_modules/postgres/cjs/src/connection.js:815:30)';
  assert.equal(isPostgresJsStray(Object.assign(new Error('terminating'), { name: 'PostgresError', severity: 'FATAL', stack: pgStack })), true);
  assert.equal(isPostgresJsStray(Object.assign(new Error('syntax error'), { name: 'PostgresError', severity: 'ERROR', stack: pgStack })), false);
  const write = Object.assign(new TypeError("Cannot read properties of null (reading 'write')"), {
    stack: "TypeError: Cannot read properties of null (reading 'write')\n    at nextWrite (/app/node_modules/postgres/cjs/src/connection.js:255:22)",
  });
  assert.equal(isPostgresJsStray(write), true);
  assert.equal(isPostgresJsStray(new TypeError("Cannot read properties of null (reading 'write')")), false, 'not from postgres.js');
  const reset = Object.assign(new Error('read ECONNRESET'), {
    code: 'ECONNRESET',
    syscall: 'read',
    stack: 'Error: read ECONNRESET\n    at TCP.onStreamRead (node:internal/stream_base_commons:218:20)',
  });
  assert.equal(isPostgresJsStray(reset), true);
  assert.equal(isPostgresJsStray(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', syscall: 'read' })), false, 'thrown by our own code');
  assert.equal(isPostgresJsStray(new Error('anything else')), false);
});
