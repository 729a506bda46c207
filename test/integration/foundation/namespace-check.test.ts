/**
 * A namespace that is not ready for Troupe (missing, or without Troupe's search attributes,
 * or with one of the wrong type) on a real dev server: `up`, `doctor` and the control worker
 * say what is wrong and the command lines to run, and running exactly those lines fixes it.
 * Also: `up` takes only its own worker's poller as proof that the worker is ready.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { up, waitForPoller } from '../../../cli/commands/up';
import { doctor } from '../../../cli/commands/doctor';
import { loadConfig } from '../../../infra/config';
import { TroupeError } from '../../../infra/errors';
import { namespaceProblems } from '../../../infra/namespace';
import { repoRoot } from '../../../infra/paths';
import { ensureTemporalBinary } from '../../../stack/temporal';
import { connectTemporal, pollerIdentities } from '../../../infra/temporal-connection';
import { teamCodeHash, workerIdentity } from '../../../processes/team-code';
import { createTestDatabase, startTemporal, uniqueTaskQueue, type TestDatabase } from '../../helpers';

let env: TestWorkflowEnvironment;
let db: TestDatabase;
let temporalBin: string;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  env = await startTemporal();
  db = await createTestDatabase();
  temporalBin = (await ensureTemporalBinary()).path;
});
after(async () => {
  await db?.drop();
  await env?.teardown();
});

const configFor = (namespace: string, stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-ns-'))) =>
  loadConfig({
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: namespace,
    DATABASE_URL: db.url,
    TROUPE_STATE_DIR: stateDir,
    TROUPE_TASK_QUEUE: uniqueTaskQueue('control'),
  });

/**
 * Runs a fix line as a user pastes it, with the Temporal CLI Troupe uses as `temporal`. A namespace
 * just created is not yet visible to every server API (its namespace cache refreshes on a timer),
 * so a "not found" answer is retried for up to 30 s, as a user would run the line again.
 */
function runFix(line: string): void {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const r = spawnSync('sh', ['-c', line], { env: { ...process.env, PATH: `${path.dirname(temporalBin)}:${process.env.PATH}` }, encoding: 'utf8' });
    if (r.status !== 0 && /is not found/.test(r.stdout + r.stderr) && Date.now() < deadline) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
      continue;
    }
    assert.equal(r.status, 0, `${line}\n${r.stdout}${r.stderr}`);
    return;
  }
}

test('a missing namespace, then missing and wrongly typed search attributes: each named with the command that fixes it', async () => {
  const namespace = `troupe-bare-${process.pid}`;
  const connection = await connectTemporal(env.address);
  try {
    const missing = await namespaceProblems(connection, namespace, env.address);
    assert.deepEqual(missing, [
      { what: `namespace "${namespace}" does not exist`, fix: `temporal operator namespace create --address ${env.address} --namespace ${namespace}` },
    ]);

    // `up` refuses before it starts any worker, naming the fix.
    const config = configFor(namespace);
    await assert.rejects(up(config, { pool: false, supervise: false, log: () => undefined }), (e: unknown) => {
      assert.ok(e instanceof TroupeError);
      assert.match(e.message, new RegExp(`namespace "${namespace}" does not exist`));
      assert.match(e.hint ?? '', /temporal operator namespace create/);
      return true;
    });
    assert.equal(fs.existsSync(path.join(config.stateDir, 'control-worker.pid')), false, 'no worker started');

    // The control worker says what is wrong and exits; it does not call it a bug.
    const worker = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', path.join(repoRoot, 'processes', 'control-worker.ts'), '--temporal-address', env.address, '--namespace', namespace],
        {
          cwd: repoRoot,
          env: { ...process.env, DATABASE_URL: db.url, TEMPORAL_ADDRESS: env.address },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let out = '';
      child.stdout.on('data', (c) => (out += c));
      child.stderr.on('data', (c) => (out += c));
      child.on('close', (code) => resolve({ code, out }));
    });
    assert.equal(worker.code, 1, worker.out);
    assert.match(worker.out, new RegExp(`namespace "${namespace}" does not exist`));
    assert.match(worker.out, /→ run: temporal operator namespace create/);
    assert.doesNotMatch(worker.out, /bug in Troupe/);

    runFix(missing[0]!.fix);
    // A namespace made by hand, with one attribute registered with the wrong type.
    runFix(`temporal operator search-attribute create --address ${env.address} --namespace ${namespace} --name TroupeStep --type Keyword`);
    const attrs = await namespaceProblems(connection, namespace, env.address);
    assert.deepEqual(
      attrs.map((p) => p.what),
      [
        'search attribute TroupeRunId (Keyword) is not registered',
        'search attribute TroupeTeam (Keyword) is not registered',
        'search attribute TroupeStep is registered as Keyword, Troupe needs Int',
        'search attribute TroupeEvalSuccess (Double) is not registered',
        'search attribute TroupeStatus (Keyword) is not registered',
      ],
    );
    const lines = await doctor(configFor(namespace));
    assert.deepEqual(
      lines.filter((l) => l.what === 'namespace').map((l) => [l.status, l.detail]),
      attrs.map((p) => ['FAIL', `${p.what} — run: ${p.fix}`]),
    );

    for (const p of attrs) runFix(p.fix);
    assert.deepEqual(await namespaceProblems(connection, namespace, env.address), []);
    const fixed = await doctor(configFor(namespace));
    assert.deepEqual(
      fixed.filter((l) => l.what === 'namespace').map((l) => l.status),
      ['ok'],
    );
  } finally {
    await connection.close();
  }
});

test("up's readiness check: a stale poller does not count, the worker's own identity does", async () => {
  const taskQueue = uniqueTaskQueue('pool');
  const poll = async (identity: string, until: (ids: string[]) => boolean) => {
    const worker = await Worker.create({
      connection: env.nativeConnection,
      namespace: 'default',
      taskQueue,
      identity,
      activities: { noop: async () => undefined },
    });
    const running = worker.run();
    const connection = await connectTemporal(env.address);
    try {
      while (!until(await pollerIdentities(connection, 'default', taskQueue, 'activity'))) await sleep(200);
    } finally {
      await connection.close();
    }
    return { stop: async () => (worker.shutdown(), await running) };
  };
  // A worker that has since died: its entry stays in the task queue's pollers.
  const deadPid = spawnSync('true').pid!;
  const stale = await poll(`${deadPid}@${os.hostname()} team-code=${teamCodeHash()}`, (ids) => ids.length > 0);
  await stale.stop();

  // A live process that never polls (the worker `up` just started, still loading).
  const starting = spawn('sleep', ['60'], { stdio: 'ignore' });
  try {
    const rec = { pid: starting.pid!, name: 'pool-worker', log: '(test)' };
    assert.ok(
      (await connectTemporal(env.address)
        .then(async (c) => (await pollerIdentities(c, 'default', taskQueue, 'activity')).length)
        .catch(() => 0)) > 0,
      'the stale entry is listed',
    );
    await assert.rejects(waitForPoller(rec, env.address, 'default', taskQueue, 'activity', 3000), /did not start polling/);
  } finally {
    starting.kill('SIGKILL');
  }

  // The worker's own identity (built as every Troupe worker builds it) is what counts.
  const own = await poll(workerIdentity(teamCodeHash()), () => true);
  try {
    assert.equal(await waitForPoller({ pid: process.pid, name: 'pool-worker', log: '(test)' }, env.address, 'default', taskQueue, 'activity', 30_000), true);
  } finally {
    await own.stop();
  }
});
