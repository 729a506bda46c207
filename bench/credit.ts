/**
 * Credit sweep (issue #30): the `chain` team (four turns per episode, sparse
 * final reward plus a per-turn one) trained with episode-level GRPO and with
 * each turn-level estimator, over seeds, with the in-process loop
 * (bench/lib/inprocess.ts: the same plan / rollout / reward / advantage /
 * update code as a Troupe batched run, without Temporal or Postgres).
 *
 * Per estimator: the first eval step at which greedy success reached 0.9 (mean
 * and spread over the seeds that reached it, and how many did), and the final
 * eval. Episode-level GRPO is `grpo` in scope `group`: every turn of an episode
 * gets the episode's average score, so all its tokens share one advantage.
 * `grpo` in its default scope (each turn scored on its own, per-turn rewards
 * included) is listed too. Not a test; prints a table and writes
 * bench/results/credit.{md,json}.
 *
 *   node --import tsx bench/credit.ts [--team navigator] [--seeds 10] [--estimators grpo@group,turn-return,...]
 *        [--steps 20] [--eval-every 2] [--eval-tasks 100] [--parallel 2] [--no-write]
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { spawnEngine } from '../gpu-workers/engine-process';
import { trainInProcess } from './lib/inprocess';
import { machineLine } from './lib/cpu';

const { values } = parseArgs({
  options: {
    team: { type: 'string' },
    seeds: { type: 'string' },
    estimators: { type: 'string' },
    steps: { type: 'string' },
    'eval-every': { type: 'string' },
    'eval-tasks': { type: 'string' },
    parallel: { type: 'string' },
    'no-write': { type: 'boolean' },
  },
});
const TEAM = values.team ?? 'navigator';
const SEEDS = Array.from({ length: Number(values.seeds ?? 10) }, (_, i) => i);
/** name[@scope] */
const ESTIMATORS = (values.estimators ?? 'grpo@group,grpo,turn-return,gigpo,at-grpo,salt,hgpo').split(',');
const STEPS = Number(values.steps ?? 20);
const EVAL_EVERY = Number(values['eval-every'] ?? 2);
const EVAL_TASKS = Number(values['eval-tasks'] ?? 100);
const PARALLEL = Number(values.parallel ?? 2);
const TARGET = 0.9;
const COMMAND = `node --import tsx bench/credit.ts${process.argv.length > 2 ? ' ' + process.argv.slice(2).join(' ') : ''}`;
const RESULTS = path.join(__dirname, 'results');

interface Run {
  estimator: string;
  seed: number;
  evals: Array<{ step: number; success: number }>;
  toTarget: number | null;
  final: number;
  wallSeconds: number;
}

const f = (x: number | undefined, d = 2) => (x !== undefined && Number.isFinite(x) ? x.toFixed(d) : 'n/a');
const label = (e: string) => (e === 'grpo@group' ? 'grpo@group (episode-level)' : e);

async function main() {
  const t0 = performance.now();
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', '1'], { quiet: true });
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
          seed: job.seed,
          runId: `credit-${job.estimator.replace(/[^A-Za-z0-9._-]/g, '_')}-s${job.seed}-${Date.now().toString(36)}`,
          steps: STEPS,
          evalEvery: EVAL_EVERY,
          evalTasks: EVAL_TASKS,
          optimizer: { all: { estimator: { name: name!, ...(scope ? { scope: scope as 'group' } : {}) } } },
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

  const lines: string[] = [];
  const out = (l = '') => {
    lines.push(l);
    console.log(l);
  };
  out(`# ${COMMAND}`);
  out(`# ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores; sweep took ${f((performance.now() - t0) / 1000, 0)} s`);
  out();
  out(
    `${TEAM}: ${STEPS} steps x 16 groups x 8 episodes, greedy eval every ${EVAL_EVERY} steps on ${EVAL_TASKS} held-out tasks, seeds ${SEEDS[0]}–${SEEDS.at(-1)}.`,
  );
  out(`Steps to ${TARGET}: first eval step with success ≥ ${TARGET}; mean ± std (sample) over the seeds that reached it.`);
  out();
  out(`| estimator | reached ${TARGET} | steps to ${TARGET} (mean ± std) | min–max | final eval (mean) |`);
  out('|---|---|---|---|---|');
  for (const e of ESTIMATORS) {
    const mine = runs.filter((r) => r.estimator === e);
    const hit = mine.map((r) => r.toTarget).filter((s): s is number => s !== null);
    const m = hit.reduce((a, b) => a + b, 0) / hit.length;
    const sd = hit.length > 1 ? Math.sqrt(hit.reduce((a, b) => a + (b - m) ** 2, 0) / (hit.length - 1)) : NaN;
    const final = mine.reduce((a, r) => a + r.final, 0) / mine.length;
    out(
      `| ${label(e)} | ${hit.length}/${mine.length} | ${hit.length ? `${f(m, 1)} ± ${f(sd, 1)}` : '—'} | ${hit.length ? `${Math.min(...hit)}–${Math.max(...hit)}` : '—'} | ${f(final, 3)} |`,
    );
  }
  if (!values['no-write']) {
    fs.mkdirSync(RESULTS, { recursive: true });
    fs.writeFileSync(path.join(RESULTS, 'credit.md'), lines.join('\n') + '\n');
    fs.writeFileSync(path.join(RESULTS, 'credit.json'), JSON.stringify({ command: COMMAND, runs }, null, 1) + '\n');
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
