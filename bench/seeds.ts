/**
 * Seed sweep: each bundled team in its default run configuration (only `team`
 * and `seed` set), trained over many seeds with the in-process loop
 * (bench/lib/inprocess.ts: the same plan / rollout / reward / advantage /
 * update code as a Troupe batched run, without Temporal or Postgres; batched
 * and durable rollouts give the same episodes, so one mode is enough).
 *
 * Per seed: final and best greedy eval success, the first eval step at which
 * success reached 0.9, and per agent the mean reward (sum of components, last
 * step) and policy entropy (StepBatch.entropy) at the first and last step.
 * Not a test; prints tables and writes bench/results/<out>.{md,json} (--out, default seeds).
 *
 *   node --import tsx bench/seeds.ts [--teams math,research] [--seeds 20 | --seed-list 0,11]
 *        [--eval-every N] [--parallel 2] [--trace] [--config '{"steps":60}'] [--out seeds] [--no-write]
 *
 * --eval-every defaults to the run config's evalEvery; evals are greedy and
 * seeded apart from training, so their frequency changes no training step.
 * --trace prints every step of every run (rewards, entropy, share of groups
 * with zero advantage per agent). --config merges into each run's config
 * (for trying a change; the table in docs/performance.md is from the defaults).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { spawnEngine } from '../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';
import { loadTeam } from '../agents/team-registry';
import type { RunConfigInput } from '../schema/run-config';
import { parseRunConfig, withTeamRunDefaults } from '../schema/run-config';
import { trainInProcess, type InProcessResult, type InProcessStep } from './lib/inprocess';
import { machineLine } from './lib/cpu';

const { values } = parseArgs({
  options: {
    teams: { type: 'string' },
    seeds: { type: 'string' },
    'seed-list': { type: 'string' },
    'eval-every': { type: 'string' },
    parallel: { type: 'string' },
    threads: { type: 'string' },
    config: { type: 'string' },
    out: { type: 'string' },
    trace: { type: 'boolean' },
    'no-write': { type: 'boolean' },
  },
});
const TEAMS = (values.teams ?? 'math,research').split(',');
const SEEDS = values['seed-list'] ? values['seed-list'].split(',').map(Number) : Array.from({ length: Number(values.seeds ?? 20) }, (_, i) => i);
const EXTRA = values.config ? (JSON.parse(values.config) as Partial<RunConfigInput>) : {};
const EVAL_EVERY = values['eval-every'] === undefined ? undefined : Number(values['eval-every']);
const PARALLEL = Number(values.parallel ?? 2);
const COMMAND = `node --import tsx bench/seeds.ts${process.argv.length > 2 ? ' ' + process.argv.slice(2).join(' ') : ''}`;
const RESULTS = path.join(__dirname, 'results');
const TARGET = 0.9;
const OUT = values.out ?? 'seeds';

for (const s of SEEDS) if (!Number.isInteger(s) || s < 0) throw new Error(`--seeds/--seed-list: expected non-negative integers, got ${s}`);
if (!/^[A-Za-z0-9_-]+$/.test(OUT)) throw new Error(`--out: expected a file name (letters, digits, _ -), got ${OUT}`);
if (!(PARALLEL >= 1)) throw new Error(`--parallel: expected a number >= 1, got ${values.parallel}`);

interface Run {
  team: string;
  seed: number;
  steps: InProcessStep[];
  evals: InProcessResult['evals'];
  final: number;
  best: number;
  /** first eval step with success >= TARGET, null if none */
  toTarget: number | null;
  wallSeconds: number;
}

const f = (x: number | undefined, d = 2) => (x !== undefined && Number.isFinite(x) ? x.toFixed(d) : 'n/a');
const total = (components: Record<string, number> | undefined) => Object.values(components ?? {}).reduce((a, b) => a + b, 0);

function config(team: string, seed: number, runId: string): RunConfigInput & { runId: string } {
  return { team, seed, runId, ...EXTRA, ...(EVAL_EVERY === undefined ? {} : { evalEvery: EVAL_EVERY }) };
}

/** The three most frequent responses, with their shares ('' is an empty response). */
const top = (counts: Record<string, number> = {}) => {
  const n = Object.values(counts).reduce((a, b) => a + b, 0);
  return Object.entries(counts)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([text, k]) => `'${text}' ${f(k / n)}`)
    .join(' ');
};

function traceLine(team: string, seed: number, s: InProcessStep) {
  const agents = Object.keys(s.rewards);
  const parts = agents.map((a) => `${a} r ${f(total(s.rewards[a]))} H ${f(s.entropy[a])} zeroAdv ${f(s.zeroAdvantage[a])} says ${top(s.replies[a])}`);
  console.log(`    ${team} seed ${seed} step ${String(s.step).padStart(3)}: ${parts.join(' | ')}`);
}

