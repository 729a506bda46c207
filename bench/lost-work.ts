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
 * With --partial, the partial-rollout layout instead (issue #31): the long-tail `chain` with
 * partialRollouts (testing/chaos/chaos.ts SHORT_PARTIAL, batched, pool worker kills by default)
 * landing in steps whose rollout continues carried episodes. Besides the totals it counts the
 * carried tokens sampled twice (the goal is 0): the tokens the engine after the last kill
 * sampled beyond the twin's from the step it resumed at (work-meter.ts workAfterLastKill; a
 * carried generation sampled again would show there), and the carried tokens the twin served
 * from the store.
 *
 * Prints a table and, with --write, merges its rows into bench/results/lost-work.{md,json}
 * (a stored row of the same layout, mode and staleness is replaced, the others kept), or into
 * the file given by --out (its .json and .md). Not a test.
 *
 *   node --import tsx bench/lost-work.ts [--seed N] [--kills N] [--stalenesses 0,1] [--modes batched,durable]
 *                                        [--steps-batched 20] [--steps-durable 8] [--write] [--out PATH]
 *   node --import tsx bench/lost-work.ts --partial [--kinds pool-worker] [--stalenesses 0] [--steps-batched 10] [--kills 2] [--write]
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { FAULT_KINDS, type FaultKind } from '../testing/chaos/stack';
import { runChaos, SHORT, SHORT_PARTIAL, type ChaosOptions, type Mode, type ModeReport } from '../testing/chaos/chaos';

