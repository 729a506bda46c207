/**
 * Asynchronous RL benchmark: synchronous (k = 0) versus staleness k, interleaved
 * (seed by seed, every k in turn) on one bench stack. Prints numbers; not a test.
 *
 *   node --import tsx bench/staleness.ts [--ks 0,1,2] [--split-ks 1] [--partial-ks 1] [--partial-rollouts '{"overProvision":1.5}']
 *                                        [--seeds 1,2,3] [--steps 8] [--groups 4] [--group-size 8]
 *                                        [--team math] [--team-options '{"policy":"transformer"}'] [--models policy]
 *                                        [--eval-every 0] [--eval-tasks 0] [--config '{"offPolicy":{...}}'] [--write [--out staleness]]
 *
 * --split-ks adds a row per k with the sampler and the trainer on separate engines: a second
 * pool worker (its own engine process, one thread) serves the queue `bench-train`, and the run
 * sets `pools: { <model>: { train: 'bench-train' } }` for each of --models, so a rollout of step
 * t + 1 samples on one engine while the update of step t runs on the other.
 * --partial-ks adds a row per k with partial rollouts (run config partialRollouts, from
 * --partial-rollouts; docs/running.md "Partial rollouts in asynchronous runs"), on one engine.
 *
 * Step time is measured from the store: (commit of the last step − commit of step 0) / (steps − 1),
 * so start-up and the initial eval are left out (evals during training are in it).
 * Eval curves: eval success at each eval step s, at the wall-clock time the version it
 * measured was committed (the commit of step s − 1; step 0: the initial version, time 0).
 * With --write, bench/results/<out>.{md,png,svg} (--out, default staleness) are (re)written
 * after every run, so a cut-short sweep still leaves its finished runs.
 */
import { parseArgs } from 'node:util';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startHarness, startPool, type Harness } from '../testing/stack';
import { renderVegaLite } from '../activities/store/plot';
import { runTroupe } from './lib/troupe';

const { values } = parseArgs({
  options: {
    ks: { type: 'string', default: '0,1,2' },
    'split-ks': { type: 'string', default: '' },
    'partial-ks': { type: 'string', default: '' },
    'partial-rollouts': { type: 'string', default: '{}' },
    models: { type: 'string', default: 'policy' },
    seeds: { type: 'string', default: '1,2,3' },
    steps: { type: 'string', default: '8' },
    groups: { type: 'string', default: '4' },
    'group-size': { type: 'string', default: '8' },
    team: { type: 'string', default: 'math' },
    'team-options': { type: 'string', default: '{}' },
    'eval-every': { type: 'string', default: '0' },
    'eval-tasks': { type: 'string', default: '0' },
    config: { type: 'string', default: '{}' },
    write: { type: 'boolean', default: false },
    out: { type: 'string', default: 'staleness' },
  },
});
/** A row of the table: staleness k, on one engine or with the trainer on its own (split), or with partial rollouts. */
interface Layout {
  k: number;
  split: boolean;
  partial: boolean;
}
const listed = (flag: 'ks' | 'split-ks' | 'partial-ks') =>
  values[flag]!.split(',')
    .filter(Boolean)
    .map((k) => Number(k));
