// `troupe up` / `ping` / `doctor` / `down` as a user runs them (cli/bin.js in child processes),
// on free ports and a temp state dir so they never meet a developer's own `troupe up`.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { pidAlive, readRecord } from '../../../stack/processes';
import { temporalServerVersion } from '../../../infra/temporal-connection';
import { startTemporal, type TestDatabase } from '../../helpers';
import { cliStack, troupe } from '../../helpers/cli';

const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function setup(extra: NodeJS.ProcessEnv = {}): Promise<{ env: NodeJS.ProcessEnv; stateDir: string; db: TestDatabase }> {
  const stack = await cliStack(extra);
  cleanups.push(stack.cleanup);
  return stack;
}

test('up --ping starts the dev server and the control worker; doctor sees them; down stops exactly those', async () => {
  const { env, stateDir, db } = await setup();
  const up = await troupe(['up', '--no-pool', '--ping'], env);
  assert.equal(up.code, 0, up.stderr + up.stdout);
  assert.match(up.stdout, /Troupe is up\./);
  assert.match(up.stdout, new RegExp(`Web UI {7}http://localhost:${env.TROUPE_TEMPORAL_UI_PORT}`));
  assert.match(up.stdout, /pings row: id=\d+ message="hello from troupe up --ping"/);
  // The dashboard answers on its port, reading the same database.
  assert.match(up.stdout, new RegExp(`dashboard {4}http://127\\.0\\.0\\.1:${env.TROUPE_DASHBOARD_PORT} \\(pid \\d+`));
  const dashboard = readRecord(stateDir, 'dashboard')!;
  assert.equal(((await (await fetch(`http://127.0.0.1:${env.TROUPE_DASHBOARD_PORT}/api/runs`)).json()) as { total: number }).total, 0);
  const temporal = readRecord(stateDir, 'temporal')!;
  const control = readRecord(stateDir, 'control-worker')!;
  assert.ok(pidAlive(temporal.pid) && pidAlive(control.pid));
  assert.ok(fs.existsSync(path.join(stateDir, 'temporal.db')));

  // Running up again reuses what runs.
  const again = await troupe(['up', '--no-pool'], env);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, new RegExp(`control {6}already running \\(pid ${control.pid}\\)`));

  const ping = await troupe(['ping', '-m', 'second'], env);
  assert.equal(ping.code, 0, ping.stderr);
  assert.match(ping.stdout, /message="second"/);
  const rows = await db.sql`select message from pings order by id`;
  assert.deepEqual(
    rows.map((r) => r.message),
    ['hello from troupe up --ping', 'second'],
  );

  const doctor = await troupe(['doctor'], env);
  assert.equal(doctor.code, 0, doctor.stdout + doctor.stderr);
  assert.match(doctor.stdout, /^ok +temporal server +reachable/m);
  assert.match(doctor.stdout, /^ok +control worker +1 poller/m);
  assert.match(doctor.stdout, /^ok +postgres +reachable: .*server_version/m);
  assert.match(doctor.stdout, /^ok +ort cpu EP/m);

  const down = await troupe(['down'], env);
  assert.equal(down.code, 0, `${down.stderr}\n${down.stdout}`);
  assert.match(down.stdout, /control-worker +stopped/);
  assert.match(down.stdout, /temporal +stopped/);
  assert.match(down.stdout, /dashboard +stopped/);
  assert.ok(!pidAlive(dashboard.pid));
  assert.doesNotMatch(down.stdout, /postgres/); // DATABASE_URL: not ours to stop
  assert.ok(!pidAlive(temporal.pid) && !pidAlive(control.pid));
  assert.equal(readRecord(stateDir, 'temporal'), undefined);

  const pingDown = await troupe(['ping'], env);
  assert.equal(pingDown.code, 1);
  assert.match(pingDown.stderr, /^troupe: cannot reach Temporal at 127\.0\.0\.1:\d+/);
});

test('with TEMPORAL_ADDRESS, up attaches and down leaves that server alone', async () => {
  const server = await startTemporal();
  cleanups.push(() => server.teardown());
  const { env, stateDir } = await setup({ TEMPORAL_ADDRESS: server.address });
  const up = await troupe(['up', '--no-pool'], env);
  assert.equal(up.code, 0, up.stderr + up.stdout);
  assert.match(up.stdout, /external, left alone by `down`/);
  assert.equal(readRecord(stateDir, 'temporal'), undefined);
  const down = await troupe(['down'], env);
  assert.equal(down.code, 0);
  assert.match(down.stdout, /control-worker +stopped/);
  assert.ok(await temporalServerVersion(server.address), 'the external server still answers');
});

test('a port taken by something that is not Temporal: one clear line plus what to do', async () => {
  const blocker = net.createServer((s) => {
    s.on('error', () => undefined); // the probe hangs up abruptly
    s.end('HTTP/1.1 400 Bad Request\r\n\r\n');
  });
  const port = await new Promise<number>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve((blocker.address() as net.AddressInfo).port)));
  cleanups.push(() => new Promise((r) => blocker.close(r)));
  const { env } = await setup({ TROUPE_TEMPORAL_PORT: String(port) });
  const up = await troupe(['up', '--no-pool'], env);
  assert.equal(up.code, 1);
  const lines = up.stderr.trim().split('\n');
  assert.equal(lines.length, 2, up.stderr);
  assert.equal(lines[0], `troupe: port ${port} is in use by something that is not a Temporal server`);
  assert.match(lines[1]!, /→ .*TROUPE_TEMPORAL_PORT/);
});
