/**
 * The control worker and a pool worker, as the processes `troupe worker` runs, serve
 * Prometheus `/metrics` (TROUPE_*_METRICS_PORT / --metrics-port): Temporal's worker metrics
 * and Troupe's; the pool worker's engine serves its own (TROUPE_ENGINE_METRICS_PORT, inherited
 * from the worker). A real Prometheus (Debian's package, installed by .ci/run) scrapes all three
 * during a short run and loads deploy/prometheus's alert rules; `promtool check metrics`
 * passes on every endpoint; every metric deploy/'s dashboard and rules name is served (or is
 * one of Troupe's that only appears once it happens, such as an engine hang); `promtool test
 * rules` runs the rules' unit tests (deploy/prometheus/troupe-alerts.test.yml: a hung engine, an
 * engine or a worker down, no trainable signal, workers not polling). The run's team
 * (chat-digits) calls the gateway, so its calls are counted too.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { TROUPE_METRIC_NAMES } from '../../../infra/metrics';
import type { trainingRun } from '../../../workflows';
import { createTestDatabase, freePort, startTemporal, uniqueTaskQueue, type TestDatabase } from '../../helpers';

const repo = path.join(__dirname, '..', '..', '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const hasPrometheus = spawnSync('prometheus', ['--version']).status === 0 && spawnSync('promtool', ['--version']).status === 0;
const RULES = path.join(repo, 'deploy', 'prometheus', 'troupe-alerts.yml');
const RULE_TESTS = path.join(repo, 'deploy', 'prometheus', 'troupe-alerts.test.yml');
const DASHBOARD = path.join(repo, 'deploy', 'grafana', 'troupe-dashboard.json');

/** The metric names a PromQL expression uses (identifiers followed by a selector, range or nothing, minus functions and keywords). */
function metricNames(expr: string): string[] {
  const words = expr.replace(/"[^"]*"/g, '""').match(/[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{[)\s]|$)/g) ?? [];
  const keywords = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset', 'le']);
  return [
    ...new Set(
      words.filter(
        (w) => !keywords.has(w) && /^(troupe_|temporal_|up$)/.test(w) && !/^(rate|increase|sum|max|min|avg|histogram_quantile|absent|count|time)$/.test(w),
      ),
    ),
  ];
}