const layouts: Layout[] = [
  ...listed('ks').map((k) => ({ k, split: false, partial: false })),
  ...listed('split-ks').map((k) => ({ k, split: true, partial: false })),
  ...listed('partial-ks').map((k) => ({ k, split: false, partial: true })),
];
const label = (l: Layout) => `k = ${l.k}${l.split ? ', split' : ''}${l.partial ? ', partial' : ''}`;
const partialRollouts = JSON.parse(values['partial-rollouts']!) as Record<string, unknown>;
const TRAIN_QUEUE = 'bench-train';
const seeds = values.seeds!.split(',').map(Number);
const steps = Number(values.steps);
const evalEvery = Number(values['eval-every']);
const teamOptions = JSON.parse(values['team-options']!) as Record<string, unknown>;
/** More run config for every run (e.g. '{"offPolicy":{"stepSize":"constant"}}'). */
const extraConfig = JSON.parse(values.config ?? '{}') as Record<string, unknown>;
const RESULTS = path.join(__dirname, 'results');
const COMMAND = `node --import tsx bench/staleness.ts --team ${values.team} --team-options '${values['team-options']}' --ks ${values.ks}${values['split-ks'] ? ` --split-ks ${values['split-ks']} --models ${values.models}` : ''}${values['partial-ks'] ? ` --partial-ks ${values['partial-ks']} --partial-rollouts '${values['partial-rollouts']}'` : ''} --seeds ${seeds} --steps ${steps} --groups ${values.groups} --group-size ${values['group-size']} --eval-every ${evalEvery} --eval-tasks ${values['eval-tasks']}${values.config === '{}' ? '' : ` --config '${values.config}'`}${values.write ? ` --write --out ${values.out}` : ''}`;

interface Run {
  layout: string;
  k: number;
  seed: number;
  secondsPerStep: number;
  /** Episodes the updates trained on, mean per step (partial rollouts: the whole groups, at least minFinished). */
  episodesPerStep: number;
  /** initial version to the last step's commit, seconds */
  wallSeconds: number;
  evals: Array<{ step: number; seconds: number; success: number }>;
  /** 1-, 5- and 15-minute load averages when the run ended */
  load: number[];
}

/** Commit time of each step's versions (the latest over models), seconds after the initial version. */
async function commitTimes(h: Harness, runId: string): Promise<Map<number, number>> {
  const rows = await h.db.sql`SELECT step, max(extract(epoch FROM created_at)::float8) AS at FROM versions WHERE run_id = ${runId} GROUP BY step ORDER BY step`;
  const start = rows[0]!.at as number;
  return new Map(rows.map((r) => [r.step as number, (r.at as number) - start]));
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const f = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '-');

/** Mean over seeds of each eval step, per k: success and seconds (the thick lines). */
function meanCurves(runs: Run[]) {
  return layouts.map(label).flatMap((k) => {
    const mine = runs.filter((r) => r.layout === k);
    const evalSteps = [...new Set(mine.flatMap((r) => r.evals.map((e) => e.step)))].sort((a, b) => a - b);
    return evalSteps.map((step) => {
      const at = mine.flatMap((r) => r.evals.filter((e) => e.step === step));
      return {
        k,
        step,
        seconds: mean(at.map((e) => e.seconds)),
        success: mean(at.map((e) => e.success)),
        min: Math.min(...at.map((e) => e.success)),
        max: Math.max(...at.map((e) => e.success)),
        n: at.length,
      };
    });
  });
}

