/**
 * Dr. MAS: per-agent advantage normalization versus the global baseline.
 *
 * The bundled `math` team with one model per role (`teamOptions.models:
 * 'separate'`) and the verifier's reward at 10x the solver's
 * (`verifierScale: 10`), GRPO, trained by Troupe (batched rollouts) with
 *
 *   per-agent  `estimator.scope: 'group-agent'`: statistics per (task group, agent) (Dr. MAS; the default)
 *   global     `estimator.scope: 'group'`: every turn carries its episode's average
 *              score over all agents, statistics per task group (the baseline Dr. MAS compares with)
 *
 * for several seeds each, everything else equal, interleaved seed by seed.
 * Two checks run next to them with the in-process loop (bench/lib/inprocess.ts,
 * no Temporal or Postgres): per-agent must give the Troupe run's gradient norms
 * bit for bit, and the global baseline computed independently of
 * buildStepBatch's grouping (every turn relabelled to one pseudo-agent) must
 * give the Troupe `scope: 'group'` run's.
 *
 * Reports per agent the gradient-norm spikes — steps whose norm exceeds 3x the
 * run's median, and max/median, the median taken over the steps that trained
 * (a converged run has many steps with no learning signal and a gradient of
 * exactly 0, which would make the median 0) — the final eval success, and the
 * learning curves of both settings. Not a test.
 *
 *   node --import tsx bench/drmas.ts [--seeds 5] [--steps 30] [--eval-every 5] [--eval-tasks 0] [--parallel 2] [--no-write]
 *
 * Writes bench/results/drmas.{md,json,svg,png}.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { loadTeam } from '../agents/team-registry';
import type { RunConfigInput } from '../schema/run-config';
import { startHarness, type Harness } from '../testing/stack';
import type { RunSummary } from '../workflows/training-run';
import { trainInProcess, type InProcessStep } from './lib/inprocess';
import { renderVegaLite } from '../activities/store/plot';
import { machineLine } from './lib/cpu';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string' },
    steps: { type: 'string' },
    'eval-every': { type: 'string' },
    'eval-tasks': { type: 'string' },
    parallel: { type: 'string' },
    'no-write': { type: 'boolean' },
  },
});
const SEEDS = Number(values.seeds ?? 5);
const STEPS = Number(values.steps ?? 30);
const EVAL_EVERY = Number(values['eval-every'] ?? 5);
const EVAL_TASKS = Number(values['eval-tasks'] ?? 0);
const PARALLEL = Number(values.parallel ?? 2);
const COMMAND = `node --import tsx bench/drmas.ts${process.argv.slice(2).length ? ' ' + process.argv.slice(2).join(' ') : ''}`;
const RESULTS = path.join(__dirname, 'results');
const SETTINGS = ['per-agent', 'global'] as const;
type Setting = (typeof SETTINGS)[number];
const SCOPE: Record<Setting, 'group-agent' | 'group'> = { 'per-agent': 'group-agent', global: 'group' };
const LABEL: Record<Setting, string> = { 'per-agent': "per-agent (Dr. MAS), scope 'group-agent'", global: "global baseline, scope 'group'" };
type Runner = 'troupe' | 'inprocess';
const AGENTS = ['solver', 'verifier'];
const TEAM_OPTIONS = { models: 'separate', verifierScale: 10 };

interface Run {
  setting: Setting;
  runner: Runner;
  seed: number;
  runId: string;
  wallSeconds: number;
  /** per agent, per step: gradient norm of the agent's model (before clipping), mean reward (sum of components) */
  gradNorm: Record<string, number[]>;
  reward: Record<string, number[]>;
  evals: Array<{ step: number; success: number }>;
  finalEval: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length === 0 ? NaN : s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');

function config(setting: Setting, seed: number, runId: string): RunConfigInput & { runId: string } {
  return {
    team: 'math',
    teamOptions: TEAM_OPTIONS,
    runId,
    seed,
    steps: STEPS,
    rollout: 'batched',
    evalEvery: EVAL_EVERY,
    evalTasks: EVAL_TASKS,
    optimizer: { all: { estimator: { name: 'grpo', scope: SCOPE[setting] } } },
  };
}