const { values } = parseArgs({
  options: {
    seed: { type: 'string' },
    kills: { type: 'string' },
    kinds: { type: 'string' },
    stalenesses: { type: 'string' },
    modes: { type: 'string' },
    'steps-batched': { type: 'string' },
    'steps-durable': { type: 'string', default: '8' },
    partial: { type: 'boolean', default: false },
    write: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});

type Layout = 'plain' | 'partial';
const layout: Layout = values.partial ? 'partial' : 'plain';
// Defaults per layout: every kind over both modes, or the partial schedule's pool worker kills (batched only).
const kinds = (values.kinds?.split(',') as FaultKind[] | undefined) ?? (layout === 'partial' ? SHORT_PARTIAL.kinds : FAULT_KINDS);
const unknownKinds = kinds.filter((k) => !FAULT_KINDS.includes(k));
if (unknownKinds.length) throw new Error(`--kinds: unknown ${unknownKinds.join(', ')} (known: ${FAULT_KINDS.join(', ')})`);
const kills = Number(values.kills ?? (layout === 'partial' ? SHORT_PARTIAL.kills : FAULT_KINDS.length));
const stalenesses = (values.stalenesses ?? (layout === 'partial' ? '0' : '0,1')).split(',').map(Number);
const modes = (values.modes ?? (layout === 'partial' ? 'batched' : 'batched,durable')).split(',') as Mode[];
if (layout === 'partial' && modes.some((m) => m !== 'batched')) throw new Error('--partial: partial rollouts need --modes batched');
const stepsBatched = Number(values['steps-batched'] ?? (layout === 'partial' ? SHORT_PARTIAL.steps.batched : 20));

interface Row {
  /** 'partial': the partial-rollout layout (--partial); rows stored before layouts existed are 'plain'. */
  layout?: Layout;
  /** The command and start of the bench run that measured this row. */
  command?: string;
  started?: string;
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
  /** Partial layout: carried tokens the twin served from the store, and the carried tokens sampled twice (goal 0). */
  servedTokens?: number;
  carriedTokensTwice?: number;
  /** Partial layout: the steps whose rollout continued carried episodes, and the steps the kills landed in. */
  carriedInto?: number[];
  killSteps?: number[];
}

function row(m: ModeReport, staleness: number, run: { command: string; started: string }): Row {
  const w = m.work!;
  const kinds = m.kills.map((k) => `${k.kind}${k.again ? ' again' : ''}`);
  const p = m.partialWork;
  return {
    layout,
    ...run,
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
    ...(p
      ? {
          servedTokens: p.servedTokens.reduce((a, b) => a + b, 0),
          // tokens beyond the twin's that the engine after the last kill sampled; unset resumedAt: no step matched
          carriedTokensTwice: p.after.excess,
          carriedInto: (m.carriedInto ?? []).filter((t) => t < m.steps), // carried out of the last step: continued by none
          killSteps: m.kills.map((k) => k.stepsDone ?? -1),
        }
      : {}),
  };
}

const layoutOf = (r: Row): Layout => r.layout ?? 'plain';
const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;

function table(rows: Row[]): string {
  const partial = rows.some((r) => layoutOf(r) === 'partial');
  const lines = [
    `| layout | mode | staleness | kills | result vs twin | tokens (twin) | tokens generated twice | update runs repeated | wall (twin → killed) |${partial ? ' carried tokens served (twin) | carried tokens generated twice | kills in steps (steps continuing carried) |' : ''}`,
    `|---|---|---|---|---|---|---|---|---|${partial ? '---|---|---|' : ''}`,
  ];
  for (const r of rows) {
    const result = r.identical ? `identical (${r.versionsCompared} versions, ${r.episodesCompared} episodes)` : `${r.status}, ${r.problems} differences`;
    const extra = !partial
      ? ''
      : layoutOf(r) === 'partial'
        ? ` ${r.servedTokens} | ${r.carriedTokensTwice} | ${r.killSteps?.join(', ')} (${r.carriedInto?.join(', ')}) |`
        : ' | | |';
    lines.push(
      `| ${layoutOf(r)} | ${r.mode} | ${r.staleness} | ${r.kills} | ${result} | ${r.tokensTwin} | ${r.tokensTwice} (${((100 * r.tokensTwice) / Math.max(1, r.tokensTwin)).toFixed(1)}%) | ${r.updateRunsTwice} of ${r.updateRunsTwin} | ${r.twinSeconds.toFixed(1)} s → ${r.chaosSeconds.toFixed(1)} s (${signed(r.chaosSeconds - r.twinSeconds)} s) |${extra}`,
    );
  }
  return lines.join('\n');
}

async function main() {
  const rows: Row[] = [];
  const run = { command: `node --import tsx bench/lost-work.ts ${process.argv.slice(2).join(' ')}`.trim(), started: new Date().toISOString() };
  for (const staleness of stalenesses) {
    const options: ChaosOptions = {
      ...(layout === 'partial' ? SHORT_PARTIAL : SHORT),
      seed: Number(values.seed ?? (layout === 'partial' ? SHORT_PARTIAL.seed : 21)) + staleness,
      modes,
      steps: { batched: stepsBatched, durable: Number(values['steps-durable']) },
      kills,
      kinds,
      noPause: true, // wall time lost is only honest if the run is never held
      meterWork: true,
      ...(staleness > 0 ? { staleness } : {}),
      runTimeoutMs: 900_000,
      log: (l) => process.stderr.write(`${l}\n`),
    };
    const report = await runChaos(options);
    for (const m of report.modes) rows.push(row(m, staleness, run));
    process.stdout.write(`${table(rows)}\n`);
    if (values.write) write(rows);
  }
}

/** Merges `rows` into the stored results: a stored row of the same layout, mode and staleness is replaced, the rest kept. */
function mergeRows(stored: readonly Row[], rows: readonly Row[]): Row[] {
  const key = (r: Row) => `${layoutOf(r)}/${r.mode}/${r.staleness}`;
  const fresh = new Map(rows.map((r) => [key(r), r]));
  const kept = stored.map((r) => fresh.get(key(r)) ?? r);
  const keptKeys = new Set(kept.map(key));
  return [...kept, ...rows.filter((r) => !keptKeys.has(key(r)))];
}

function write(rows: Row[]) {
  const base = values.out ? values.out.replace(/\.(json|md)$/, '') : path.join(__dirname, 'results', 'lost-work');
  const jsonPath = `${base}.json`;
  // Rows stored before rows named their run carry the file's command and start.
  let stored: Row[] = [];
  if (fs.existsSync(jsonPath)) {
    const old = JSON.parse(fs.readFileSync(jsonPath, 'utf8')) as { started?: string; command?: string; rows: Row[] };
    stored = old.rows.map((r) => ({ layout: layoutOf(r), command: r.command ?? old.command, started: r.started ?? old.started, ...r }));
  }
  const merged = mergeRows(stored, rows);
  fs.writeFileSync(jsonPath, `${JSON.stringify({ rows: merged }, null, 2)}\n`);
  const runs = [...new Set(merged.map((r) => `\`${r.command}\`, started ${r.started}`))];
  fs.writeFileSync(
    `${base}.md`,
    `# Lost work per crash\n\nEach run (layout \`plain\`: \`math\`; \`partial\`: \`chain\` with a long tail and partial rollouts) against its uninterrupted twin; see bench/lost-work.ts for what is counted. Rows from:\n\n${runs.map((r) => `- ${r}`).join('\n')}\n\n${table(merged)}\n`,
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
