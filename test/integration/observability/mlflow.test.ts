/**
 * Runs exported to a real MLflow tracking server (`mlflow server` from PyPI, SQLite backend,
 * on loopback, behind a TCP gate that can cut it off): the run config as params, every scalar
 * of the store exactly once per (metric, step) with the store's value, config.json, the curves
 * (the PNG and SVG `troupe plot` draws from the store) and, for a run of a transformer, the
 * model's last version (the files `troupe export-model` writes) as artifacts, the end as the
 * MLflow run's status; a model with no Hugging Face layout is skipped with a logged reason. With the server cut off for the second half of
 * a run, the run completes, the outage is a run event, and the export catches up once the
 * server is back. On a stack `troupe up` started (each worker a process): the pool worker
 * SIGKILLed while it runs an activity of a step, restarted by the supervisor, the activity run
 * again there; the run then terminated and continued by `troupe resume` (a new execution); and
 * a restarted control worker's export (a new exporter): no point twice, none lost.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { trainingRun } from '../../../workflows';
import { readMetrics } from '../../../activities/store/metrics';
import { MlflowExport } from '../../../activities/store/mlflow';
import { exportModelVersion } from '../../../activities/store/model-export';
import { curves, renderCurves } from '../../../activities/store/plot';
import { MlflowClient } from '../../../infra/mlflow-client';
import { pidAlive, readRecord } from '../../../stack/processes';
import { startHarness, type Harness } from '../../../testing/stack';
import { freePort, uniqueTaskQueue } from '../../helpers';
import { troupe } from '../../helpers/cli';
import { pythonTool } from '../../helpers/python-tools';
import { tcpGate, type TcpGate } from '../../helpers/tcp-gate';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const base = { team: 'math', steps: 4, groupsPerStep: 3, groupSize: 4, evalEvery: 1, evalTasks: 4, seed: 7 };
/** The activities a pool worker runs for a step (activities/training/pool.ts), each heartbeating. */
const POOL_ACTIVITIES = new Set(['rolloutBatch', 'rolloutPartial', 'updateModel']);