function report(runs: Run[], startLoad: number[]): string[] {
  const lines = [
    `# ${COMMAND}`,
    `# ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}); load average at start ${startLoad.map((x) => x.toFixed(1)).join(' / ')}`,
    '',
  ];
  const sync = mean(runs.filter((r) => r.layout === label({ k: 0, split: false, partial: false })).map((r) => 1 / r.secondsPerStep));
  lines.push(
    '| layout | seeds | s/step (mean) | steps/s vs k=0 | episodes trained/step (mean) | wall to last commit, s (mean) | final eval (mean, min–max) |',
    '|---|---|---|---|---|---|---|',
  );
  for (const k of layouts.map(label)) {
    const mine = runs.filter((r) => r.layout === k);
    if (mine.length === 0) continue;
    const finals = mine.map((r) => r.evals.at(-1)?.success ?? NaN);
    lines.push(
      `| ${k} | ${mine.length} | ${f(mean(mine.map((r) => r.secondsPerStep)), 2)} | ${f(mean(mine.map((r) => 1 / r.secondsPerStep)) / sync, 2)} | ${f(mean(mine.map((r) => r.episodesPerStep)), 1)} | ${f(mean(mine.map((r) => r.wallSeconds)), 0)} | ${f(mean(finals))} (${f(Math.min(...finals))}–${f(Math.max(...finals))}) |`,
    );
  }
  const curves = meanCurves(runs);
  const evalSteps = [...new Set(curves.map((c) => c.step))].sort((a, b) => a - b);
  if (evalSteps.length > 0) {
    lines.push('', 'Eval success per eval step, mean over seeds (min–max) @ mean seconds since the initial version:', '');
    lines.push(`| layout | ${evalSteps.map((s) => `step ${s}`).join(' | ')} |`, `|---|${evalSteps.map(() => '---|').join('')}`);
    for (const k of layouts.map(label)) {
      const mine = curves.filter((c) => c.k === k);
      if (mine.length === 0) continue;
      lines.push(
        `| ${k} | ${evalSteps
          .map((s) => mine.find((c) => c.step === s))
          .map((c) => (c ? `${f(c.success, 2)} (${f(c.min, 2)}–${f(c.max, 2)}) @ ${f(c.seconds, 0)} s` : '-'))
          .join(' | ')} |`,
      );
    }
  }
  lines.push(
    '',
    'Per run (in the order run; load average 1/5/15 min when it ended):',
    '',
    '| seed | layout | s/step | wall, s | evals (step: success @ s) | load |',
    '|---|---|---|---|---|---|',
  );
  for (const r of runs)
    lines.push(
      `| ${r.seed} | ${r.layout} | ${f(r.secondsPerStep, 2)} | ${f(r.wallSeconds, 0)} | ${r.evals.map((e) => `${e.step}: ${f(e.success, 2)} @ ${f(e.seconds, 0)}`).join(', ')} | ${r.load.map((x) => x.toFixed(1)).join(' / ')} |`,
    );
  return lines;
}

async function plot(runs: Run[]): Promise<{ svg: string; png: Uint8Array }> {
  const perSeed = runs.flatMap((r) => r.evals.map((e) => ({ k: r.layout, seed: r.seed, ...e })));
  const means = meanCurves(runs);
  const color = { field: 'k', type: 'nominal', title: null, legend: { orient: 'top' } };
  const y = { field: 'success', type: 'quantitative', title: 'eval success', scale: { domain: [0, 1] } };
  const panel = (x: string, title: string, axis: string) => ({
    title,
    width: 320,
    height: 200,
    layer: [
      {
        data: { values: perSeed },
        mark: { type: 'line', opacity: 0.35, strokeWidth: 1, point: { size: 12 } },
        encoding: { x: { field: x, type: 'quantitative', title: axis }, y, color, detail: { field: 'seed' } },
      },
      { data: { values: means }, mark: { type: 'line', strokeWidth: 2.5 }, encoding: { x: { field: x, type: 'quantitative', title: axis }, y, color } },
    ],
  });
  return renderVegaLite({
    title: {
      text: `Staleness k${layouts.some((l) => l.split) ? ' (split: trainer on its own engine)' : ''}${layouts.some((l) => l.partial) ? ' (partial: partial rollouts)' : ''} on ${values.team}${values['team-options'] === '{}' ? '' : ` ${values['team-options']}`}: held-out eval success (greedy), ${new Set(runs.map((r) => r.seed)).size} seeds interleaved`,
      subtitle: 'thin: one seed; thick: mean over seeds (on the right at the mean time of each eval step)',
    },
    hconcat: [panel('step', 'per training step', 'step'), panel('seconds', 'per wall-clock second', 'seconds since the initial version was committed')],
    resolve: { scale: { color: 'shared' } },
  });
}

/**
 * SIGINT/SIGTERM end the bench and everything it started. Temporal's runtime answers them by
 * shutting this process's workers down and nothing more, so without this the run in flight
 * waited forever for its result and the dev server outlived the bench. Here the run in flight
 * is terminated, so main's cleanup (workers, engines, database, dev server) runs and the
 * process exits; a second signal ends it at once.
 */
