/**
 * Runs exported to a real MLflow tracking server (`mlflow server` from PyPI, SQLite backend,
 * on loopback, behind a TCP gate that can cut it off): the run config as params, every scalar
 * of the store exactly once per (metric, step) with the store's value, config.json as an
 * artifact, the end as the MLflow run's status. With the server cut off for the second half of
 * a run, the run completes, the outage is a run event, and the export catches up once the
 * server is back. A pool worker restarted mid-run, the run terminated and resumed (`troupe
 * resume`), and a restarted control worker's export (a new exporter) add no point twice and
 * lose none.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { trainingRun } from '../../../workflows';
import { MlflowExport } from '../../../activities/store/mlflow';
import { resumeRun } from '../../../control/runs';
import { MlflowClient } from '../../../infra/mlflow-client';
import { startHarness, type Harness } from '../../../testing/stack';
import { freePort } from '../../helpers';
import { pythonTool } from '../../helpers/python-tools';
import { tcpGate, type TcpGate } from '../../helpers/tcp-gate';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const base = { team: 'math', steps: 4, groupsPerStep: 3, groupSize: 4, evalEvery: 1, evalTasks: 4, seed: 7 };

async function until(what: string, ready: () => Promise<boolean>, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ready())) {
    assert.ok(Date.now() < deadline, `${what}: not within ${ms / 1000} s`);
    await sleep(200);
  }
}

describe('MLflow export', () => {
  let h: Harness;
  let server: ChildProcess | undefined;
  let gate: TcpGate;
  let exporter: MlflowExport;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-mlflow-'));
  const serverLog = path.join(tmp, 'server.log');
  let uri = '';

  before(async () => {
    const python = pythonTool('mlflow');
    const port = await freePort();
    const log = fs.openSync(serverLog, 'w');
    const t0 = Date.now();
    server = spawn(
      python,
      [
        '-m',
        'mlflow',
        'server',
        '--backend-store-uri',
        `sqlite:///${path.join(tmp, 'mlflow.db')}`,
        '--artifacts-destination',
        path.join(tmp, 'artifacts'),
      ].concat(['--host', '127.0.0.1', '--port', String(port), '--workers', '1']),
      {
        // Its output to a file (a pipe nobody reads would fill); its own process group (uvicorn's
        // worker is a child), ended whole in after(); no job runner (huey consumers) it would start.
        stdio: ['ignore', log, log],
        detached: true,
        env: { ...process.env, MLFLOW_SERVER_ENABLE_JOB_EXECUTION: 'false' },
      },
    );
    fs.closeSync(log);
    // The server itself, not through the gate: the gate accepts a connection and closes it while the
    // server is not listening yet, and Node 20's fetch never settles when its very first connection is
    // closed before it sent the request (the reason this wait once hung). Every probe has a timeout.
    const health = () =>
      fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2000) }).then(
        (r) => r.ok,
        () => false,
      );
    await until('mlflow server up', async () => {
      assert.equal(server?.exitCode, null, `mlflow server exited: ${fs.readFileSync(serverLog, 'utf8').slice(-2000)}`);
      return health();
    });
    process.stderr.write(`mlflow server up in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    gate = await tcpGate({ host: '127.0.0.1', port });
    await gate.open();
    uri = `http://${gate.address}`;
    h = await startHarness({ mlflow: (sql) => (exporter = new MlflowExport(sql, { retryMs: () => 300, log: (l) => process.stderr.write(`${l}\n`) })) });
  });
  after(async () => {
    await exporter?.stop();
    await h?.shutdown();
    await gate?.close();
    const pid = server?.pid;
    if (pid && server?.exitCode === null) {
      const exited = new Promise((r) => server?.once('exit', r));
      process.kill(-pid, 'SIGTERM');
      const killed = setTimeout(() => process.kill(-pid, 'SIGKILL'), 10_000);
      await exited;
      clearTimeout(killed);
    }
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const start = (runId: string) =>
    h.env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [{ ...base, mlflow: uri }] });
  const committed = (runId: string, version: number) => async () =>
    (await h.db.sql`SELECT 1 FROM versions WHERE run_id = ${runId} AND version = ${version}`).length > 0;
  const events = async (runId: string, kind: string) => (await h.db.sql`SELECT 1 FROM run_events WHERE run_id = ${runId} AND kind = ${kind}`).length;

  /** Until the run's export is done: nothing queued, nothing failing, its end in MLflow. */
  async function caughtUp(e: MlflowExport, runId: string) {
    await until(`run ${runId}: the MLflow export catching up`, async () => {
      await e.idle();
      const [row] = await h.db.sql`SELECT finished FROM mlflow_runs WHERE run_id = ${runId}`;
      return row?.finished === true && !e.failing.has(runId);
    });
  }

  /** MLflow holds exactly the store's points: one per (metric, step), with its value; the run FINISHED with its params and config.json. */
  async function assertExported(runId: string) {
    const client = new MlflowClient(uri);
    const [row] = await h.db.sql`SELECT mlflow_run_id FROM mlflow_runs WHERE run_id = ${runId}`;
    const id = row?.mlflow_run_id as string;
    const info = await client.run(id);
    assert.equal(info.status, 'FINISHED');
    assert.equal(info.params.team, 'math');
    assert.equal(info.params.steps, '4');
    assert.equal(info.params.mlflow, uri);
    const rows = await h.db.sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${runId}`;
    const want = new Map<string, Map<number, number>>();
    for (const r of rows) {
      const key = `${r.kind}/${r.scope}/${r.name}`;
      want.set(key, (want.get(key) ?? new Map<number, number>()).set(r.step as number, r.value as number));
    }
    const steps = await h.db.sql`SELECT step FROM steps WHERE run_id = ${runId} AND finished_at IS NOT NULL`;
    assert.deepEqual(info.metricKeys.sort(), [...want.keys(), 'time/elapsedSeconds'].sort(), 'every metric of the store, nothing else');
    let points = 0;
    for (const [key, byStep] of want) {
      const history = await client.history(id, key);
      assert.deepEqual(
        history.map((m) => m.step).sort((a, b) => a - b),
        [...byStep.keys()].sort((a, b) => a - b),
        `${key}: one point per step`,
      );
      for (const m of history) assert.equal(m.value, byStep.get(m.step), `${key} at step ${m.step}`);
      points += history.length;
    }
    const elapsed = await client.history(id, 'time/elapsedSeconds');
    assert.deepEqual(
      elapsed.map((m) => m.step).sort((a, b) => a - b),
      steps.map((s) => s.step as number).sort((a, b) => a - b),
    );
    const artifact = await fetch(`${uri}/api/2.0/mlflow-artifacts/artifacts${info.artifactUri.replace(/^mlflow-artifacts:/, '')}/config.json`);
    assert.equal(artifact.status, 200);
    assert.equal(((await artifact.json()) as { team: string }).team, 'math');
    return points + elapsed.length;
  }

  let plainSeconds = 0;
  it('a run: params, every metric once with its value, config.json, FINISHED', async () => {
    const t0 = Date.now();
    assert.equal((await (await start('ml-plain')).result()).status, 'completed');
    plainSeconds = (Date.now() - t0) / 1000;
    await caughtUp(exporter, 'ml-plain');
    const points = await assertExported('ml-plain');
    console.log(`a run with MLflow up: ${plainSeconds.toFixed(1)} s, ${points} points in MLflow`);
    assert.equal(await events('ml-plain', 'mlflow-export-failing'), 0);
  });

  it('the server cut off for the second half of a run: the run completes, the outage is reported, the export catches up', async () => {
    const runId = 'ml-outage';
    const t0 = Date.now();
    const handle = await start(runId);
    await until('step 1 committed and exported', async () => {
      const [row] = await h.db.sql`SELECT mlflow_run_id FROM mlflow_runs WHERE run_id = ${runId}`;
      return (await committed(runId, 2)()) && !!row?.mlflow_run_id;
    });
    await gate.close();
    assert.equal((await handle.result()).status, 'completed');
    const seconds = (Date.now() - t0) / 1000;
    await exporter.idle();
    assert.ok((exporter.failing.get(runId) ?? 0) >= 1, 'the export failed while the server was away');
    assert.equal(await events(runId, 'mlflow-export-failing'), 1, 'one run event for the outage');
    console.log(`a run with MLflow cut off after step 1: ${seconds.toFixed(1)} s (with MLflow up: ${plainSeconds.toFixed(1)} s)`);
    await gate.open();
    await caughtUp(exporter, runId);
    await assertExported(runId);
    assert.equal(await events(runId, 'mlflow-export-caught-up'), 1);
  });

  it('a pool worker restarted mid-run, the run terminated and resumed, and a restarted exporter leave every point once', async () => {
    const runId = 'ml-restarts';
    const first = await start(runId);
    await until('step 0 committed', committed(runId, 1));
    await h.restartPool();
    await until('step 1 committed', committed(runId, 2));
    await first.terminate('test: simulated crash');
    // `troupe resume`: a new execution of the workflow, from the last committed step.
    const second = await resumeRun(h.env.client, h.db.sql, h.taskQueue, runId);
    assert.equal((await second.result()).status, 'completed');
    await caughtUp(exporter, runId);
    // A new exporter knows nothing in memory: it reads what the server holds and sends nothing twice.
    const again = new MlflowExport(h.db.sql, { log: () => undefined });
    try {
      await h.db.sql`UPDATE mlflow_runs SET finished = false`;
      await again.catchUp();
      for (const r of ['ml-plain', 'ml-outage', runId]) await caughtUp(again, r);
    } finally {
      await again.stop();
    }
    for (const r of ['ml-plain', 'ml-outage', runId]) await assertExported(r);
  });
});
