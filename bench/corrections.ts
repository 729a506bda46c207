/**
 * Off-policy corrections compared on one asynchronous setting (staleness k): each correction
 * (rl/corrections/) trains the same seeds, interleaved seed by seed on one bench stack.
 * Prints numbers; not a test.
 *
 *   node --import tsx bench/corrections.ts [--corrections decoupled-ppo,icepop] [--k 2] [--seeds 1,2,3]
 *                                          [--steps 8] [--groups 4] [--group-size 8] [--team math]
 *                                          [--cap 2] [--band 0.5,5] [--write]
 *
 * Per run: seconds per step (commit of the last step − commit of step 0, over steps − 1), the
 * final eval success, and the model's correction metrics averaged over the steps that sampled a
 * stale version (step ≥ 1): weight mean, shares truncated and masked, mismatch_kl.
 * With --write, bench/results/corrections.md is (re)written after every run.
 */
import { parseArgs } from 'node:util';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startHarness } from '../testing/stack';
import { CORRECTION_NAMES, type CorrectionName } from '../rl';
import { runTroupe } from './lib/troupe';

const { values } = parseArgs({
  options: {
    corrections: { type: 'string', default: CORRECTION_NAMES.join(',') },
    k: { type: 'string', default: '2' },
    seeds: { type: 'string', default: '1,2,3' },
    steps: { type: 'string', default: '8' },
    groups: { type: 'string', default: '4' },
    'group-size': { type: 'string', default: '8' },
    team: { type: 'string', default: 'math' },
    cap: { type: 'string', default: '2' },
    band: { type: 'string', default: '0.5,5' },
    write: { type: 'boolean', default: false },
  },
});
const corrections = values.corrections!.split(',') as CorrectionName[];
for (const c of corrections) if (!CORRECTION_NAMES.includes(c)) throw new Error(`--corrections: unknown ${c}; known: ${CORRECTION_NAMES.join(', ')}`);
const k = Number(values.k);
const seeds = values.seeds!.split(',').map(Number);
const steps = Number(values.steps);
const cap = Number(values.cap);
const band = values.band!.split(',').map(Number) as [number, number];
const COMMAND = `node --import tsx bench/corrections.ts --corrections ${corrections} --k ${k} --seeds ${seeds} --steps ${steps} --groups ${values.groups} --group-size ${values['group-size']} --team ${values.team} --cap ${cap} --band ${band}${values.write ? ' --write' : ''}`;
const OUT = path.join(__dirname, 'results', 'corrections.md');

interface Run {
  correction: CorrectionName;
  seed: number;
  secondsPerStep: number;
  finalEval: number;
  /** Means over the stale steps of the model's update metrics. */
  metrics: Record<'isWeight.mean' | 'isWeight.truncated' | 'isWeight.masked' | 'mismatch_kl', number>;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const f = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '-');

function report(runs: Run[], startLoad: number[]): string[] {
  const lines = [
    `# ${COMMAND}`,
    `# ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}); load average at start ${startLoad.map((x) => x.toFixed(1)).join(' / ')}; now ${os
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' / ')}`,
    '',
    `Staleness k = ${k}, cap C = ${cap}, band [${band.join(', ')}]; correction metrics: the model's, mean over steps 1..${steps - 1}.`,
    '',
    '| correction | seeds | s/step | final eval (mean, min–max) | weight mean | truncated | masked | mismatch_kl |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const c of corrections) {
    const mine = runs.filter((r) => r.correction === c);
    if (mine.length === 0) continue;
    const finals = mine.map((r) => r.finalEval);
    const m = (name: keyof Run['metrics']) => mean(mine.map((r) => r.metrics[name]));
    lines.push(
      `| ${c} | ${mine.length} | ${f(mean(mine.map((r) => r.secondsPerStep)), 2)} | ${f(mean(finals))} (${f(Math.min(...finals))}–${f(Math.max(...finals))}) | ${f(m('isWeight.mean'))} | ${f(m('isWeight.truncated'))} | ${f(m('isWeight.masked'))} | ${m('mismatch_kl').toExponential(2)} |`,
    );
  }
  return lines;
}

async function main() {
  const startLoad = os.loadavg();
  console.log(`# ${COMMAND}; load average ${startLoad.map((x) => x.toFixed(1)).join(' / ')}`);
  const h = await startHarness();
  const runs: Run[] = [];
  try {
    for (const seed of seeds) {
      for (const correction of corrections) {
        const runId = `bench-corr-${correction}-s${seed}`;
        const r = await runTroupe(h, {
          runId,
          team: values.team!,
          steps,
          groupsPerStep: Number(values.groups),
          groupSize: Number(values['group-size']),
          evalEvery: 0,
          seed,
          staleness: k,
          offPolicy: { correction, cap, band },
        });
        const commits = await h.db
          .sql`SELECT step, max(extract(epoch FROM created_at)::float8) AS at FROM versions WHERE run_id = ${runId} AND step >= 0 GROUP BY step`;
        const at = new Map(commits.map((c) => [c.step as number, c.at as number]));
        const rows = await h.db.sql`SELECT step, name, value FROM metrics WHERE run_id = ${runId} AND kind = 'update' AND step >= 1
          AND name IN ('isWeight.mean', 'isWeight.truncated', 'isWeight.masked', 'mismatch_kl')`;
        const metric = (name: string) => mean(rows.filter((x) => x.name === name).map((x) => x.value as number));
        const run: Run = {
          correction,
          seed,
          secondsPerStep: (at.get(steps - 1)! - at.get(0)!) / Math.max(1, steps - 1),
          finalEval: r.evals.at(-1)?.success ?? NaN,
          metrics: {
            'isWeight.mean': metric('isWeight.mean'),
            'isWeight.truncated': metric('isWeight.truncated'),
            'isWeight.masked': metric('isWeight.masked'),
            mismatch_kl: metric('mismatch_kl'),
          },
        };
        runs.push(run);
        console.log(`${correction} seed=${seed}: ${f(run.secondsPerStep, 2)} s/step, final eval ${f(run.finalEval)}, ${JSON.stringify(run.metrics)}`);
        if (values.write) {
          fs.mkdirSync(path.dirname(OUT), { recursive: true });
          fs.writeFileSync(OUT, [...report(runs, startLoad), ''].join('\n'));
        }
      }
    }
  } finally {
    await h.shutdown();
  }
  console.log('\n' + report(runs, startLoad).join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
