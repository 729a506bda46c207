/**
 * Sample, keep the good ones, fine-tune (issue #48): per seed, on one bench stack,
 *
 *   scratch   RL from a random initialization for --steps steps
 *   teacher   RL for --teacher-steps steps
 *   sft       SFT of a fresh model on the teacher's turns with reward >= --min-reward (of its successful
 *             episodes only with --success-only), --sft-steps steps of --batch turns
 *   after     RL with `init` from the SFT run's last version, for --steps − --teacher-steps steps
 *
 * and prints, per seed, the RL steps until the greedy eval (--eval-tasks held-out tasks every
 * --eval-every steps) first reaches 0.9 (the pipeline counts the teacher's steps too), and the seconds
 * of training steps until then (the sum of the steps' own seconds from the workflow history, evals
 * left out; the pipeline's include the teacher's and the SFT run's steps). Prints numbers; not a test.
 *
 *   node --import tsx bench/sft.ts [--team math] [--seeds 0,1,2] [--steps 40] [--teacher-steps 6]
 *        [--sft-steps 10] [--batch 64] [--min-reward 1|none] [--success-only] [--eval-every 2] [--eval-tasks 100]
 *        [--init walker,lookout]   the models the RL run takes from the SFT run (default: all; the others start fresh)
 */
import { parseArgs } from 'node:util';
import * as os from 'node:os';
import { startHarness } from '../testing/stack';
import { runTroupe, type TroupeResult } from './lib/troupe';

const { values } = parseArgs({
  options: {
    team: { type: 'string', default: 'math' },
    seeds: { type: 'string', default: '0,1,2' },
    steps: { type: 'string', default: '40' },
    'teacher-steps': { type: 'string', default: '6' },
    'sft-steps': { type: 'string', default: '10' },
    batch: { type: 'string', default: '64' },
    'min-reward': { type: 'string', default: '1' },
    'success-only': { type: 'boolean', default: false },
    'eval-every': { type: 'string', default: '2' },
    'eval-tasks': { type: 'string', default: '100' },
    init: { type: 'string' },
  },
});
const team = values.team!;
const seeds = values.seeds!.split(',').map(Number);
const steps = Number(values.steps);
const teacherSteps = Number(values['teacher-steps']);
const sftSteps = Number(values['sft-steps']);
const evalEvery = Number(values['eval-every']);
const evalTasks = Number(values['eval-tasks']);
const TARGET = 0.9;
const COMMAND = `node --import tsx bench/sft.ts --team ${team} --seeds ${seeds} --steps ${steps} --teacher-steps ${teacherSteps} --sft-steps ${sftSteps} --batch ${values.batch} --min-reward ${values['min-reward']}${values['success-only'] ? ' --success-only' : ''} --eval-every ${evalEvery} --eval-tasks ${evalTasks}${values.init ? ` --init ${values.init}` : ''}`;

/** The first eval step at which success reached TARGET, or undefined. */
const firstAt = (r: TroupeResult) => r.evals.find((e) => e.success >= TARGET)?.step;
/** Seconds of the run's steps before `step` (all of them without one): each step's rollout and update seconds (its metrics). */
const stepSeconds = (r: Timed, before = Infinity) => r.stepSeconds.filter((_, step) => step < before).reduce((n, s) => n + s, 0);

type Timed = TroupeResult & { stepSeconds: number[] };
const f = (x: number | undefined, d = 0) => (x === undefined ? '-' : x.toFixed(d));