async function main() {
  const lines: string[] = [];
  const out = (l = '') => {
    lines.push(l);
    console.log(l);
  };
  const t0 = performance.now();
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', String(Number(values.threads ?? 1))], {
    quiet: true,
    command: BUILT_IN_ENGINE_COMMAND,
  });
  const client = await EngineClient.connect(engine.listening.address);
  const runs: Run[] = [];
  try {
    console.log(`# ${COMMAND}`);
    console.log(`# ${machineLine()}`);
    const queue = TEAMS.flatMap((team) => SEEDS.map((seed) => ({ team, seed })));
    const worker = async () => {
      for (let job = queue.shift(); job; job = queue.shift()) {
        const { team, seed } = job;
        const runId = `seeds-${team}-s${seed}-${Date.now().toString(36)}`;
        const a = performance.now();
        const r = await trainInProcess(client, config(team, seed, runId), { onStep: values.trace ? (s) => traceLine(team, seed, s) : undefined });
        const successes = r.evals.map((e) => e.success);
        const run: Run = {
          team,
          seed,
          steps: r.steps,
          evals: r.evals,
          final: successes.at(-1)!,
          best: Math.max(...successes),
          toTarget: r.evals.find((e) => e.success >= TARGET)?.step ?? null,
          wallSeconds: (performance.now() - a) / 1000,
        };
        runs.push(run);
        if (values.trace)
          for (const e of r.evals)
            console.log(
              `    ${team} seed ${seed} eval at ${e.step}: success ${f(e.success)}, greedy: ${Object.entries(e.replies)
                .map(([a, c]) => `${a} ${top(c)}`)
                .join(' | ')}`,
            );
        console.log(
          `  ${team} seed ${seed}: final ${f(run.final, 3)}, best ${f(run.best, 3)}, evals ${r.evals.map((e) => `${e.step}:${f(e.success, 2)}`).join(' ')} (${f(run.wallSeconds, 0)} s)`,
        );
      }
    };
    await Promise.all(Array.from({ length: PARALLEL }, worker));
  } finally {
    client.close();
    engine.child.kill('SIGTERM');
  }

  out(`# ${COMMAND}`);
  out(`# ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores; sweep took ${f((performance.now() - t0) / 1000, 0)} s`);
  for (const team of TEAMS) {
    const mine = runs.filter((r) => r.team === team).sort((a, b) => a.seed - b.seed);
    if (mine.length === 0) continue;
    const input = config(team, 0, 'x');
    const c = parseRunConfig(withTeamRunDefaults(input, loadTeam(team, input.teamOptions ?? {})));
    const agents = Object.keys(mine[0]!.steps[0]?.rewards ?? {});
    out();
    out(`## ${team}`);
    out();
    out(
      `${c.steps} steps x ${c.groupsPerStep} groups x ${c.groupSize} episodes, greedy eval every ${c.evalEvery} steps on ${c.evalTasks || 'all'} held-out tasks${values.config ? `, config ${values.config}` : ''}.`,
    );
    out(`Reward: mean over the step's episodes (sum of components). Entropy: mean −log p of the agent's sampled tokens (nats), step 0 → last step.`);
    out();
    out(
      `| seed | final eval | best eval | steps to ${TARGET} | ${agents.map((a) => `${a} reward (last step)`).join(' | ')} | ${agents.map((a) => `${a} entropy`).join(' | ')} | wall s |`,
    );
    out(`|---|---|---|---|${agents.map(() => '---|').join('')}${agents.map(() => '---|').join('')}---|`);
    for (const r of mine) {
      const first = r.steps[0]!;
      const last = r.steps.at(-1)!;
      out(
        `| ${r.seed} | ${f(r.final, 3)} | ${f(r.best, 3)} | ${r.toTarget ?? '—'} | ${agents.map((a) => f(total(last.rewards[a]))).join(' | ')} | ${agents.map((a) => `${f(first.entropy[a])} → ${f(last.entropy[a])}`).join(' | ')} | ${f(r.wallSeconds, 0)} |`,
      );
    }
    const reached = mine.filter((r) => r.final >= TARGET).length;
    const sorted = mine.map((r) => r.final).sort((a, b) => a - b);
    out();
    out(
      `${team}: final eval ≥ ${TARGET} on ${reached} of ${mine.length} seeds; final eval min ${f(sorted[0], 3)}, median ${f(sorted[sorted.length >> 1], 3)}; ${f(mine.reduce((s, r) => s + r.wallSeconds, 0) / mine.length, 0)} s per run.`,
    );
  }
  if (!values['no-write']) {
    fs.mkdirSync(RESULTS, { recursive: true });
    fs.writeFileSync(path.join(RESULTS, `${OUT}.md`), lines.join('\n') + '\n');
    // per step only rewards, entropy and zero-advantage shares (the sampled replies would be megabytes)
    const compact = runs.map((r) => ({
      ...r,
      steps: r.steps.map((s) => ({ step: s.step, rewards: s.rewards, entropy: s.entropy, zeroAdvantage: s.zeroAdvantage })),
      evals: r.evals.map((e) => ({ step: e.step, success: e.success })),
    }));
    const round = (_: string, v: unknown) => (typeof v === 'number' && !Number.isInteger(v) ? Number(v.toFixed(4)) : v);
    fs.writeFileSync(path.join(RESULTS, `${OUT}.json`), JSON.stringify({ command: COMMAND, runs: compact }, round) + '\n');
  }
}

// exit when done: a team's MCP servers (started in this process on its first tool call, one per
// process that runs tools) would keep it running after the sweep
main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
