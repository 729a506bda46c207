/**
 * Credit sweep (issue #30): a team with long episodes and per-turn rewards
 * (`--team`: `navigator` by default, `lookout`, `chain`) trained with episode-level GRPO and with
 * each turn-level estimator, over seeds, with the in-process loop
 * (bench/lib/inprocess.ts: the same plan / rollout / reward / advantage /
 * update code as a Troupe batched run, without Temporal or Postgres).
 *
 * Per estimator: the first eval step at which greedy success reached 0.9 (mean
 * and spread over the seeds that reached it, and how many did), and the final
 * eval. Episode-level GRPO is `grpo` in scope `group`: every turn of an episode
 * gets the episode's average score, so all its tokens share one advantage.
 * `grpo@group-agent-episode` is episode-level GRPO per role: each role's turns
 * get the average of that role's own rewards in the episode, compared within
 * the role's task group. `grpo` in its default scope (each turn scored on its
 * own, per-turn rewards included) is listed too. Not a test; prints a table and writes
 * bench/results/credit-<team>.{md,json} and the mean eval curves,
 * credit-<team>.{png,svg}.
 *
 * --merge keeps the stored runs of the estimators not run now (the stored
 * sweep's settings must match: team, seeds, steps, eval interval and tasks),
 * so one estimator can be added or rerun without the hours of the others; the
 * md lists the command of each sweep that contributed.
 *
 *   node --import tsx bench/credit.ts [--team navigator] [--team-options '{"turns":12}'] [--seeds 10]
 *        [--estimators grpo@group,turn-return,...] [--optimizer '{"lr":0.05}'] [--groups 16]
 *        [--steps 20] [--eval-every 2] [--eval-tasks 100] [--parallel 2] [--merge] [--no-write]
 *
 * --team-options go to the team; --optimizer (run-config optimizer fields, e.g. lr, entropyCoef,
 * estimator.gamma; JSON without spaces) applies to every estimator of the sweep alike, each
 * keeping its name and scope; --groups is task groups per step.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { spawnEngine } from '../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';
import { renderVegaLite } from '../activities/store/plot';
import { trainInProcess } from './lib/inprocess';
import { machineLine } from './lib/cpu';
import type { Scope } from '../rl/advantages/types';

const OPTIONS = {
  team: { type: 'string' },
  'team-options': { type: 'string' },
  optimizer: { type: 'string' },
  groups: { type: 'string' },
  seeds: { type: 'string' },
  estimators: { type: 'string' },
  steps: { type: 'string' },
  'eval-every': { type: 'string' },
  'eval-tasks': { type: 'string' },
  parallel: { type: 'string' },
  merge: { type: 'boolean' },
  'no-write': { type: 'boolean' },
} as const;
const PROGRAM = 'node --import tsx bench/credit.ts';

/** What a sweep's results depend on, from its arguments (the stored commands are read the same way). */
function settingsOf(args: string[]) {
  const { values } = parseArgs({ args, options: OPTIONS });
  return {
    team: values.team ?? 'navigator',
    teamOptions: JSON.parse(values['team-options'] ?? '{}') as Record<string, unknown>,
    optimizer: JSON.parse(values.optimizer ?? '{}') as Record<string, unknown>,
    groups: Number(values.groups ?? 16),
    seeds: Array.from({ length: Number(values.seeds ?? 10) }, (_, i) => i),
    steps: Number(values.steps ?? 20),
    evalEvery: Number(values['eval-every'] ?? 2),
    evalTasks: Number(values['eval-tasks'] ?? 100),
  };
}

