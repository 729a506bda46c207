/**
 * Partial rollouts benchmark (issue #31): synchronous steps versus partialRollouts on a
 * long-tail team (default `chain` with 10% of tasks 8x as long), seed by seed in turn on
 * one bench stack. Prints numbers; not a test.
 *
 *   node --import tsx bench/partial.ts [--seeds 1,2,3] [--steps 8] [--groups 4] [--group-size 8]
 *        [--team chain] [--team-options '{"longTail":0.1}'] [--over-provision 1.5] [--eval-tasks 0] [--write]
 *
 * Rollout throughput: tokens sampled per second of rollout (the rollout's own seconds,
 * episodes / episodesPerSecond of each step), and whole-group episodes trained per rollout
 * second. Step time: (commit of the last step − commit of step 0) / (steps − 1). Final eval:
 * greedy success on the held-out tasks after the last step.
 */
import { parseArgs } from 'node:util';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startHarness, type Harness } from '../testing/stack';
import { runTroupe } from './lib/troupe';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '1,2,3' },
    steps: { type: 'string', default: '8' },
    groups: { type: 'string', default: '4' },
    'group-size': { type: 'string', default: '8' },
    team: { type: 'string', default: 'chain' },
    'team-options': { type: 'string', default: '{"longTail":0.1}' },
    'over-provision': { type: 'string', default: '1.5' },
    'eval-tasks': { type: 'string', default: '0' },
    write: { type: 'boolean', default: false },
  },
});
const seeds = values.seeds!.split(',').map(Number);
const steps = Number(values.steps);
const overProvision = Number(values['over-provision']);
const COMMAND = `node --import tsx bench/partial.ts --team ${values.team} --team-options '${values['team-options']}' --seeds ${seeds} --steps ${steps} --groups ${values.groups} --group-size ${values['group-size']} --over-provision ${overProvision} --eval-tasks ${values['eval-tasks']}${values.write ? ' --write' : ''}`;

type Mode = 'sync' | 'partial';
interface Run {
  mode: Mode;
  seed: number;
  secondsPerStep: number;
  rolloutSeconds: number;
  sampledTokens: number;
  trainedEpisodes: number;
  finalEval: number;
  load: number[];
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const f = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '-');

async function measure(h: Harness, runId: string, mode: Mode, seed: number): Promise<Run> {
  const sql = h.db.sql;
  const commits = await sql`SELECT step, max(extract(epoch FROM created_at)::float8) AS at FROM versions WHERE run_id = ${runId} GROUP BY step ORDER BY step`;
  const at = new Map(commits.map((r) => [r.step as number, r.at as number]));
  const perStep = await sql`
    SELECT m.step, m.value AS eps, (SELECT count(*)::int FROM episodes e WHERE e.run_id = ${runId} AND e.split = 'train' AND e.step = m.step) AS episodes
    FROM metrics m WHERE m.run_id = ${runId} AND m.kind = 'train' AND m.scope = 'team' AND m.name = 'episodesPerSecond' ORDER BY m.step`;
  const rolloutSeconds = perStep.reduce((s, r) => s + (r.episodes as number) / (r.eps as number), 0);
  const trainedEpisodes = perStep.reduce((s, r) => s + (r.episodes as number), 0);
  // Sampled tokens: every generation of the rollout (partial: the rollouts' own count, carried ones included once).
  const sampledTokens =
    mode === 'partial'
      ? Number((await sql`SELECT coalesce(sum((result->>'generatedTokens')::int), 0)::int AS n FROM partial_rollouts WHERE run_id = ${runId}`)[0]!.n)
      : Number(
          (
            await sql`SELECT coalesce(sum((SELECT count(*) FROM unnest(t.loss_mask) x WHERE x = 1)), 0)::int AS n
              FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${runId} AND e.split = 'train'`
          )[0]!.n,
        );
  const [final] = await sql`SELECT value FROM metrics WHERE run_id = ${runId} AND kind = 'eval' AND scope = 'team' AND name = 'success' AND step = ${steps}`;
  return {
    mode,
    seed,
    secondsPerStep: (at.get(steps - 1)! - at.get(0)!) / Math.max(1, steps - 1),
    rolloutSeconds,
    sampledTokens,
    trainedEpisodes,
    finalEval: (final?.value as number | undefined) ?? NaN,
    load: os.loadavg(),
  };
}