async function train(h: Harness, setting: Setting, seed: number, runner: Runner): Promise<Run> {
  const runId = `drmas-${setting}-${runner}-s${seed}-${Date.now().toString(36)}`;
  const t0 = performance.now();
  if (runner === 'inprocess') {
    const team = loadTeam('math', TEAM_OPTIONS);
    const r = await trainInProcess(h.pool.getClient(), config(setting, seed, runId), { advantages: setting === 'global' ? 'global-joint' : 'troupe' });
    const per = (fn: (st: InProcessStep, agent: string) => number) => Object.fromEntries(AGENTS.map((a) => [a, r.steps.map((st) => fn(st, a))]));
    return {
      setting,
      runner,
      seed,
      runId,
      wallSeconds: (performance.now() - t0) / 1000,
      gradNorm: per((st, a) => st.gradNorm[team.agents[a]!.model] ?? 0),
      reward: per((st, a) => Object.values(st.rewards[a] ?? {}).reduce((x, y) => x + y, 0)),
      evals: r.evals.map((e) => ({ step: e.step, success: e.success })),
      finalEval: r.evals.at(-1)!.success,
    };
  }
  const handle = await h.env.client.workflow.start('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [config(setting, seed, runId)] });
  const summary = (await handle.result()) as RunSummary;
  const wallSeconds = (performance.now() - t0) / 1000;
  const rows = await h.db.sql`SELECT step, kind, scope, name, value FROM metrics WHERE run_id = ${runId} ORDER BY step`;
  const series = (agent: string, pick: (name: string) => boolean) => {
    const out: number[] = Array.from({ length: STEPS }, () => 0);
    for (const r of rows) if (r.kind === 'train' && r.scope === agent && pick(r.name) && r.step < STEPS) out[r.step] += r.value;
    return out;
  };
  const gradNorm = Object.fromEntries(AGENTS.map((a) => [a, series(a, (n) => n === 'gradNorm')]));
  const reward = Object.fromEntries(AGENTS.map((a) => [a, series(a, (n) => n.startsWith('reward.'))]));
  const evals = rows
    .filter((r) => r.kind === 'eval' && r.scope === 'team' && r.name === 'success')
    .map((r) => ({ step: r.step as number, success: r.value as number }));
  return { setting, runner, seed, runId, wallSeconds, gradNorm, reward, evals, finalEval: summary.finalEval?.success ?? NaN };
}

/** Spikes of one gradient-norm series, relative to the median over the steps that trained (norm > 0). */
function spikes(xs: number[]) {
  const trained = xs.filter((x) => x > 0);
  const m = median(trained);
  return { trained: trained.length, count: trained.filter((x) => x > 3 * m).length, max: Math.max(...xs), median: m, maxOverMedian: Math.max(...xs) / m };
}

/** Largest relative difference of two runs' gradient norms over every step and agent (0: bit-identical). */
function gradDiff(a: Run, b: Run): number {
  let worst = 0;
  for (const ag of AGENTS) a.gradNorm[ag]!.forEach((x, i) => (worst = Math.max(worst, Math.abs(x - b.gradNorm[ag]![i]!) / Math.max(Math.abs(x), 1e-12))));
  return worst;
}

async function main() {
  console.log(`# ${COMMAND}`);
  console.log(
    `# math team, teamOptions ${JSON.stringify(TEAM_OPTIONS)}, GRPO, ${STEPS} steps x 16 groups x 8 episodes, eval every ${EVAL_EVERY} steps on ${EVAL_TASKS || 'all'} held-out tasks, seeds 0..${SEEDS - 1}, ${PARALLEL} runs at a time`,
  );
  console.log(`# ${machineLine()}`);
  const t0 = performance.now();
  const h = await startHarness();
  const runs: Run[] = [];
  try {
    // Interleaved seed by seed; the in-process runs are the checks.
    const plan: Array<{ setting: Setting; runner: Runner }> = [
      { setting: 'per-agent', runner: 'troupe' },
      { setting: 'global', runner: 'troupe' },
      { setting: 'per-agent', runner: 'inprocess' },
      { setting: 'global', runner: 'inprocess' },
    ];
    const queue = Array.from({ length: SEEDS }, (_, seed) => plan.map((p) => ({ ...p, seed }))).flat();
    const worker = async () => {
      for (let job = queue.shift(); job; job = queue.shift()) {
        const r = await train(h, job.setting, job.seed, job.runner);
        runs.push(r);
        const s = AGENTS.map((a) => `${a} spikes ${spikes(r.gradNorm[a]!).count} max/med ${f(spikes(r.gradNorm[a]!).maxOverMedian)}`).join(', ');
        console.log(`  ${LABEL[r.setting].padEnd(40)} ${r.runner.padEnd(9)} seed ${r.seed}: final eval ${f(r.finalEval, 3)}, ${s} (${f(r.wallSeconds, 0)} s)`);
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, PARALLEL) }, worker));
  } finally {
    await h.shutdown();
  }
  runs.sort((a, b) => SETTINGS.indexOf(a.setting) - SETTINGS.indexOf(b.setting) || a.runner.localeCompare(b.runner) || a.seed - b.seed);
  await report(runs, (performance.now() - t0) / 1000);
}