const ARGS = process.argv.slice(2);
const { values } = parseArgs({ args: ARGS, options: OPTIONS });
const SETTINGS = settingsOf(ARGS);
const {
  team: TEAM,
  teamOptions: TEAM_OPTIONS,
  optimizer: OPTIMIZER,
  groups: GROUPS,
  seeds: SEEDS,
  steps: STEPS,
  evalEvery: EVAL_EVERY,
  evalTasks: EVAL_TASKS,
} = SETTINGS;
/** name[@scope] */
const DEFAULT_ESTIMATORS = ['grpo@group', 'grpo@group-agent-episode', 'grpo', 'turn-return', 'gigpo', 'at-grpo', 'salt', 'hgpo'];
const ESTIMATORS = values.estimators?.split(',') ?? DEFAULT_ESTIMATORS;
const PARALLEL = Number(values.parallel ?? 2);
const TARGET = 0.9;
// JSON arguments quoted, so the printed command runs as printed
const COMMAND = [PROGRAM, ...ARGS.map((a) => (/^[\w@.,=/:-]*$/.test(a) ? a : `'${a}'`))].join(' ');
const RESULTS = path.join(__dirname, 'results');
/** Each team's sweep in files of its own, so one team's sweep never replaces another's. */
const BASE = `credit-${TEAM}`;

interface Run {
  estimator: string;
  seed: number;
  evals: Array<{ step: number; success: number }>;
  toTarget: number | null;
  final: number;
  wallSeconds: number;
}

/** One invocation that contributed runs to the stored results. */
interface Sweep {
  command: string;
  date: string;
  node: string;
  cores: number;
  seconds: number;
  estimators: string[];
}

interface Stored {
  sweeps: Sweep[];
  runs: Run[];
}

/**
 * The stored results, for --merge. Their sweeps must have been run with this sweep's settings,
 * or the table would compare unlike runs; checked before the hours of training.
 */
function readStored(file: string): Stored {
  const stored = JSON.parse(fs.readFileSync(file, 'utf8')) as Stored;
  const want = JSON.stringify(SETTINGS);
  for (const old of stored.sweeps) {
    const got = JSON.stringify(
      settingsOf(
        old.command
          .slice(PROGRAM.length)
          .split(' ')
          .filter(Boolean)
          .map((a) => a.replace(/^'(.*)'$/, '$1')),
      ),
    );
    if (got !== want) throw new Error(`--merge: stored sweep \`${old.command}\` has settings ${got}, this one ${want}; run all estimators instead`);
  }
  return stored;
}

/** The stored results with this sweep's estimators replaced by its runs. */
function merged(stored: Stored, sweep: Sweep, runs: Run[]): Stored {
  const now = new Set(sweep.estimators);
  const kept = stored.sweeps.map((w) => ({ ...w, estimators: w.estimators.filter((e) => !now.has(e)) })).filter((w) => w.estimators.length > 0);
  return { sweeps: [...kept, sweep], runs: [...stored.runs.filter((r) => !now.has(r.estimator)), ...runs] };
}

/** Mean, min and max greedy eval over seeds at each eval step, per estimator. */
function curves(estimators: string[], runs: Run[]) {
  return estimators.flatMap((e) => {
    const mine = runs.filter((r) => r.estimator === e);
    const steps = [...new Set(mine.flatMap((r) => r.evals.map((x) => x.step)))].sort((a, b) => a - b);
    return steps.map((step) => {
      const at = mine.flatMap((r) => r.evals.filter((x) => x.step === step).map((x) => x.success));
      return { estimator: label(e), step, mean: at.reduce((a, b) => a + b, 0) / at.length, min: Math.min(...at), max: Math.max(...at) };
    });
  });
}

