/**
 * Lost-work benchmark: what a crash of each process costs a run. For each rollout mode and
 * staleness, a run of `math` is killed at seeded random points (each process kind in turn:
 * control worker, pool worker, engine, Temporal server, PostgreSQL) and compared with its
 * uninterrupted twin (the chaos harness, testing/chaos/). Counted against the twin:
 *
 * - tokens generated twice: engine tokens generated (summed over every engine process that
 *   lived, testing/chaos/work-meter.ts) minus the twin's; a lower bound (a generate run cut
 *   by its engine's own kill never finishes and is not counted);
 * - update device runs repeated: update runs on the engines minus the twin's (an update redone
 *   because its result was lost with a process; applying one twice would change the weights);
 * - episodes lost or changed, versions lost, repeated or changed: the stored run against the
 *   twin's, byte for byte (testing/chaos/compare.ts);
 * - wall time lost: the killed run's wall time minus the twin's (each run alone on the stack;
 *   kills never pause the run).
 *
 * Prints a table and, with --write, writes bench/results/lost-work.{md,json}. Not a test.
 *
 *   node --import tsx bench/lost-work.ts [--seed N] [--kills N] [--stalenesses 0,1] [--modes batched,durable]
 *                                        [--steps-batched 20] [--steps-durable 8] [--write]
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { FAULT_KINDS } from '../testing/chaos/stack';
import { runChaos, SHORT, type ChaosOptions, type Mode, type ModeReport } from '../testing/chaos/chaos';

const { values } = parseArgs({
  options: {
    seed: { type: 'string', default: '21' },
    kills: { type: 'string', default: String(FAULT_KINDS.length) },
    stalenesses: { type: 'string', default: '0,1' },
    modes: { type: 'string', default: 'batched,durable' },
    'steps-batched': { type: 'string', default: '20' },
    'steps-durable': { type: 'string', default: '8' },
    write: { type: 'boolean', default: false },
  },
});

interface Row {
  mode: Mode;
  staleness: number;
  kills: string;
  steps: number;
  identical: boolean;
  status: string;
  tokensTwin: number;
  tokensChaos: number;
  tokensTwice: number;
  /** Generate device runs, killed minus twin: not work repeated (batching follows timing), kept in the JSON. */
  generateRunsDelta: number;
  updateRunsTwin: number;
  updateRunsTwice: number;
  problems: number;
  episodesCompared: number;
  versionsCompared: number;
  twinSeconds: number;
  chaosSeconds: number;
  engines: number;
}

function row(m: ModeReport, staleness: number): Row {
  const w = m.work!;
  const kinds = m.kills.map((k) => `${k.kind}${k.again ? ' again' : ''}`);
  return {
    mode: m.mode,
    staleness,
    kills: kinds.join(', ') || 'none',
    steps: m.steps,
    identical: m.identical,
    status: m.status,
    tokensTwin: w.baseline.tokensGenerated,
    tokensChaos: w.chaos.tokensGenerated,
    tokensTwice: w.chaos.tokensGenerated - w.baseline.tokensGenerated,
    generateRunsDelta: w.chaos.generateRuns - w.baseline.generateRuns,
    updateRunsTwin: w.baseline.updateRuns,
    updateRunsTwice: w.chaos.updateRuns - w.baseline.updateRuns,
    problems: m.comparison?.problems.length ?? -1,
    episodesCompared: m.comparison?.episodesCompared ?? 0,
    versionsCompared: m.comparison?.versionsCompared ?? 0,
    twinSeconds: m.baselineSeconds,
    chaosSeconds: m.chaosSeconds,
    engines: w.chaos.engines,
  };
}

function table(rows: Row[]): string {
  const lines = [
    '| mode | staleness | kills | result vs twin | tokens (twin) | tokens generated twice | update runs repeated | wall (twin → killed) |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const result = r.identical ? `identical (${r.versionsCompared} versions, ${r.episodesCompared} episodes)` : `${r.status}, ${r.problems} differences`;
    lines.push(
      `| ${r.mode} | ${r.staleness} | ${r.kills} | ${result} | ${r.tokensTwin} | ${r.tokensTwice} (${((100 * r.tokensTwice) / Math.max(1, r.tokensTwin)).toFixed(1)}%) | ${r.updateRunsTwice} of ${r.updateRunsTwin} | ${r.twinSeconds.toFixed(1)} s → ${r.chaosSeconds.toFixed(1)} s (+${(r.chaosSeconds - r.twinSeconds).toFixed(1)} s) |`,
    );
  }
  return lines.join('\n');
}

async function main() {
  const modes = values.modes!.split(',') as Mode[];
  const rows: Row[] = [];
  const started = new Date().toISOString();
  for (const staleness of values.stalenesses!.split(',').map(Number)) {
    const options: ChaosOptions = {
      ...SHORT,
      seed: Number(values.seed) + staleness,
      modes,
      steps: { batched: Number(values['steps-batched']), durable: Number(values['steps-durable']) },
      kills: Number(values.kills),
      kinds: FAULT_KINDS,
      noPause: true, // wall time lost is only honest if the run is never held
      meterWork: true,
      ...(staleness > 0 ? { staleness } : {}),
      runTimeoutMs: 900_000,
      log: (l) => process.stderr.write(`${l}\n`),
    };
    const report = await runChaos(options);
    for (const m of report.modes) rows.push(row(m, staleness));
    process.stdout.write(`${table(rows)}\n`);
    if (values.write) write(rows, started);
  }
}

function write(rows: Row[], started: string) {
  const dir = path.join(__dirname, 'results');
  const cmd = `node --import tsx bench/lost-work.ts ${process.argv.slice(2).join(' ')}`.trim();
  fs.writeFileSync(path.join(dir, 'lost-work.json'), `${JSON.stringify({ started, command: cmd, rows }, null, 2)}\n`);
  fs.writeFileSync(
    path.join(dir, 'lost-work.md'),
    `# Lost work per crash\n\n\`${cmd}\`, started ${started}. Each run of \`math\` against its uninterrupted twin; see bench/lost-work.ts for what is counted.\n\n${table(rows)}\n`,
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