describe('Prometheus', { skip: hasPrometheus ? false : 'prometheus and promtool are not installed (Debian: apt-get install prometheus; .ci/run does)' }, () => {
  let env: TestWorkflowEnvironment;
  let db: TestDatabase;
  const children: ChildProcess[] = [];
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-prom-'));
  const taskQueue = uniqueTaskQueue('troupe');
  const poolQueue = uniqueTaskQueue('troupe-gpu');
  const ports = { control: 0, pool: 0, engine: 0, prometheus: 0 };

  function start(what: string, cmd: string, args: string[], extraEnv: NodeJS.ProcessEnv = {}): ChildProcess {
    const log = fs.openSync(path.join(tmp, `${what}.log`), 'w');
    const child = spawn(cmd, args, { cwd: repo, env: { ...process.env, ...extraEnv }, stdio: ['ignore', log, log] });
    children.push(child);
    return child;
  }

  before(async () => {
    env = await startTemporal();
    db = await createTestDatabase();
    ports.control = await freePort();
    ports.pool = await freePort();
    ports.engine = await freePort();
    ports.prometheus = await freePort();
    const workerEnv = { DATABASE_URL: db.url, TROUPE_CHECKPOINT_DIR: db.checkpoints.dir, TROUPE_TENSORBOARD_DIR: 'off', TROUPE_POOL_TASK_QUEUE: poolQueue };
    const node = (file: string, ...args: string[]) => ['--import', 'tsx', path.join(repo, 'processes', file), '--temporal-address', env.address, ...args];
    start('control', process.execPath, node('control-worker.ts', '--task-queue', taskQueue), {
      ...workerEnv,
      TROUPE_CONTROL_METRICS_PORT: String(ports.control),
    });
    start('pool', process.execPath, node('pool-worker.ts', '--task-queue', poolQueue, '--device', 'cpu', '--metrics-port', String(ports.pool)), {
      ...workerEnv,
      TROUPE_ENGINE_METRICS_PORT: String(ports.engine),
    });
    const config = [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      `rule_files: [${JSON.stringify(RULES)}]`,
      'scrape_configs:',
      `  - { job_name: troupe-control, static_configs: [{ targets: ['127.0.0.1:${ports.control}'] }] }`,
      `  - { job_name: troupe-pool, static_configs: [{ targets: ['127.0.0.1:${ports.pool}'] }] }`,
      `  - { job_name: troupe-engine, static_configs: [{ targets: ['127.0.0.1:${ports.engine}'] }] }`,
    ].join('\n');
    fs.writeFileSync(path.join(tmp, 'prometheus.yml'), config);
    start('prometheus', 'prometheus', [
      `--config.file=${path.join(tmp, 'prometheus.yml')}`,
      `--storage.tsdb.path=${path.join(tmp, 'data')}`,
      `--web.listen-address=127.0.0.1:${ports.prometheus}`,
    ]);
  });
  after(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : Promise.resolve())));
    await db?.drop();
    await env?.teardown();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const scrape = async (port: number) => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const query = async (q: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> => {
    const r = (await (await fetch(`http://127.0.0.1:${ports.prometheus}/api/v1/query?query=${encodeURIComponent(q)}`)).json()) as {
      data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> };
    };
    return r.data.result;
  };
  const promtool = (text: string) => spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  const served = (text: string) =>
    new Set([...text.matchAll(/^# TYPE (\S+) (\w+)/gm)].flatMap(([, n, t]) => (t === 'histogram' ? [`${n}_bucket`, `${n}_sum`, `${n}_count`, n] : [n!])));

  it('workers and their engine serve /metrics that promtool accepts during a run; Prometheus scrapes them and loads the alert rules', async () => {
    const handle = await env.client.workflow.start<typeof trainingRun>('trainingRun', {
      taskQueue,
      workflowId: 'prom-run',
      args: [{ team: 'chat-digits', steps: 3, groupsPerStep: 3, groupSize: 4, evalEvery: 0, evalTasks: 4, seed: 2 }],
    });
    // During the run: the three endpoints answer and pass promtool's checks.
    const endpoints = [
      ['control', ports.control],
      ['pool', ports.pool],
      ['engine', ports.engine],
    ] as const;
    const texts: Record<string, string> = {};
    const during = async () => {
      for (const [what, port] of endpoints) {
        const text = await scrape(port);
        const check = promtool(text);
        assert.equal(check.status, 0, `promtool check metrics on the ${what} worker: ${check.stdout}${check.stderr}`);
        texts[what] = text;
      }
    };
    const deadline = Date.now() + 240_000;
    for (;;) {
      const up = await Promise.all(
        endpoints.map(([, port]) =>
          scrape(port).then(
            () => true,
            () => false,
          ),
        ),
      );
      if (up.every(Boolean)) break;
      assert.ok(Date.now() < deadline, `the workers' and the engine's /metrics never answered (logs in ${tmp})`);
      await sleep(500);
    }
    await during();
    const summary = await handle.result();
    assert.equal(summary.status, 'completed');
    await during();
    // Temporal's worker metrics on both, Troupe's where the work happened.
    for (const what of ['control', 'pool']) assert.match(texts[what] ?? '', /^temporal_worker_task_slots_available\{/m, `${what}: Temporal's task slots`);
    assert.match(texts.pool ?? '', /^troupe_episodes_total\{.*split="train".*\} 36$/m, 'pool: 3 steps × 12 episodes');
    assert.match(texts.pool ?? '', /^troupe_model_version\{.*run="prom-run".*\} 3$/m, 'pool: the version committed last');
    // chat-digits' agent code calls the gateway (in the pool worker's episode threads) twice per episode.
    const calls = /^troupe_gateway_calls_total\{api="chat\/completions",status="200"\} (\d+)$/m.exec(texts.pool ?? '');
    assert.ok(calls && Number(calls[1]) >= 2 * 36, `pool: the gateway's calls, from its episode threads (${calls?.[0]})`);
    assert.match(texts.pool ?? '', /^troupe_store_write_seconds_count\{.*what="update".*\} 3$/m, 'pool: one timed commit per step');
    assert.match(texts.pool ?? '', /^troupe_tokens_trained_total\{/m);
    assert.match(texts.pool ?? '', /^troupe_engine_queue_depth/m);
    // The engine's own: what it generated for the gateway's calls, its model's versions, its progress.
    const engine = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(texts.engine ?? '')?.[1] ?? NaN);
    assert.ok(engine('troupe_engine_tokens_generated_total') > 0, `engine: tokens generated\n${texts.engine}`);
    assert.ok(engine('troupe_engine_tokens_trained_total') > 0, 'engine: tokens trained');
    assert.ok(engine('troupe_engine_device_runs_total') > 0, 'engine: device runs');
    assert.match(texts.engine ?? '', /^troupe_engine_model_latest_version\{model="[^"]+"\} 3$/m, 'engine: the version committed last');

    // Prometheus: the three targets up, Troupe's series stored, the rules loaded and healthy.
    const until = Date.now() + 60_000;
    for (;;) {
      const up = await query('up');
      const episodes = await query('sum(troupe_episodes_total{split="train"})');
      const generated = await query('sum(troupe_engine_tokens_generated_total{job="troupe-engine"})');
      if (up.length === 3 && up.every((u) => u.value[1] === '1') && episodes[0]?.value[1] === '36' && Number(generated[0]?.value[1]) > 0) break;
      assert.ok(
        Date.now() < until,
        `Prometheus did not scrape the workers and the engine: up ${JSON.stringify(up)}, episodes ${JSON.stringify(episodes)}, engine tokens ${JSON.stringify(generated)}`,
      );
      await sleep(500);
    }
    const rules = (await (await fetch(`http://127.0.0.1:${ports.prometheus}/api/v1/rules`)).json()) as {
      data: { groups: Array<{ rules: Array<{ name: string; health: string; lastError?: string }> }> };
    };
    const loaded = rules.data.groups.flatMap((g) => g.rules);
    assert.ok(loaded.length >= 3, 'the alert rules are loaded');
    for (const r of loaded) assert.equal(r.health, 'ok', `${r.name}: ${r.lastError ?? ''}`);

    // Every metric the dashboard and the rules name exists.
    const known = new Set([...served(texts.control ?? ''), ...served(texts.pool ?? ''), ...served(texts.engine ?? ''), ...TROUPE_METRIC_NAMES, 'up']);
    const dashboard = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')) as { panels: Array<{ title: string; targets?: Array<{ expr: string }> }> };
    const exprs = [
      ...dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `dashboard panel "${p.title}"`, expr: t.expr }))),
      ...[...fs.readFileSync(RULES, 'utf8').matchAll(/^\s*expr:\s*(.+)$/gm)].map(([, e]) => ({ where: 'alert rules', expr: e! })),
    ];
    for (const { where, expr } of exprs) for (const name of metricNames(expr)) assert.ok(known.has(name), `${where}: ${name} is not served (${expr})`);
    const check = spawnSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    assert.equal(check.status, 0, `promtool check rules: ${check.stdout}${check.stderr}`);
  });

  it('the alert rules fire on the series their unit tests give them, and only there (promtool test rules)', () => {
    const r = spawnSync('promtool', ['test', 'rules', RULE_TESTS], { encoding: 'utf8' });
    assert.equal(r.status, 0, `promtool test rules: ${r.stdout}${r.stderr}`);
    assert.match(r.stdout, /SUCCESS/);
    // the failures Troupe detects each have a case there
    const alerts = [...fs.readFileSync(RULES, 'utf8').matchAll(/^\s*- alert: (\w+)$/gm)].map(([, a]) => a);
    const tested = new Set([...fs.readFileSync(RULE_TESTS, 'utf8').matchAll(/alertname: (\w+)/g)].map(([, a]) => a));
    for (const a of ['TroupeEngineNoProgress', 'TroupeEngineDown', 'TroupeWorkerDown', 'TroupeNoTrainableSignal', 'TroupeWorkersNotPolling'])
      assert.ok(alerts.includes(a) && tested.has(a), `${a}: in the rules and tested`);
  });
});
