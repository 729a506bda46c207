/**
 * Load test of the production path: the Temporal server built from its Go module on
 * PostgreSQL (deploy/temporal/production.yaml, mTLS, the payload codec on: the production-path
 * test's cluster, testing/production.ts), Troupe's store on the same PostgreSQL server, one
 * control worker and 1, 2 and 4 pool workers as separate processes, each pool worker with its
 * own CPU engine. The bundled math team (tiny-lm policy, ~2 agent turns per episode: the cheapest
 * policy there is) trains at increasing episodes per step, batched and durable, until throughput
 * stops growing or a point hits the time cap. Per point: agent turns/s, workflow task latency
 * p50/p99 (from histories), PostgreSQL growth per 1,000 episodes (Troupe's store and Temporal's
 * databases apart), history events and bytes per episode, CPU seconds per process (from /proc),
 * and the load average (the machine is shared). Not a test; prints a table and with --write
 * writes bench/results/<--out, default load>.{md,json}.
 *
 *   node --import tsx bench/load.ts [--write] [--workers 1,2,4] [--modes batched,durable]
 *        [--batched-sizes 256,2048,16384] [--durable-sizes 32,128,512] [--cap 30]
 *        [--max-steps 3] [--budget 1200] [--history-sample 48] [--episodes-per-workflow 1] [--out load]
 *   node --import tsx bench/load.ts --report bench/results/load.json   (the tables of a saved run)
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import type { Client } from '@temporalio/client';
import { startTrainingRun, validateRunConfig } from '../control/runs';
import { connect, withDatabase, type Sql } from '../infra/db';
import { errorMessage } from '../infra/errors';
import { temporalClient } from '../infra/temporal-connection';
import { ensureTemporalServerBinaries } from '../stack/temporal-server';
import { enterProjectFromEnvironment } from '../processes/project';
import { createTestDatabase, testDatabaseServer, type TestDatabase } from '../testing/database';
import { startCluster, type Cluster } from '../testing/production';
import { childProcesses } from '../testing/chaos/stack';
import { commandLine, machineBusy, processSeconds } from './lib/cpu';
import { eventMs, stepSpans, type History } from './lib/history';

// The bench validates run configs against the team, as the CLI does: it enters its project first.
enterProjectFromEnvironment({ required: false });

const { values } = parseArgs({
  options: {
    write: { type: 'boolean' },
    workers: { type: 'string' },
    modes: { type: 'string' },
    'batched-sizes': { type: 'string' },
    'durable-sizes': { type: 'string' },
    cap: { type: 'string' },
    'max-steps': { type: 'string' },
    budget: { type: 'string' },
    'history-sample': { type: 'string' },
    'episodes-per-workflow': { type: 'string' },
    report: { type: 'string' },
    out: { type: 'string' },
  },
});
const list = (v: string | undefined, dflt: string, what: string) =>
  (v ?? dflt).split(',').map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n <= 0) throw new Error(`--${what}: expected positive integers separated by commas, got ${x}`);
    return n;
  });
const WORKERS = list(values.workers, '1,2,4', 'workers');
type Mode = 'batched' | 'durable';
const MODES = (values.modes ?? 'batched,durable').split(',') as Mode[];
for (const m of MODES) if (m !== 'batched' && m !== 'durable') throw new Error(`--modes: unknown mode ${m}`);
const GROUP_SIZE = 8;
const SIZES: Record<Mode, number[]> = {
  batched: list(values['batched-sizes'], '256,2048,16384', 'batched-sizes'),
  durable: list(values['durable-sizes'], '32,128,512', 'durable-sizes'),
};
for (const [mode, sizes] of Object.entries(SIZES))
  for (const s of sizes) if (s % GROUP_SIZE) throw new Error(`--${mode}-sizes: episodes per step must be a multiple of the group size ${GROUP_SIZE}, got ${s}`);
/** Seconds of training steps a point aims at; a run still going at 2.5x this is terminated. */
const CAP = Number(values.cap ?? 30);
const MAX_STEPS = Number(values['max-steps'] ?? 3);
/** Seconds for the whole bench: points that would start past it are skipped, saying so. */
const BUDGET = Number(values.budget ?? 1200);
/** Durable episode children per point whose histories are read (evenly spaced). */
const HISTORY_SAMPLE = Number(values['history-sample'] ?? 48);
/** Durable runs: episodes per child workflow (run config episodesPerWorkflow). */
const PER_WORKFLOW = Number(values['episodes-per-workflow'] ?? 1);
/** A point whose turns/s is below this multiple of the previous size's counts as saturated. */
const GROWTH = 1.15;
const COMMAND = `node --import tsx bench/load.ts${process.argv.length > 2 ? ' ' + process.argv.slice(2).join(' ') : ''}`;
const RESULTS = path.join(__dirname, 'results');
/** --write writes bench/results/<out>.{md,json}. */
const OUT = values.out ?? 'load';
if (!/^[A-Za-z0-9._-]+$/.test(OUT)) throw new Error(`--out: a file name stem (letters, digits, . _ -), got ${OUT}`);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const f = (x: number | undefined, d = 1) => (x !== undefined && Number.isFinite(x) ? x.toFixed(d) : 'n/a');
const load = () => os.loadavg().map((x) => Number(x.toFixed(2)));
/** Nearest-rank percentile. */
function pct(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const median = (xs: number[]) => pct(xs, 50);

// ---------------------------------------------------------------- what one snapshot reads

/** Process groups whose CPU is counted. */
const GROUPS = ['temporal', 'control', 'pool', 'engine', 'pgStore', 'pgTemporal', 'driver'] as const;
type Group = (typeof GROUPS)[number];
const GROUP_LABEL: Record<Group, string> = {
  temporal: 'Temporal server',
  control: 'control worker',
  pool: 'pool workers',
  engine: 'engines',
  pgStore: 'PostgreSQL (store)',
  pgTemporal: 'PostgreSQL (Temporal)',
  driver: 'bench driver',
};

interface Snapshot {
  at: number;
  /** per pid CPU seconds */
  procs: Map<number, { ppid: number; comm: string; seconds: number }>;
  machine: number;
  load: number[];
  /** bytes: Troupe's store, per table, and Temporal's two databases */
  storeTables: Record<string, number>;
  storeDb: number;
  temporalDb: number;
  visibilityDb: number;
  historyNode: number;
  /** sums of the Temporal server's Prometheus counters named in METRICS */
  metrics: Record<string, number>;
}

/** Server counters worth a per-turn rate: requests to persistence and to the frontend. */
const METRICS = ['persistence_requests', 'service_requests'];

async function scrape(address: string): Promise<Record<string, number>> {
  const out: Record<string, number> = Object.fromEntries(METRICS.map((m) => [m, 0]));
  try {
    const text = await (await fetch(`http://${address}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    for (const line of text.split('\n')) {
      if (line.startsWith('#')) continue;
      const name = line.slice(0, line.search(/[{ ]/));
      if (name in out) out[name]! += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
    }
  } catch {
    for (const m of METRICS) out[m] = NaN;
  }
  return out;
}

interface Ctx {
  cluster: Cluster;
  client: Client;
  store: TestDatabase;
  /** the PostgreSQL server (admin) and Temporal's main database */
  admin: Sql;
  temporalSql: Sql;
}

async function snapshot(ctx: Ctx): Promise<Snapshot> {
  const { cluster, store, admin, temporalSql } = ctx;
  const tables = await store.sql<{ name: string; bytes: string }[]>`
    SELECT c.relname AS name, pg_total_relation_size(c.oid)::bigint AS bytes
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind = 'r'`;
  const [dbs] = await admin<{ store: string; temporal: string; vis: string }[]>`
    SELECT pg_database_size(${store.name})::bigint AS store,
           pg_database_size(${cluster.databases.database})::bigint AS temporal,
           pg_database_size(${cluster.databases.visibilityDatabase})::bigint AS vis`;
  const [hn] = await temporalSql<{ bytes: string }[]>`SELECT pg_total_relation_size('history_node')::bigint AS bytes`;
  return {
    at: performance.now(),
    procs: processSeconds(),
    machine: machineBusy(),
    load: load(),
    storeTables: Object.fromEntries(tables.map((t) => [t.name, Number(t.bytes)])),
    storeDb: Number(dbs!.store),
    temporalDb: Number(dbs!.temporal),
    visibilityDb: Number(dbs!.vis),
    historyNode: Number(hn!.bytes),
    metrics: await scrape(cluster.metricsAddress),
  };
}

/** CPU seconds per group between two snapshots (per pid, so a process that started in between counts from 0). */
function cpuBetween(ctx: Ctx, a: Snapshot, b: Snapshot): Record<Group, number> {
  const { cluster, store } = ctx;
  const out = Object.fromEntries(GROUPS.map((g) => [g, 0])) as Record<Group, number>;
  const temporalPid = cluster.server()?.pid;
  const controlPid = cluster.record('control-worker')?.pid;
  const poolPids = new Set(
    Object.keys(poolRecords(cluster))
      .map((n) => cluster.record(n)?.pid)
      .filter((p): p is number => p !== undefined),
  );
  const enginePids = new Set([...poolPids].flatMap((p) => childProcesses(p).map((c) => c.pid)));
  const temporalDbs = [cluster.databases.database, cluster.databases.visibilityDatabase];
  for (const [pid, p] of b.procs) {
    const d = p.seconds - (a.procs.get(pid)?.seconds ?? 0);
    let g: Group | undefined;
    if (pid === temporalPid) g = 'temporal';
    else if (pid === controlPid) g = 'control';
    else if (poolPids.has(pid)) g = 'pool';
    else if (enginePids.has(pid)) g = 'engine';
    else if (pid === process.pid) g = 'driver';
    else if (p.comm === 'postgres') {
      const cmd = commandLine(pid);
      if (cmd.includes(` ${store.name} `)) g = 'pgStore';
      else if (temporalDbs.some((db) => cmd.includes(` ${db} `))) g = 'pgTemporal';
    }
    if (g) out[g] += d;
  }
  return out;
}

const poolRecords = (cluster: Cluster) =>
  Object.fromEntries(
    Array.from({ length: 16 }, (_, i) => `pool-worker-${i + 1}`)
      .map((n) => [n, cluster.record(n)] as const)
      .filter(([, r]) => r !== undefined),
  );

// ---------------------------------------------------------------- histories

interface Latencies {
  /** workflow tasks: scheduled -> started (queue), started -> completed (worker), scheduled -> completed */
  wftQueue: number[];
  wftExec: number[];
  wftTotal: number[];
  /** pool activities (generateTurn, rolloutBatch): scheduled -> started */
  poolQueue: number[];
}

const POOL_ACTIVITIES = new Set(['generateTurn', 'rolloutBatch']);

function addLatencies(into: Latencies, history: History, from = 0, to = Infinity): void {
  let scheduled = 0;
  let started = 0;
  const actScheduled = new Map<string, number>();
  for (const e of history.events ?? []) {
    const t = eventMs(e);
    const inside = t >= from && t <= to;
    if (e.workflowTaskScheduledEventAttributes) scheduled = t;
    else if (e.workflowTaskStartedEventAttributes) started = t;
    else if (e.workflowTaskCompletedEventAttributes && inside) {
      into.wftQueue.push(started - scheduled);
      into.wftExec.push(t - started);
      into.wftTotal.push(t - scheduled);
    } else if (e.activityTaskScheduledEventAttributes && POOL_ACTIVITIES.has(e.activityTaskScheduledEventAttributes.activityType?.name ?? ''))
      actScheduled.set(String(e.eventId), t);
    else if (e.activityTaskStartedEventAttributes && inside) {
      const s = actScheduled.get(String(e.activityTaskStartedEventAttributes.scheduledEventId));
      if (s !== undefined) into.poolQueue.push(t - s);
    }
  }
}

// ---------------------------------------------------------------- one point

interface Point {
  workers: number;
  mode: Mode;
  episodesPerStep: number;
  runId: string;
  stepsPlanned: number;
  stepsCompleted: number;
  /** terminated at the time cap */
  capped: boolean;
  wallSeconds: number;
  /** seconds of each completed step (history: planStep -> the next step's first activity) */
  stepSeconds: number[];
  /** median rollout seconds of the completed steps (the step's metric) */
  rolloutSeconds: number;
  /** agent turns / episodes of the completed steps' training rollouts */
  stepTurns: number;
  stepEpisodes: number;
  turnsPerSecond: number;
  episodesPerSecond: number;
  /** all episodes and turns the run stored (training and eval), for per-episode sizes and CPU */
  episodes: number;
  turns: number;
  latency: {
    wftQueueP50: number;
    wftQueueP99: number;
    wftP50: number;
    wftP99: number;
    wftCount: number;
    poolQueueP50: number;
    poolQueueP99: number;
    poolCount: number;
  };
  history: {
    parentEvents: number;
    parentBytes: number;
    /** durable: mean over the sampled episode children */
    childEvents?: number;
    childBytes?: number;
    childrenSampled?: number;
    eventsPerEpisode: number;
    bytesPerEpisode: number;
  };
  /** bytes added, per 1,000 stored episodes */
  sizePer1000: { store: number; storeWithoutVersions: number; turns: number; temporal: number; historyNode: number; visibility: number };
  /** bytes the versions table grew by, per completed step */
  versionBytesPerStep: number;
  cpu: Record<Group, number>;
  machineCpu: number;
  temporalMetrics: Record<string, number>;
  loadBefore: number[];
  loadAfter: number[];
}

async function runPoint(ctx: Ctx, workers: number, mode: Mode, episodes: number, steps: number): Promise<Point> {
  const { cluster, client, store } = ctx;
  const runId = `load-${mode}-w${workers}-e${episodes}-${Date.now().toString(36)}`;
  const config = validateRunConfig({
    team: 'math',
    runId,
    seed: 0,
    steps,
    groupsPerStep: episodes / GROUP_SIZE,
    groupSize: GROUP_SIZE,
    rollout: mode,
    ...(mode === 'durable' && PER_WORKFLOW > 1 ? { episodesPerWorkflow: PER_WORKFLOW } : {}),
    evalEvery: 0,
    evalTasks: 1,
  });
  const before = await snapshot(ctx);
  const handle = await startTrainingRun(client, cluster.config.taskQueue, config);
  let capped = false;
  const hardCap = 2.5 * CAP * 1000;
  const timer = setTimeout(() => {
    capped = true;
    handle.terminate('bench/load.ts: time cap').catch(() => undefined);
  }, hardCap);
  try {
    await handle.result();
  } catch (e) {
    if (!capped) throw e;
  } finally {
    clearTimeout(timer);
  }
  const wallSeconds = (performance.now() - before.at) / 1000;
  // a terminated run's children and in-flight activities end on their own: let them before measuring
  if (capped) await sleep(5000);
  const after = await snapshot(ctx);

  const history = await handle.fetchHistory();
  const completed = new Set((await store.sql<{ step: number }[]>`SELECT step FROM steps WHERE run_id = ${runId} AND status = 'completed'`).map((r) => r.step));
  const spans = stepSpans(history).filter((s) => completed.has(s.step));
  const perStep = await store.sql<{ step: number; split: string; episodes: number; turns: number }[]>`
    SELECT e.step, e.split, count(DISTINCT e.episode_id)::int AS episodes, count(t.turn_index)::int AS turns
    FROM episodes e LEFT JOIN turns t USING (episode_id) WHERE e.run_id = ${runId} GROUP BY e.step, e.split`;
  const trainOf = (step: number) => perStep.find((r) => r.step === step && r.split === 'train');
  const stepSeconds = spans.map((s) => (s.end - s.start) / 1000);
  const stepTurns = spans.reduce((n, s) => n + (trainOf(s.step)?.turns ?? 0), 0);
  const stepEpisodes = spans.reduce((n, s) => n + (trainOf(s.step)?.episodes ?? 0), 0);
  const totalEpisodes = perStep.reduce((n, r) => n + r.episodes, 0);
  const totalTurns = perStep.reduce((n, r) => n + r.turns, 0);
  const stepTime = stepSeconds.reduce((a, b) => a + b, 0);
  const rollouts = await store.sql<{ value: number }[]>`
    SELECT value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND scope = 'team' AND name = 'rolloutSeconds'`;

  // Workflow task and pool queue latencies: the parent's during the completed steps, and
  // for durable rollouts a sample of the episode children of those steps.
  const lat: Latencies = { wftQueue: [], wftExec: [], wftTotal: [], poolQueue: [] };
  const from = Math.min(...spans.map((s) => s.start));
  const to = Math.max(...spans.map((s) => s.end));
  addLatencies(lat, history, from, to);
  const described = await handle.describe();
  const parentEvents = described.historyLength;
  const parentBytes = described.historySize ?? NaN;
  let childEvents: number | undefined;
  let childBytes: number | undefined;
  let childrenSampled: number | undefined;
  let eventsPerEpisode = parentEvents / Math.max(1, totalEpisodes);
  let bytesPerEpisode = parentBytes / Math.max(1, totalEpisodes);
  if (mode === 'durable') {
    const children = (history.events ?? [])
      .filter((e) => e.childWorkflowExecutionCompletedEventAttributes)
      .map((e) => e.childWorkflowExecutionCompletedEventAttributes!.workflowExecution!.workflowId!)
      // a step's episode children, or its workflows of several episodes (:e<from>-<to>)
      .filter((id) => /:s\d+:(g\d+:e\d+|e\d+-\d+)$/.test(id));
    const k = Math.min(HISTORY_SAMPLE, children.length);
    const sample = Array.from({ length: k }, (_, i) => children[Math.floor((i * children.length) / k)]!);
    let ev = 0;
    let by = 0;
    for (const id of sample) {
      const h = client.workflow.getHandle(id);
      addLatencies(lat, await h.fetchHistory());
      const d = await h.describe();
      ev += d.historyLength;
      by += d.historySize ?? NaN;
    }
    childrenSampled = k;
    childEvents = ev / Math.max(1, k);
    childBytes = by / Math.max(1, k);
    // every stored episode had its child (or a share of one): the parent's share plus the child's
    eventsPerEpisode += childEvents / PER_WORKFLOW;
    bytesPerEpisode += childBytes / PER_WORKFLOW;
  }

  const per1000 = (bytes: number) => (bytes / Math.max(1, totalEpisodes)) * 1000;
  const tableDelta = (name: string) => (after.storeTables[name] ?? 0) - (before.storeTables[name] ?? 0);
  const allTables = Object.keys(after.storeTables).reduce((n, t) => n + tableDelta(t), 0);
  const turnTables = ['episodes', 'turns', 'tool_calls', 'rewards'].reduce((n, t) => n + tableDelta(t), 0);
  const metrics = Object.fromEntries(METRICS.map((m) => [m, after.metrics[m]! - before.metrics[m]!]));
  return {
    workers,
    mode,
    episodesPerStep: episodes,
    runId,
    stepsPlanned: steps,
    stepsCompleted: spans.length,
    capped,
    wallSeconds,
    stepSeconds,
    rolloutSeconds: median(rollouts.map((r) => r.value)),
    stepTurns,
    stepEpisodes,
    turnsPerSecond: stepTime > 0 ? stepTurns / stepTime : NaN,
    episodesPerSecond: stepTime > 0 ? stepEpisodes / stepTime : NaN,
    episodes: totalEpisodes,
    turns: totalTurns,
    latency: {
      wftQueueP50: pct(lat.wftQueue, 50),
      wftQueueP99: pct(lat.wftQueue, 99),
      wftP50: pct(lat.wftTotal, 50),
      wftP99: pct(lat.wftTotal, 99),
      wftCount: lat.wftTotal.length,
      poolQueueP50: pct(lat.poolQueue, 50),
      poolQueueP99: pct(lat.poolQueue, 99),
      poolCount: lat.poolQueue.length,
    },
    history: { parentEvents, parentBytes, childEvents, childBytes, childrenSampled, eventsPerEpisode, bytesPerEpisode },
    sizePer1000: {
      store: per1000(after.storeDb - before.storeDb),
      storeWithoutVersions: per1000(allTables - tableDelta('versions')),
      turns: per1000(turnTables),
      temporal: per1000(after.temporalDb - before.temporalDb),
      historyNode: per1000(after.historyNode - before.historyNode),
      visibility: per1000(after.visibilityDb - before.visibilityDb),
    },
    versionBytesPerStep: tableDelta('versions') / Math.max(1, spans.length),
    cpu: cpuBetween(ctx, before, after),
    machineCpu: after.machine - before.machine,
    temporalMetrics: metrics,
    loadBefore: before.load,
    loadAfter: after.load,
  };
}

// ---------------------------------------------------------------- the sweep

async function main() {
  const t0 = performance.now();
  const log = (line: string) => console.log(`# ${line}`);
  console.log(`# ${COMMAND}`);
  console.log(`# node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}), load ${load().join(' ')}`);
  const bins = await ensureTemporalServerBinaries({ log });
  const server = await testDatabaseServer();
  const store = await createTestDatabase();
  const cluster = await startCluster({ serverBin: bins.server, sqlTool: bins.sqlTool, serverUrl: server.url, troupeDatabaseUrl: store.url, log });
  const admin = connect(server.url, { max: 1 });
  const temporalSql = connect(withDatabase(server.url, cluster.databases.database), { max: 1 });
  const connection = await cluster.connect();
  const points: Point[] = [];
  const skipped: string[] = [];
  try {
    const ctx: Ctx = { cluster, client: temporalClient(connection, cluster.namespace, cluster.config), store, admin, temporalSql };
    cluster.startWorker('control-worker');
    log(`cluster up in ${f((performance.now() - t0) / 1000)} s: Temporal server ${cluster.address} on PostgreSQL ${server.serverVersion} (${server.source})`);
    console.log(
      '| pool workers | mode | episodes/step | steps | step s (median) | turns/s | episodes/s | WFT p50 / p99 ms | pool queue p50 / p99 ms | events / KB per episode | store / Temporal KB per 1k episodes | CPU s Temporal / control / pool / engines / pg-store / pg-Temporal | cores used: Troupe + Temporal / machine | load |',
    );
    for (const workers of WORKERS) {
      const names = Array.from({ length: workers }, (_, i) => `pool-worker-${i + 1}`);
      for (const n of names) if (!cluster.record(n)) cluster.startWorker(n);
      await cluster.waitForPollers(['control-worker', ...names]);
      // Warm-up, not recorded: JIT, workflow caches, every engine's session.
      for (const mode of MODES) await runPoint(ctx, workers, mode, mode === 'durable' ? 2 * workers * GROUP_SIZE : 4 * GROUP_SIZE, 1);
      for (const mode of MODES) {
        let prev: Point | undefined;
        for (const episodes of SIZES[mode]) {
          const elapsed = (performance.now() - t0) / 1000;
          if (elapsed > BUDGET) {
            skipped.push(`${mode}, ${workers} pool worker(s), ${episodes} episodes/step: past the ${BUDGET} s budget`);
            continue;
          }
          // steps that fit the cap, predicted from the previous size (linear in episodes)
          const predicted = prev ? (median(prev.stepSeconds) * episodes) / prev.episodesPerStep : 0;
          const steps = predicted > 0 ? Math.max(1, Math.min(MAX_STEPS, Math.floor(CAP / predicted))) : MAX_STEPS;
          const p = await runPoint(ctx, workers, mode, episodes, steps);
          points.push(p);
          console.log(row(p));
          const saturated = p.capped || p.stepsCompleted === 0 || (prev !== undefined && p.turnsPerSecond < GROWTH * prev.turnsPerSecond);
          if (saturated) {
            const rest = SIZES[mode].filter((s) => s > episodes);
            if (rest.length) skipped.push(`${mode}, ${workers} pool worker(s), ${rest.join(', ')} episodes/step: saturated or capped at ${episodes}`);
            break;
          }
          prev = p;
        }
      }
    }
  } finally {
    await connection.close().catch(() => undefined);
    await temporalSql.end({ timeout: 1 }).catch(() => undefined);
    await admin.end({ timeout: 1 }).catch(() => undefined);
    await cluster.shutdown().catch((e: unknown) => console.error(`shutdown: ${errorMessage(e)}`));
    await store.drop().catch(() => undefined);
  }
  const seconds = (performance.now() - t0) / 1000;
  const md = report(points, skipped, { command: COMMAND, date: new Date().toISOString(), seconds });
  console.log(md);
  if (values.write) {
    fs.mkdirSync(RESULTS, { recursive: true });
    fs.writeFileSync(path.join(RESULTS, `${OUT}.md`), md);
    fs.writeFileSync(
      path.join(RESULTS, `${OUT}.json`),
      JSON.stringify({ command: COMMAND, date: new Date().toISOString(), node: process.version, cores: os.cpus().length, seconds, points, skipped }, null, 2) +
        '\n',
    );
    console.log(`wrote ${path.relative(process.cwd(), RESULTS)}/${OUT}.{md,json}`);
  }
}

const KB = (b: number) => f(b / 1024, 1);
const cpuCols = (p: Point) => [p.cpu.temporal, p.cpu.control, p.cpu.pool, p.cpu.engine, p.cpu.pgStore, p.cpu.pgTemporal].map((x) => f(x, 1)).join(' / ');

/** CPU seconds of the processes under test (the bench driver left out). */
const ourCpu = (p: Point) => GROUPS.filter((g) => g !== 'driver').reduce((n, g) => n + p.cpu[g], 0);

function row(p: Point): string {
  return `| ${p.workers} | ${p.mode} | ${p.episodesPerStep} | ${p.stepsCompleted}/${p.stepsPlanned}${p.capped ? ' (capped)' : ''} | ${f(median(p.stepSeconds), 2)} | ${f(p.turnsPerSecond, 0)} | ${f(p.episodesPerSecond, 0)} | ${f(p.latency.wftP50, 0)} / ${f(p.latency.wftP99, 0)} | ${f(p.latency.poolQueueP50, 0)} / ${f(p.latency.poolQueueP99, 0)} | ${p.stepsCompleted === 0 ? 'n/a' : `${f(p.history.eventsPerEpisode, 1)} / ${KB(p.history.bytesPerEpisode)}`} | ${p.stepsCompleted === 0 ? 'n/a' : `${KB(p.sizePer1000.store)} / ${KB(p.sizePer1000.temporal)}`} | ${cpuCols(p)} | ${f(ourCpu(p) / p.wallSeconds, 2)} / ${f(p.machineCpu / p.wallSeconds, 2)} | ${p.loadBefore[0]}–${p.loadAfter[0]} |`;
}

function report(points: Point[], skipped: string[], run: { command: string; date: string; seconds: number }): string {
  const lines: string[] = [];
  const out = (l = '') => lines.push(l);
  out(`# ${run.command}`);
  out(`# ${run.date}, node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}), bench took ${f(run.seconds, 0)} s`);
  out();
  out(
    `Production path: Temporal server 1.29.1 on PostgreSQL (deploy/temporal/production.yaml, 4 history shards, mTLS, payload codec on), Troupe's store on the same PostgreSQL server, one control worker, N pool workers with a CPU engine each, all on this machine. Bundled math team (tiny-lm policy), group size ${GROUP_SIZE}${PER_WORKFLOW > 1 ? `, durable episodes ${PER_WORKFLOW} to a workflow (episodesPerWorkflow)` : ''}, evalEvery 0, evalTasks 1, seed 0. A point is one training run of up to ${MAX_STEPS} steps (as many as fit ${CAP} s at the previous size's rate; terminated at ${2.5 * CAP} s); a size whose turns/s is below ${GROWTH}x the previous size's ends the sweep of its mode. Each worker count is warmed up first with an unrecorded one-step run per mode. The machine is shared with other jobs: the load average (1 min) at the start and end of each point is in the last column.`,
  );
  out();
  out('## Throughput, latency, sizes and CPU per point');
  out();
  out(
    '| pool workers | mode | episodes/step | steps | step s (median) | turns/s | episodes/s | WFT p50 / p99 ms | pool queue p50 / p99 ms | events / KB per episode | store / Temporal KB per 1k episodes | CPU s Temporal / control / pool / engines / pg-store / pg-Temporal | cores used: Troupe + Temporal / machine | load |',
  );
  out('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const p of points) out(row(p));
  out();
  out(
    `turns/s and episodes/s: agent turns and episodes of the completed training steps over those steps' wall time (planStep to the next step's first activity: rollout, update and bookkeeping). WFT: workflow task latency, scheduled -> completed, from the histories (the run's during those steps; durable: plus a sample of episode children); pool queue: generateTurn / rolloutBatch scheduled -> started. Events / KB per episode: the run's history (describe: historyLength, historySize) over its stored episodes, plus for durable the mean episode child's. Sizes: growth of pg_database_size over the point per 1,000 stored episodes (training and eval), Troupe's store (versions included) and Temporal's main database. CPU: seconds over the whole run from /proc, per process group. A run terminated at the cap before it completed a step shows no sizes and no per-turn row (its stored episodes are not all the work it did); one that completed steps first keeps them, its CPU counting the terminated step's work too. Cores used: CPU seconds over wall seconds, of the processes under test (Troupe's and Temporal's, with their PostgreSQL backends) and of the whole machine (other jobs included; it has ${os.cpus().length}).`,
  );
  out();
  out("## Per agent turn (each point: over all the run's stored turns)");
  out();
  out(
    `CPU per turn counts the whole run (its start, two one-task evals, every step), so small points carry fixed costs. The ceiling is what ${os.cpus().length} cores would carry if the processes under test had them to themselves and nothing but CPU limited them: ${os.cpus().length} / (CPU seconds per turn). Persistence and server requests: deltas of the Temporal server's Prometheus counters (persistence_requests, service_requests of all its services).`,
  );
  out();
  out(
    `| pool workers | mode | episodes/step | turns | CPU ms/turn Temporal / control / pool / engines / pg-store / pg-Temporal / sum | ${os.cpus().length}-core ceiling, turns/s | persistence requests / turn | server requests / turn | history events / turn | history bytes / turn | store bytes / turn (without versions) | Temporal DB bytes / turn | versions KB / step |`,
  );
  out('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const p of points.filter((p) => p.stepsCompleted > 0)) {
    const per = (x: number) => (x / Math.max(1, p.turns)) * 1000;
    const turnsPerEpisode = p.turns / Math.max(1, p.episodes);
    const cpus = [p.cpu.temporal, p.cpu.control, p.cpu.pool, p.cpu.engine, p.cpu.pgStore, p.cpu.pgTemporal];
    out(
      `| ${p.workers} | ${p.mode} | ${p.episodesPerStep} | ${p.turns} | ${[...cpus, cpus.reduce((a, b) => a + b, 0)].map((x) => f(per(x), 2)).join(' / ')} | ${f((os.cpus().length * p.turns) / ourCpu(p), 0)} | ${f(p.temporalMetrics.persistence_requests! / p.turns, 2)} | ${f(p.temporalMetrics.service_requests! / p.turns, 2)} | ${f(p.history.eventsPerEpisode / turnsPerEpisode, 1)} | ${f(p.history.bytesPerEpisode / turnsPerEpisode, 0)} | ${f(p.sizePer1000.storeWithoutVersions / 1000 / turnsPerEpisode, 0)} | ${f(p.sizePer1000.temporal / 1000 / turnsPerEpisode, 0)} | ${KB(p.versionBytesPerStep)} |`,
    );
  }
  out();
  out('## Where each mode peaked');
  out();
  for (const mode of MODES) {
    for (const w of WORKERS) {
      const mine = points.filter((p) => p.mode === mode && p.workers === w && p.stepsCompleted > 0);
      if (mine.length === 0) continue;
      const best = mine.reduce((a, b) => (b.turnsPerSecond > a.turnsPerSecond ? b : a));
      const shares = GROUPS.filter((g) => g !== 'driver')
        .map((g) => [g, best.cpu[g] / best.wallSeconds] as const)
        .sort((a, b) => b[1] - a[1]);
      out(
        `- ${mode}, ${w} pool worker${w > 1 ? 's' : ''}: ${f(best.turnsPerSecond, 0)} turns/s at ${best.episodesPerStep} episodes/step; the machine used ${f(best.machineCpu / best.wallSeconds, 2)} of its ${os.cpus().length} cores, the processes under test ${f(ourCpu(best) / best.wallSeconds, 2)}: ${shares
          .slice(0, 4)
          .map(([g, c]) => `${GROUP_LABEL[g]} ${f(c, 2)}`)
          .join(', ')}`,
      );
    }
  }
  if (skipped.length) {
    out();
    out('Not run:');
    for (const s of skipped) out(`- ${s}`);
  }
  return lines.join('\n') + '\n';
}

/** --report <load.json>: the tables again from a saved run (what the bench prints is rendered from the same points). */
function rerender(file: string): void {
  const saved = JSON.parse(fs.readFileSync(file, 'utf8')) as { command: string; date: string; seconds: number; points: Point[]; skipped: string[] };
  process.stdout.write(report(saved.points, saved.skipped, saved).replace('\n\n', `\n# tables rendered again from ${path.basename(file)} by --report\n\n`));
}

(values.report ? Promise.resolve(rerender(values.report)) : main()).catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