async function until(what: string, ready: () => Promise<boolean>, ms = 120_000, everyMs = 200): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ready())) {
    assert.ok(Date.now() < deadline, `${what}: not within ${ms / 1000} s`);
    await sleep(everyMs);
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
  const logged: string[] = [];
  /**
   * The stack of the last case, as `troupe up` starts it (control worker, pool worker with its engine,
   * the supervisor, each a process) on this file's Temporal server and database, on task queues of
   * its own: its state dir, its environment until its `troupe down` ran, and its start.
   */
  let cliDir = '';
  let cliEnv: (NodeJS.ProcessEnv & { TROUPE_TASK_QUEUE: string }) | undefined;
  let cliUp: ReturnType<typeof troupe> | undefined;

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
    // While the server starts (tens of seconds): the gate in front of it (no one connects through it
    // before the server is up), the harness, and the last case's `troupe up` stack, before any run.
    gate = await tcpGate({ host: '127.0.0.1', port });
    await gate.open();
    uri = `http://${gate.address}`;
    const report = (l: string) => void (logged.push(l), process.stderr.write(`${l}\n`));
    h = await startHarness({ mlflow: (sql, checkpoints) => (exporter = new MlflowExport(sql, checkpoints, { retryMs: () => 300, log: report })) });
    cliDir = fs.mkdtempSync(path.join(tmp, 'state-'));
    cliEnv = {
      ...process.env,
      TROUPE_STATE_DIR: cliDir,
      TEMPORAL_ADDRESS: h.env.address,
      DATABASE_URL: h.db.url,
      TROUPE_CHECKPOINT_DIR: h.db.checkpoints.dir,
      TROUPE_TASK_QUEUE: uniqueTaskQueue('ml-control'),
      TROUPE_POOL_TASK_QUEUE: uniqueTaskQueue('ml-pool'),
      TROUPE_DASHBOARD_PORT: String(await freePort()),
      TROUPE_DEVICE: 'cpu',
      TROUPE_TENSORBOARD_DIR: 'off',
      TROUPE_DEBUG: '',
    };
    cliUp = troupe(['up'], cliEnv);
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
    const up = await cliUp;
    assert.equal(up.code, 0, `troupe up: ${up.stderr}${up.stdout}`);
    process.stderr.write(`mlflow server and troupe up done in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  });
  after(async () => {
    await cliUp;
    if (cliEnv) await troupe(['down'], cliEnv);
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

  const start = (runId: string, extra: Record<string, unknown> = {}) =>
    h.env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [{ ...base, ...extra, mlflow: uri }] });
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
  async function assertExported(runId: string, runSteps = base.steps) {
    const client = new MlflowClient(uri);
    const [row] = await h.db.sql`SELECT mlflow_run_id FROM mlflow_runs WHERE run_id = ${runId}`;
    const id = row?.mlflow_run_id as string;
    const info = await client.run(id);
    assert.equal(info.status, 'FINISHED');
    assert.equal(info.params.team, 'math');
    assert.equal(info.params.steps, String(runSteps));
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
    const config = await artifact(info.artifactUri, 'config.json');
    assert.equal((JSON.parse(config.toString('utf8')) as { team: string }).team, 'math');
    await assertCurves(runId, info.artifactUri);
    return points + elapsed.length;
  }

  /** An artifact's bytes, through the server's proxy. */
  async function artifact(artifactUri: string, file: string): Promise<Buffer> {
    const res = await fetch(`${uri}/api/2.0/mlflow-artifacts/artifacts${artifactUri.replace(/^mlflow-artifacts:/, '')}/${file}`);
    assert.equal(res.status, 200, `artifact ${file}`);
    return Buffer.from(await res.arrayBuffer());
  }

  /** The files (not folders) the MLflow run holds under `dir`. */
  async function artifactFiles(mlflowRunId: string, dir: string): Promise<string[]> {
    const res = await fetch(`${uri}/api/2.0/mlflow/artifacts/list?run_id=${mlflowRunId}&path=${encodeURIComponent(dir)}`);
    assert.equal(res.status, 200);
    const got = (await res.json()) as { files?: Array<{ path: string; is_dir: boolean }> };
    return (got.files ?? []).map((f) => `${f.is_dir ? 'dir ' : ''}${f.path}`).sort();
  }

  /** curves/curves.{png,svg}: a PNG, and the SVG of the store's final metrics (a resumed run's end replaced the earlier one). */
  async function assertCurves(runId: string, artifactUri: string) {
    const png = await artifact(artifactUri, 'curves/curves.png');
    assert.ok(png.length > 1000, `curves.png: ${png.length} bytes`);
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'the PNG signature');
    const svg = (await artifact(artifactUri, 'curves/curves.svg')).toString('utf8');
    const want = await renderCurves(curves(await readMetrics(h.db.sql, runId)), `Troupe run ${runId}`);
    assert.equal(svg, want.svg, "the SVG of the store's metrics");
    assert.ok(Buffer.from(want.png).equals(png), "the PNG of the store's metrics");
  }

  let plainSeconds = 0;
  it('a run: params, every metric once with its value, config.json, the curves, FINISHED', async () => {
    const t0 = Date.now();
    assert.equal((await (await start('ml-plain')).result()).status, 'completed');
    plainSeconds = (Date.now() - t0) / 1000;
    await caughtUp(exporter, 'ml-plain');
    const points = await assertExported('ml-plain');
    console.log(`a run with MLflow up: ${plainSeconds.toFixed(1)} s, ${points} points in MLflow`);
    assert.equal(await events('ml-plain', 'mlflow-export-failing'), 0);
  });

  it("a transformer's run: its model's last version as `troupe export-model` writes it", async () => {
    assert.equal((await (await start('ml-model', { teamOptions: { policy: 'transformer' } })).result()).status, 'completed');
    await caughtUp(exporter, 'ml-model');
    await assertExported('ml-model');
    await assertModel('ml-model');
  });

  /** model/policy/ holds exactly the files `troupe export-model` writes for the last version, byte for byte. */
  async function assertModel(runId: string) {
    const [row] = await h.db.sql`SELECT mlflow_run_id FROM mlflow_runs WHERE run_id = ${runId}`;
    const id = row?.mlflow_run_id as string;
    const { artifactUri } = await new MlflowClient(uri).run(id);
    assert.deepEqual(await artifactFiles(id, ''), ['config.json', 'dir curves', 'dir model']);
    assert.deepEqual(await artifactFiles(id, 'model'), ['dir model/policy'], 'the one model of the team');
    const [last] = await h.db.sql`SELECT max(version) AS version FROM versions WHERE run_id = ${runId} AND model = 'policy'`;
    assert.equal(Number(last?.version), base.steps, 'its last version');
    const out = fs.mkdtempSync(path.join(tmp, 'export-'));
    await exportModelVersion(h.db.sql, h.db.checkpoints, { runId, model: 'policy', version: base.steps, out });
    const files = fs.readdirSync(out).sort();
    assert.deepEqual(files, ['config.json', 'model.safetensors']);
    assert.deepEqual(
      await artifactFiles(id, 'model/policy'),
      files.map((f) => `model/policy/${f}`),
    );
    for (const f of files) assert.ok((await artifact(artifactUri, `model/policy/${f}`)).equals(fs.readFileSync(path.join(out, f))), `model/policy/${f}`);
  }

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
    // tiny-lm has no Hugging Face layout: no model artifacts, and the log says why
    const [row] = await h.db.sql`SELECT mlflow_run_id FROM mlflow_runs WHERE run_id = ${runId}`;
    assert.deepEqual(await artifactFiles(row?.mlflow_run_id as string, ''), ['config.json', 'dir curves']);
    assert.ok(
      logged.some((l) => l.includes(`run ${runId}: model policy version ${base.steps} not uploaded to MLflow`) && l.includes('Hugging Face layout')),
      logged.join('\n'),
    );
  });

  it('a pool-worker process SIGKILLed mid-step, `troupe resume` of the terminated run, and a restarted exporter leave every point once, and the artifacts of the last end', async () => {
    const runId = 'ml-restarts';
    // Twice the steps of the other runs, with more and larger groups: a step's pool activities last
    // long enough that polling sees one running and the kill finds it still there (a 4-step run once
    // ended between two polls in CI; 6 groups of 4 once finished between the poll and the kill).
    const config = { ...base, steps: 8, groupsPerStep: 16, groupSize: 8 };
    const cli = cliEnv;
    assert.ok(cli, 'the `troupe up` stack runs');
    const poolPid = () => {
      const rec = readRecord(cliDir, 'pool-worker');
      return rec && pidAlive(rec.pid) ? rec.pid : undefined;
    };
    const startedPool = poolPid();
    assert.ok(startedPool, 'troupe up started a pool worker');
    let killed = startedPool;

    const first = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', {
      taskQueue: cli.TROUPE_TASK_QUEUE,
      workflowId: runId,
      args: [{ ...config, mlflow: uri }],
    });
    // Mid-step: step 0 committed (and exported), and a pool activity of a later step running on the pool worker.
    await until('step 0 committed', committed(runId, 1));
    const runningPoolActivity = async () => {
      const described = await first.describe();
      assert.equal(described.status.name, 'RUNNING', 'the run ended before a pool activity was seen running');
      // state 2: PENDING_ACTIVITY_STATE_STARTED (a worker holds it)
      return (described.raw.pendingActivities ?? []).find((a) => a.state === 2 && POOL_ACTIVITIES.has(a.activityType?.name ?? ''));
    };
    let inFlight = '';
    let killedAt = 0;
    // A seen activity may end between the poll and the kill (a step's activities take ~0.1-0.3 s):
    // the kill counts once the server still sees a pool activity started after the worker is gone
    // (it times out and runs again); else the supervisor's next pool worker is killed the same way.
    for (let attempt = 1; ; attempt++) {
      await until('a pool activity running', async () => !!(await runningPoolActivity()), 120_000, 50);
      process.kill(killed, 'SIGKILL');
      killedAt = Date.now();
      const gone = killed;
      await until('the pool worker gone', async () => !pidAlive(gone));
      inFlight = (await runningPoolActivity())?.activityType?.name ?? '';
      if (inFlight) break;
      assert.ok(attempt < 4, `${attempt} kills each landed between pool activities`);
      await until('the supervisor started another pool worker', async () => (poolPid() ?? gone) !== gone);
      const next = poolPid();
      assert.ok(next, 'the supervisor started another pool worker');
      killed = next;
    }
    // Step s commits version s + 1: the step in flight is the newest version's number.
    const [newest] = await h.db.sql`SELECT max(version) AS version FROM versions WHERE run_id = ${runId}`;
    const step = Number(newest?.version);
    assert.ok(step >= 1 && step < config.steps, `killed mid-run (step ${step} of ${config.steps} in flight)`);
    // The supervisor `up` left starts another pool worker; the activity it held times out (no
    // heartbeat) and runs again there: the run goes on by itself.
    await until(`step ${step} committed after the kill`, committed(runId, step + 1));
    const recoverSeconds = (Date.now() - killedAt) / 1000;
    const restarted = poolPid();
    assert.ok(restarted && restarted !== killed, `the supervisor restarted the pool worker (pid ${restarted}, killed ${killed})`);
    const history = await first.fetchHistory();
    const retried = (history.events ?? []).flatMap((e) => {
      const a = e.activityTaskStartedEventAttributes;
      return a && (a.attempt ?? 1) > 1 && a.lastFailure?.timeoutFailureInfo && a.identity?.startsWith(`${restarted}@`) ? [a] : [];
    });
    assert.ok(retried.length > 0, `an activity the killed worker held (${inFlight}) ran again on the restarted one after its heartbeat timed out`);
    console.log(
      `pool worker ${killed} SIGKILLed during ${inFlight} of step ${step}; ` +
        `step ${step} committed ${recoverSeconds.toFixed(1)} s later, ${retried.length} activities retried on pool worker ${restarted}`,
    );

    // Then the run itself ends badly, and the user resumes it: a new execution from the last committed step.
    await first.terminate('test: the run crashed');
    const resume = await troupe(['resume', runId], cli);
    assert.equal(resume.code, 0, `troupe resume: ${resume.stderr}${resume.stdout}`);
    assert.match(resume.stderr, new RegExp(`troupe: resumed run ${runId} \\(new execution `));
    assert.equal((await h.env.client.workflow.getHandle(runId).describe()).status.name, 'COMPLETED');
    await caughtUp(exporter, runId);
    const down = await troupe(['down'], cli);
    assert.equal(down.code, 0, `troupe down: ${down.stderr}${down.stdout}`);
    cliEnv = undefined;

    // A new exporter knows nothing in memory: it reads what the server holds and sends nothing twice.
    const again = new MlflowExport(h.db.sql, h.db.checkpoints, { log: () => undefined });
    try {
      await h.db.sql`UPDATE mlflow_runs SET finished = false`;
      await again.catchUp();
      for (const r of ['ml-plain', 'ml-model', 'ml-outage', runId]) await caughtUp(again, r);
    } finally {
      await again.stop();
    }
    for (const r of ['ml-plain', 'ml-model', 'ml-outage']) await assertExported(r);
    await assertExported(runId, config.steps);
    await assertModel('ml-model');
  });
});