const stop: { signal?: NodeJS.Signals; runId?: string; h?: Harness } = {};
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    stop.signal ??= signal;
    console.error(`# ${signal}: stopping the run in flight and the bench stack`);
    if (stop.h && stop.runId)
      void stop.h.env.client.workflow
        .getHandle(stop.runId)
        .terminate(`bench stopped by ${signal}`)
        .catch(() => undefined);
  });
}

async function main() {
  const startLoad = os.loadavg();
  console.log(`# ${COMMAND}; ${os.cpus().length} cores; load average ${startLoad.map((x) => x.toFixed(1)).join(' / ')}`);
  const h = (stop.h = await startHarness());
  // The trainer's own pool worker and engine, for the split rows.
  const trainer = layouts.some((l) => l.split) ? await startPool(h.env, h.db, { poolTaskQueue: TRAIN_QUEUE }) : undefined;
  const runs: Run[] = [];
  try {
    for (const seed of seeds) {
      for (const layout of layouts) {
        if (stop.signal) throw new Error(`stopped by ${stop.signal}`);
        const { k, split, partial } = layout;
        const runId = (stop.runId = `bench-stale-k${k}${split ? '-split' : ''}${partial ? '-partial' : ''}-s${seed}`);
        await runTroupe(h, {
          ...extraConfig,
          runId,
          team: values.team!,
          teamOptions,
          steps,
          groupsPerStep: Number(values.groups),
          groupSize: Number(values['group-size']),
          evalEvery,
          evalTasks: Number(values['eval-tasks']),
          seed,
          staleness: k,
          ...(split ? { pools: Object.fromEntries(values.models!.split(',').map((m) => [m, { train: TRAIN_QUEUE }])) } : {}),
          ...(partial ? { partialRollouts } : {}),
        });
        const at = await commitTimes(h, runId);
        const evalRows = await h.db
          .sql`SELECT step, value FROM metrics WHERE run_id = ${runId} AND kind = 'eval' AND scope = 'team' AND name = 'success' ORDER BY step`;
        const [trained] = await h.db
          .sql`SELECT avg(value)::float8 AS n FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND scope = 'team' AND name = 'episodes'`;
        const evals = evalRows.map((e) => ({ step: e.step as number, seconds: at.get((e.step as number) - 1)!, success: e.value as number }));
        const run = {
          layout: label(layout),
          k,
          seed,
          secondsPerStep: (at.get(steps - 1)! - at.get(0)!) / Math.max(1, steps - 1),
          episodesPerStep: trained!.n as number,
          wallSeconds: at.get(steps - 1)!,
          evals,
          load: os.loadavg(),
        };
        runs.push(run);
        console.log(
          `${label(layout)} seed=${seed}: ${f(run.secondsPerStep, 2)} s/step, ${f(run.episodesPerStep, 1)} episodes/step, evals ${evals.map((e) => `${e.step}: ${f(e.success, 2)} @ ${f(e.seconds, 0)} s`).join(', ')}; load ${run.load.map((x) => x.toFixed(1)).join(' / ')}`,
        );
        if (values.write) {
          fs.mkdirSync(RESULTS, { recursive: true });
          const { svg, png } = await plot(runs);
          fs.writeFileSync(path.join(RESULTS, `${values.out}.svg`), svg);
          fs.writeFileSync(path.join(RESULTS, `${values.out}.png`), png);
          fs.writeFileSync(
            path.join(RESULTS, `${values.out}.md`),
            [...report(runs, startLoad), '', `Curves: [${values.out}.png](${values.out}.png) (and .svg).`, ''].join('\n'),
          );
        }
      }
    }
  } finally {
    await trainer?.shutdown();
    await h.shutdown();
  }
  console.log('\n' + report(runs, startLoad).join('\n'));
}

main().catch((e) => {
  if (stop.signal) console.error(`# stopped by ${stop.signal}${values.write ? `; the finished runs are in bench/results/${values.out}.md` : ''}`);
  else console.error(e);
  process.exit(stop.signal ? 128 + os.constants.signals[stop.signal] : 1);
});