async function main() {
  const load = os.loadavg();
  console.log(`# ${COMMAND}; load average ${load.map((x) => x.toFixed(1)).join(' / ')}`);
  const h = await startHarness();
  const timed = async (input: Parameters<typeof runTroupe>[1]): Promise<Timed> => {
    const r = await runTroupe(h, input);
    const rows = await h.db.sql`SELECT step, sum(value) AS s FROM metrics WHERE run_id = ${input.runId} AND kind = 'train' AND scope = 'team'
      AND name IN ('rolloutSeconds', 'updateSeconds') GROUP BY step ORDER BY step`;
    return { ...r, stepSeconds: rows.map((x) => Number(x.s)) };
  };
  /** Per agent, its entropy and zero-advantage group share at steps 0-2 of a run (metrics rows). */
  const signal = async (runId: string) => {
    const m = await h.db.sql`SELECT step, scope, name, value FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND step < 3
      AND name IN ('entropy', 'zeroAdvantageGroupFraction') AND scope <> 'team' ORDER BY scope, step`;
    const agents = [...new Set(m.map((x) => x.scope as string))];
    const at = (a: string, name: string) =>
      m
        .filter((x) => x.scope === a && x.name === name)
        .map((x) => Number(x.value).toFixed(2))
        .join(' ');
    return agents.map((a) => `${a} entropy ${at(a, 'entropy')}, no-signal groups ${at(a, 'zeroAdvantageGroupFraction')}`).join('; ');
  };
  const rows: string[] = [];
  try {
    for (const seed of seeds) {
      const base = { team, seed, evalTasks, groupsPerStep: 16, groupSize: 8 };
      const scratch = await timed({ ...base, runId: `scratch-s${seed}`, steps, evalEvery });
      const teacher = await timed({ ...base, runId: `teacher-s${seed}`, steps: teacherSteps, evalEvery: 0, evalTasks: 1 });
      const sft = await timed({
        ...base,
        runId: `sft-s${seed}`,
        steps: sftSteps,
        evalEvery: 0,
        sft: {
          from: {
            run: teacher.runId,
            // `none`: every turn of the kept episodes
            ...(values['min-reward'] === 'none' ? {} : { minReward: Number(values['min-reward']) }),
            successOnly: values['success-only'],
          },
          batch: Number(values.batch),
        },
      });
      const models = values.init ? values.init.split(',') : Object.keys(sft.summary.versions);
      for (const m of models)
        if (!(m in sft.summary.versions)) throw new Error(`--init: ${m} is not a model of ${team} (${Object.keys(sft.summary.versions).join(', ')})`);
      const afterRun = await timed({
        ...base,
        runId: `after-s${seed}`,
        steps: steps - teacherSteps,
        evalEvery,
        init: Object.fromEntries(models.map((m) => [m, { run: sft.runId, step: sftSteps - 1 }])),
      });
      const s0 = firstAt(scratch);
      const a0 = firstAt(afterRun);
      const pipelineSteps = a0 === undefined ? undefined : teacherSteps + a0;
      const pipelineSeconds = a0 === undefined ? undefined : stepSeconds(teacher) + stepSeconds(sft) + stepSeconds(afterRun, a0);
      const row = [
        seed,
        f(scratch.summary.initialEval?.success, 3),
        f(sft.summary.initialEval?.success, 3),
        f(sft.summary.finalEval?.success, 3),
        f(s0),
        f(pipelineSteps),
        f(s0 === undefined ? undefined : stepSeconds(scratch, s0)),
        f(pipelineSeconds),
        f(scratch.summary.finalEval?.success, 3),
        f(afterRun.summary.finalEval?.success, 3),
        `${f(stepSeconds(teacher))} / ${f(stepSeconds(sft))}`,
        `${f(scratch.wallSeconds)} / ${f(teacher.wallSeconds + sft.wallSeconds + afterRun.wallSeconds)}`,
      ].join(' | ');
      rows.push(`| ${row} |`);
      console.log(`seed ${seed}: ${row}`);
      // Why RL from the SFT model learns or not: each agent's policy entropy and share of groups without signal, first steps
      for (const r of [scratch, afterRun]) console.log(`seed ${seed} ${r.runId}: ${await signal(r.runId)}`);
    }
  } finally {
    await h.shutdown();
  }
  console.log(
    [
      '',
      `| seed | eval at step 0 | SFT eval before | SFT eval after | RL from scratch: steps to ${TARGET} | teacher + SFT + RL: RL steps to ${TARGET} | scratch: step seconds to ${TARGET} | pipeline: step seconds to ${TARGET} | scratch final | pipeline final | teacher / SFT step seconds | wall seconds, all runs: scratch / pipeline |`,
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
      ...rows,
    ].join('\n'),
  );
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