function report(runs: Run[], startLoad: number[]): string[] {
  const lines = [
    `# ${COMMAND}`,
    `# ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}); load average at start ${startLoad.map((x) => x.toFixed(1)).join(' / ')}`,
    '',
    '| mode | seeds | s/step | rollout s (all steps) | sampled tokens / rollout s | vs sync | trained episodes / rollout s | final eval (mean, min–max) |',
    '|---|---|---|---|---|---|---|---|',
  ];
  const tps = (rs: Run[]) => mean(rs.map((r) => r.sampledTokens / r.rolloutSeconds));
  const sync = tps(runs.filter((r) => r.mode === 'sync'));
  for (const mode of ['sync', 'partial'] as const) {
    const mine = runs.filter((r) => r.mode === mode);
    if (mine.length === 0) continue;
    const finals = mine.map((r) => r.finalEval);
    lines.push(
      `| ${mode === 'sync' ? 'sync' : `partial (overProvision ${overProvision})`} | ${mine.length} | ${f(mean(mine.map((r) => r.secondsPerStep)), 2)} | ${f(mean(mine.map((r) => r.rolloutSeconds)), 1)} | ${f(tps(mine), 1)} | ${f(tps(mine) / sync, 2)} | ${f(mean(mine.map((r) => r.trainedEpisodes / r.rolloutSeconds)), 2)} | ${f(mean(finals))} (${f(Math.min(...finals))}–${f(Math.max(...finals))}) |`,
    );
  }
  lines.push('', '| seed | mode | s/step | rollout s | sampled tokens | trained episodes | final eval | load |', '|---|---|---|---|---|---|---|---|');
  for (const r of runs)
    lines.push(
      `| ${r.seed} | ${r.mode} | ${f(r.secondsPerStep, 2)} | ${f(r.rolloutSeconds, 1)} | ${r.sampledTokens} | ${r.trainedEpisodes} | ${f(r.finalEval)} | ${r.load.map((x) => x.toFixed(1)).join(' / ')} |`,
    );
  return lines;
}

async function main() {
  const startLoad = os.loadavg();
  console.log(`# ${COMMAND}; load average ${startLoad.map((x) => x.toFixed(1)).join(' / ')}`);
  const h = await startHarness();
  const runs: Run[] = [];
  try {
    for (const seed of seeds) {
      for (const mode of ['sync', 'partial'] as const) {
        const runId = `bench-partial-${mode}-s${seed}`;
        await runTroupe(h, {
          runId,
          team: values.team!,
          teamOptions: JSON.parse(values['team-options']!) as Record<string, unknown>,
          steps,
          groupsPerStep: Number(values.groups),
          groupSize: Number(values['group-size']),
          evalEvery: 0,
          evalTasks: Number(values['eval-tasks']),
          seed,
          ...(mode === 'partial' ? { partialRollouts: { overProvision } } : {}),
        });
        const run = await measure(h, runId, mode, seed);
        runs.push(run);
        console.log(
          `${mode} seed=${seed}: ${f(run.secondsPerStep, 2)} s/step, ${f(run.sampledTokens / run.rolloutSeconds, 1)} tokens/rollout s, final eval ${f(run.finalEval)}`,
        );
        if (values.write) {
          const dir = path.join(__dirname, 'results');
          fs.mkdirSync(dir, { recursive: true });
          fs.writeFileSync(path.join(dir, 'partial.md'), [...report(runs, startLoad), ''].join('\n'));
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