/** The Vega-Lite spec of the learning curves: eval success, and per agent train reward and gradient norm. */
function curvesSpec(shown: Run[]) {
  const evalRows = shown.flatMap((r) => r.evals.map((e) => ({ setting: LABEL[r.setting], seed: r.seed, step: e.step, value: e.success })));
  const trainRows = shown.flatMap((r) =>
    AGENTS.flatMap((agent) => r.reward[agent]!.map((value, s) => ({ setting: LABEL[r.setting], seed: r.seed, agent, step: s + 1, value }))),
  );
  const gradRows = shown.flatMap((r) =>
    AGENTS.flatMap((agent) => r.gradNorm[agent]!.map((value, s) => ({ setting: LABEL[r.setting], seed: r.seed, agent, step: s + 1, value }))),
  );
  const color = {
    field: 'setting',
    type: 'nominal',
    title: null,
    legend: { orient: 'top', labelLimit: 400 },
    scale: { domain: SETTINGS.map((s) => LABEL[s]), range: ['#1f77b4', '#d62728'] },
  };
  const band = (title: string, yTitle: string, rows: unknown[], extra: Record<string, unknown> = {}) => ({
    title,
    width: 300,
    height: 160,
    data: { values: rows },
    layer: [
      {
        mark: { type: 'line', opacity: 0.3, strokeWidth: 1 },
        encoding: {
          x: { field: 'step', type: 'quantitative' },
          y: { field: 'value', type: 'quantitative', title: yTitle, ...extra },
          color,
          detail: { field: 'seed' },
        },
      },
      {
        mark: { type: 'line', strokeWidth: 2.5 },
        encoding: {
          x: { field: 'step', type: 'quantitative' },
          y: { aggregate: 'mean', field: 'value', type: 'quantitative', title: yTitle, ...extra },
          color,
        },
      },
    ],
  });
  const perAgent = (agent: string, title: string, rows: Array<{ agent: string }>, yTitle: string) =>
    band(
      `${agent}: ${title}`,
      yTitle,
      rows.filter((r) => r.agent === agent),
    );
  return {
    title: { text: `Dr. MAS on math: one model per role, verifier reward x10, ${SEEDS} seeds per setting`, subtitle: 'thin: one seed; thick: mean over seeds' },
    vconcat: [
      { hconcat: [band('eval success on held-out tasks (greedy)', 'success', evalRows, { scale: { domain: [0, 1] } })] },
      { hconcat: AGENTS.map((a) => perAgent(a, 'train reward (mean per turn)', trainRows, 'reward')) },
      { hconcat: AGENTS.map((a) => perAgent(a, 'gradient norm before clipping', gradRows, 'grad norm')) },
    ],
    resolve: { scale: { color: 'shared' } },
  };
}