/** All means in one panel; below, one panel per estimator with its min–max band over seeds. */
function plot(estimators: string[], runs: Run[]): Promise<{ svg: string; png: Uint8Array }> {
  const names = estimators.map(label);
  const color = {
    field: 'estimator',
    type: 'nominal',
    title: null,
    scale: { domain: names },
    legend: { orient: 'right', labelLimit: 300, symbolType: 'stroke' },
  };
  const x = { field: 'step', type: 'quantitative', title: 'training step' };
  const y = { field: 'mean', type: 'quantitative', title: 'eval success', scale: { domain: [0, 1] } };
  const target = {
    data: { values: [{ y: TARGET }] },
    mark: { type: 'rule', strokeDash: [4, 4], color: '#666' },
    encoding: { y: { field: 'y', type: 'quantitative' } },
  };
  return renderVegaLite({
    title: {
      text: `Credit over turns on ${TEAM}${JSON.stringify(TEAM_OPTIONS) === '{}' ? '' : ` ${JSON.stringify(TEAM_OPTIONS)}`}: greedy eval on ${EVAL_TASKS} held-out tasks, seeds ${SEEDS[0]}–${SEEDS.at(-1)}`,
      subtitle: `line: mean over seeds; band: min–max over seeds; dashed: ${TARGET}`,
    },
    data: { values: curves(estimators, runs) },
    vconcat: [
      { width: 560, height: 280, layer: [{ mark: { type: 'line', strokeWidth: 2, point: { size: 16 } }, encoding: { x, y, color } }, target] },
      {
        facet: { field: 'estimator', type: 'nominal', title: null, sort: names },
        columns: 4,
        spec: {
          width: 130,
          height: 90,
          layer: [
            {
              mark: { type: 'area', opacity: 0.25 },
              encoding: { x, y: { field: 'min', type: 'quantitative', title: 'eval success' }, y2: { field: 'max' }, color },
            },
            { mark: { type: 'line', strokeWidth: 1.5 }, encoding: { x, y, color } },
            target,
          ],
        },
      },
    ],
    resolve: { scale: { color: 'shared' } },
  });
}

const f = (x: number | undefined, d = 2) => (x !== undefined && Number.isFinite(x) ? x.toFixed(d) : 'n/a');
const LABELS: Record<string, string> = {
  'grpo@group': 'grpo@group (episode-level)',
  'grpo@group-agent-episode': 'grpo@group-agent-episode (per role)',
};
const label = (e: string) => LABELS[e] ?? e;

