/**
 * Asynchronous RL benchmark: synchronous (k = 0) versus staleness k, interleaved
 * (seed by seed, every k in turn) on one bench stack. Prints numbers; not a test.
 *
 *   node --import tsx bench/staleness.ts [--ks 0,1,2] [--seeds 1,2,3] [--steps 8] [--groups 4] [--group-size 8]
 *                                        [--team math] [--team-options '{"policy":"transformer"}']
 *
 * Step time is measured from the store: (commit of the last step − commit of step 0) / (steps − 1),
 * so start-up and the initial eval are left out; evals only before and after training.
 */
import { parseArgs } from 'node:util';
import * as os from 'node:os';
import { startHarness } from '../test/integration/training/harness';
import { runTroupe } from './lib/troupe';

const { values } = parseArgs({
  options: {
    ks: { type: 'string', default: '0,1,2' },
    seeds: { type: 'string', default: '1,2,3' },
    steps: { type: 'string', default: '8' },
    groups: { type: 'string', default: '4' },
    'group-size': { type: 'string', default: '8' },
    team: { type: 'string', default: 'math' },
    'team-options': { type: 'string', default: '{}' },
  },
});
const ks = values.ks!.split(',').map(Number);
const seeds = values.seeds!.split(',').map(Number);
const steps = Number(values.steps);
const teamOptions = JSON.parse(values['team-options']!) as Record<string, unknown>;

async function main() {
  console.log(`# node --import tsx bench/staleness.ts --team ${values.team} --team-options '${values['team-options']}' --ks ${ks} --seeds ${seeds} --steps ${steps} --groups ${values.groups} --group-size ${values['group-size']}; ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'})`);
  const h = await startHarness();
  const rows: Array<{ k: number; seed: number; secondsPerStep: number; finalEval: number }> = [];
  try {
    for (const seed of seeds) {
      for (const k of ks) {
        const runId = `bench-stale-k${k}-s${seed}`;
        const r = await runTroupe(h, { runId, team: values.team!, teamOptions, steps, groupsPerStep: Number(values.groups), groupSize: Number(values['group-size']), evalEvery: 0, seed, staleness: k });
        const commits = await h.db.sql`SELECT step, extract(epoch FROM created_at)::float8 AS at FROM versions WHERE run_id = ${runId} AND step >= 0 ORDER BY step`;
        const secondsPerStep = (commits.at(-1)!.at - commits[0]!.at) / Math.max(1, commits.length - 1);
        rows.push({ k, seed, secondsPerStep, finalEval: r.summary.finalEval?.success ?? NaN });
        console.log(`k=${k} seed=${seed}: ${secondsPerStep.toFixed(2)} s/step, final eval ${r.summary.finalEval?.success.toFixed(3)} (wall ${r.wallSeconds.toFixed(0)} s)`);
      }
    }
  } finally {
    await h.shutdown();
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const sync = mean(rows.filter((r) => r.k === 0).map((r) => 1 / r.secondsPerStep));
  console.log('\n| k | seeds | s/step (mean) | steps/s (mean) | ratio to k=0 | final eval (mean) |');
  console.log('|---|---|---|---|---|---|');
  for (const k of ks) {
    const mine = rows.filter((r) => r.k === k);
    const sps = mean(mine.map((r) => 1 / r.secondsPerStep));
    console.log(`| ${k} | ${mine.length} | ${mean(mine.map((r) => r.secondsPerStep)).toFixed(2)} | ${sps.toFixed(3)} | ${Number.isFinite(sync) ? (sps / sync).toFixed(2) : '-'} | ${mean(mine.map((r) => r.finalEval)).toFixed(3)} |`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