async function report(runs: Run[], seconds: number) {
  const lines: string[] = [];
  const out = (l = '') => {
    lines.push(l);
    console.log(l);
  };
  out(`# ${COMMAND}`);
  out(`# ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores; bench took ${f(seconds, 0)} s`);
  out();
  out(
    `math team, one model per role (\`teamOptions: ${JSON.stringify(TEAM_OPTIONS)}\`), GRPO, Troupe batched rollouts; ${STEPS} steps x 16 groups x 8 episodes; greedy eval on ${EVAL_TASKS || 'all'} held-out tasks every ${EVAL_EVERY} steps. Everything but \`estimator.scope\` equal.`,
  );
  out(
    'Spikes: steps whose gradient norm (before clipping; the update clips at 1.0) exceeds 3x the median over the run\'s steps that trained (norm > 0); "trained" = those steps. A step with no learning signal in any group has a norm of exactly 0.',
  );
  out();
  out('## Per seed');
  out();
  out(
    '| setting | seed | solver: trained steps, spikes, max/median (max) | verifier: trained steps, spikes, max/median (max) | final eval success | eval success at steps 0,5,10,... |',
  );
  out('|---|---|---|---|---|---|');
  const shown = runs.filter((r) => r.runner === 'troupe');
  for (const r of shown) {
    const cell = (a: string) => {
      const s = spikes(r.gradNorm[a]!);
      return `${s.trained}, ${s.count}, ${f(s.maxOverMedian, 1)} (${f(s.max, 2)})`;
    };
    out(`| ${LABEL[r.setting]} | ${r.seed} | ${cell('solver')} | ${cell('verifier')} | ${f(r.finalEval, 3)} | ${r.evals.map((e) => f(e.success)).join(' ')} |`);
  }
  out();
  out('## Mean over seeds');
  out();
  out(
    '| setting | seeds | solver spikes (total) | solver max/median (mean; worst) | verifier spikes (total) | verifier max/median (mean; worst) | final eval success mean (min-max) | final solver reward (mean) | final verifier reward (mean, max 10) |',
  );
  out('|---|---|---|---|---|---|---|---|---|');
  const summary: Record<string, unknown> = {};
  for (const setting of SETTINGS) {
    const mine = shown.filter((r) => r.setting === setting);
    if (mine.length === 0) continue;
    const per = (a: string) => mine.map((r) => spikes(r.gradNorm[a]!));
    const fin = mine.map((r) => r.finalEval);
    const lastReward = (a: string) => mean(mine.map((r) => mean(r.reward[a]!.slice(-5))));
    const row = {
      solverSpikes: per('solver').reduce((n, s) => n + s.count, 0),
      solverMaxOverMedian: mean(per('solver').map((s) => s.maxOverMedian)),
      solverWorst: Math.max(...per('solver').map((s) => s.maxOverMedian)),
      verifierSpikes: per('verifier').reduce((n, s) => n + s.count, 0),
      verifierMaxOverMedian: mean(per('verifier').map((s) => s.maxOverMedian)),
      verifierWorst: Math.max(...per('verifier').map((s) => s.maxOverMedian)),
      finalEvalMean: mean(fin),
      finalEvalMin: Math.min(...fin),
      finalEvalMax: Math.max(...fin),
      solverRewardLast5: lastReward('solver'),
      verifierRewardLast5: lastReward('verifier'),
    };
    summary[setting] = row;
    out(
      `| ${LABEL[setting]} | ${mine.length} | ${row.solverSpikes} | ${f(row.solverMaxOverMedian, 1)}; ${f(row.solverWorst, 1)} | ${row.verifierSpikes} | ${f(row.verifierMaxOverMedian, 1)}; ${f(row.verifierWorst, 1)} | ${f(row.finalEvalMean, 3)} (${f(row.finalEvalMin, 3)}-${f(row.finalEvalMax, 3)}) | ${f(row.solverRewardLast5)} | ${f(row.verifierRewardLast5)} |`,
    );
  }
  out();
  out('Final rewards: mean per turn over the last 5 training steps.');

  // ---- are the comparisons what they claim to be?
  out();
  out('## Checks (in-process loop, no Temporal or Postgres)');
  out();
  const pairs = (setting: Setting) =>
    runs
      .filter((r) => r.setting === setting && r.runner === 'inprocess')
      .map((x) => {
        const y = runs.find((r) => r.setting === setting && r.runner === 'troupe' && r.seed === x.seed);
        return { seed: x.seed, diff: y ? gradDiff(x, y) : NaN };
      });
  const describe = (ps: Array<{ seed: number; diff: number }>) =>
    ps.map((p) => `seed ${p.seed} ${p.diff === 0 ? 'identical' : Number.isNaN(p.diff) ? 'n/a' : `max rel diff ${p.diff.toExponential(1)}`}`).join(', ');
  const checks = { perAgent: pairs('per-agent'), global: pairs('global') };
  out(`- per-agent: in-process loop (buildStepBatch) vs the Troupe run, gradient norm of every step and model: ${describe(checks.perAgent)}.`);
  out(
    `- global: in-process loop with every turn relabelled to one pseudo-agent (so the episode average spans all agents whatever buildStepBatch groups by) vs the Troupe \`scope: 'group'\` run: ${describe(checks.global)}.`,
  );
  summary.checks = checks;

  const spec = curvesSpec(shown);
  if (values['no-write']) return;
  fs.mkdirSync(RESULTS, { recursive: true });
  const { svg, png } = await renderVegaLite(spec, 1.5);
  fs.writeFileSync(path.join(RESULTS, 'drmas.svg'), svg);
  fs.writeFileSync(path.join(RESULTS, 'drmas.png'), png);
  out();
  out('Learning curves: [drmas.png](drmas.png) (and .svg).');
  fs.writeFileSync(path.join(RESULTS, 'drmas.md'), lines.join('\n') + '\n');
  const round = (m: Record<string, number[]>) => Object.fromEntries(Object.entries(m).map(([k, xs]) => [k, xs.map((x) => Number(x.toPrecision(4)))]));
  fs.writeFileSync(
    path.join(RESULTS, 'drmas.json'),
    JSON.stringify({
      command: COMMAND,
      date: new Date().toISOString(),
      steps: STEPS,
      seeds: SEEDS,
      evalEvery: EVAL_EVERY,
      teamOptions: TEAM_OPTIONS,
      summary,
      runs: shown.map((r) => ({ ...r, gradNorm: round(r.gradNorm), reward: round(r.reward) })),
    }) + '\n',
  );
  console.log('\nwrote bench/results/drmas.{md,json,svg,png}');
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