async function main() {
  const t0 = performance.now();
  const json = path.join(RESULTS, `${BASE}.json`);
  const stored = values.merge ? readStored(json) : undefined;
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', '1'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  const client = await EngineClient.connect(engine.listening.address);
  const runs: Run[] = [];
  console.log(`# ${COMMAND}`);
  console.log(`# ${machineLine()}`);
  try {
    const queue = ESTIMATORS.flatMap((estimator) => SEEDS.map((seed) => ({ estimator, seed })));
    const worker = async () => {
      for (let job = queue.shift(); job; job = queue.shift()) {
        const [name, scope] = job.estimator.split('@');
        const a = performance.now();
        const r = await trainInProcess(client, {
          team: TEAM,
          teamOptions: TEAM_OPTIONS,
          seed: job.seed,
          groupsPerStep: GROUPS,
          runId: `credit-${job.estimator.replace(/[^A-Za-z0-9._-]/g, '_')}-s${job.seed}-${Date.now().toString(36)}`,
          steps: STEPS,
          evalEvery: EVAL_EVERY,
          evalTasks: EVAL_TASKS,
          optimizer: { all: { ...OPTIMIZER, estimator: { ...(OPTIMIZER.estimator as object), name: name!, ...(scope ? { scope: scope as Scope } : {}) } } },
        });
        const evals = r.evals.map((e) => ({ step: e.step, success: e.success }));
        const run: Run = {
          estimator: job.estimator,
          seed: job.seed,
          evals,
          toTarget: evals.find((e) => e.success >= TARGET)?.step ?? null,
          final: evals.at(-1)!.success,
          wallSeconds: (performance.now() - a) / 1000,
        };
        runs.push(run);
        console.log(
          `  ${job.estimator} seed ${job.seed}: to ${TARGET} at ${run.toTarget ?? '—'}, evals ${evals.map((e) => `${e.step}:${f(e.success)}`).join(' ')} (${f(run.wallSeconds, 0)} s)`,
        );
      }
    };
    await Promise.all(Array.from({ length: PARALLEL }, worker));
  } finally {
    client.close();
    engine.child.kill('SIGTERM');
  }

  const sweep: Sweep = {
    command: COMMAND,
    date: new Date().toISOString(),
    node: process.version,
    cores: os.cpus().length,
    seconds: Math.round((performance.now() - t0) / 1000),
    estimators: ESTIMATORS,
  };
  const all = stored ? merged(stored, sweep, runs) : { sweeps: [sweep], runs };
  // The default sweep's order, then any other in order of appearance (stored first); runs in table order.
  const rank = (e: string) => (DEFAULT_ESTIMATORS.includes(e) ? DEFAULT_ESTIMATORS.indexOf(e) : DEFAULT_ESTIMATORS.length);
  const estimators = [...new Set([...(stored?.runs ?? []).map((r) => r.estimator), ...ESTIMATORS])].sort((a, b) => rank(a) - rank(b));
  all.runs.sort((a, b) => estimators.indexOf(a.estimator) - estimators.indexOf(b.estimator) || a.seed - b.seed);

  const lines: string[] = [];
  const out = (l = '') => {
    lines.push(l);
    console.log(l);
  };
  for (const w of all.sweeps) {
    out(`# ${w.command}`);
    out(`# ${w.date}, node ${w.node}, ${w.cores} cores; sweep took ${w.seconds} s; runs of ${w.estimators.join(', ')}`);
  }
  out();
  out(
    `${TEAM}${JSON.stringify(TEAM_OPTIONS) === '{}' ? '' : ` (team options ${JSON.stringify(TEAM_OPTIONS)})`}${JSON.stringify(OPTIMIZER) === '{}' ? '' : ` (optimizer ${JSON.stringify(OPTIMIZER)})`}: ${STEPS} steps x ${GROUPS} groups x 8 episodes, greedy eval every ${EVAL_EVERY} steps on ${EVAL_TASKS} held-out tasks, seeds ${SEEDS[0]}–${SEEDS.at(-1)}.`,
  );
  out(`Steps to ${TARGET}: first eval step with success ≥ ${TARGET}; mean ± std (sample) over the seeds that reached it.`);
  out();
  out(`| estimator | reached ${TARGET} | steps to ${TARGET} (mean ± std) | min–max | final eval (mean) |`);
  out('|---|---|---|---|---|');
  for (const e of estimators) {
    const mine = all.runs.filter((r) => r.estimator === e);
    const hit = mine.map((r) => r.toTarget).filter((s): s is number => s !== null);
    const m = hit.reduce((a, b) => a + b, 0) / hit.length;
    const sd = hit.length > 1 ? Math.sqrt(hit.reduce((a, b) => a + (b - m) ** 2, 0) / (hit.length - 1)) : NaN;
    const final = mine.reduce((a, r) => a + r.final, 0) / mine.length;
    out(
      `| ${label(e)} | ${hit.length}/${mine.length} | ${hit.length ? `${f(m, 1)} ± ${f(sd, 1)}` : '—'} | ${hit.length ? `${Math.min(...hit)}–${Math.max(...hit)}` : '—'} | ${f(final, 3)} |`,
    );
  }
  if (values['no-write']) return;
  fs.mkdirSync(RESULTS, { recursive: true });
  const { svg, png } = await plot(estimators, all.runs);
  fs.writeFileSync(path.join(RESULTS, `${BASE}.svg`), svg);
  fs.writeFileSync(path.join(RESULTS, `${BASE}.png`), png);
  out();
  out(`Curves: [${BASE}.png](${BASE}.png) (and .svg).`);
  fs.writeFileSync(path.join(RESULTS, `${BASE}.md`), lines.join('\n') + '\n');
  fs.writeFileSync(json, JSON.stringify(all, null, 1) + '\n');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
