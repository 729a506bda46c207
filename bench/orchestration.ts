/**
 * Orchestration overhead: the same training job (bundled `math` team, same
 * config and seed, CPU engine) three ways, interleaved A B C A B C in one
 * process so machine drift hits all three alike:
 *
 *   A  in-process   a plain loop over the same rollout / reward / advantage /
 *                   update code (bench/lib/inprocess.ts): no Temporal, no Postgres
 *   B  batched      Troupe, `rollout: 'batched'`
 *   C  durable      Troupe, `rollout: 'durable'` (a child workflow per episode,
 *                   an activity per generation segment and per tool call)
 *   D  grouped      durable with `episodesPerWorkflow: --per-workflow` (default 8):
 *                   that many episodes to a child workflow
 *
 * All three use one engine process (the pool worker's) and run with the whole
 * stack up; only B and C use it. Per-step wall time excludes step 0 (warm-up)
 * and the evals. Not a test; prints tables and writes bench/results/orchestration.{json,md}.
 *
 *   node --import tsx bench/orchestration.ts [--steps 4] [--rounds 2] [--sizes 4x8,16x8,64x8]
 *        [--modes inprocess,batched,durable,grouped] [--per-workflow 8] [--durable-max-episodes 128] [--durable-steps 3] [--no-write]
 *
 * Durable runs are skipped at sizes above --durable-max-episodes (their cost is
 * about linear in agent turns; the table gives the per-turn cost to extrapolate).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { buildStepBatch } from '../activities/training/batch';
import { loadStepEpisodes, saveEpisodes, type StoredEpisode } from '../activities/store/trajectories';
import { versionOfStep } from '../activities/store/versions';
import { episodeGroupIdOf, episodeIdOf } from '../activities/training/plan';
import { modelKey } from '../activities/training/update-step';
import { loadTeam } from '../agents/team-registry';
import { checkAgainstTeam, parseRunConfig, type RunConfigInput } from '../schema/run-config';
import { startHarness, type Harness } from '../testing/stack';
import { cpuDelta, cpuSample, type CpuSample } from './lib/cpu';
import { childCounts, childTimings, execSpan, type ChildTimings } from './lib/history';
import { trainInProcess, type InProcessResult } from './lib/inprocess';
import { runTroupe, type TroupeResult } from './lib/troupe';

const { values } = parseArgs({
  options: {
    steps: { type: 'string' },
    rounds: { type: 'string' },
    sizes: { type: 'string' },
    modes: { type: 'string' },
    'durable-max-episodes': { type: 'string' },
    'durable-steps': { type: 'string' },
    'per-workflow': { type: 'string' },
    'no-write': { type: 'boolean' },
  },
});
const STEPS = Number(values.steps ?? 4);
const ROUNDS = Number(values.rounds ?? 2);
const SIZES = (values.sizes ?? '4x8,16x8,64x8').split(',').map((s) => {
  const [g, e] = s.split('x').map(Number);
  if (!g || !e) throw new Error(`--sizes: expected GxE,... got ${s}`);
  return { groups: g, groupSize: e, label: `${g}x${e}` };
});
type Mode = 'inprocess' | 'batched' | 'durable' | 'grouped';
const MODES = (values.modes ?? 'inprocess,batched,durable').split(',') as Mode[];
for (const m of MODES) if (!['inprocess', 'batched', 'durable', 'grouped'].includes(m)) throw new Error(`--modes: unknown mode ${m}`);
/** Durable rollouts: one workflow per episode, or (grouped) PER_WORKFLOW episodes to a workflow. */
const durableLike = (m: Mode) => m === 'durable' || m === 'grouped';
const PER_WORKFLOW = Number(values['per-workflow'] ?? 8);
const DURABLE_MAX = Number(values['durable-max-episodes'] ?? 128);
// Durable jobs are the slow ones: fewer steps keep the whole bench near 10 minutes (step 0 is still not timed).
const DURABLE_STEPS = Math.min(STEPS, Number(values['durable-steps'] ?? 3));
const runs = (size: { groups: number; groupSize: number }, mode: Mode) => !durableLike(mode) || size.groups * size.groupSize <= DURABLE_MAX;
// the size whose step is broken down: the default run config's (16 x 8) if measured, else the largest
const DEFAULT_SIZE = SIZES.some((s) => s.label === '16x8') ? '16x8' : SIZES.at(-1)!.label;
const COMMAND = `node --import tsx bench/orchestration.ts${process.argv.slice(2).length ? ' ' + process.argv.slice(2).join(' ') : ''}`;
const RESULTS = path.join(__dirname, 'results');

const median = (xs: number[]) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');

function jobConfig(size: (typeof SIZES)[number], mode: Mode, runId: string): RunConfigInput & { runId: string } {
  return {
    team: 'math',
    runId,
    seed: 0,
    steps: STEPS,
    groupsPerStep: size.groups,
    groupSize: size.groupSize,
    rollout: durableLike(mode) ? 'durable' : 'batched',
    ...(mode === 'grouped' ? { episodesPerWorkflow: PER_WORKFLOW } : {}),
    evalEvery: 0,
    evalTasks: 32,
  };
}

interface Job {
  mode: Mode;
  size: string;
  round: number;
  runId: string;
  wallSeconds: number;
  /** per-step wall seconds, step 1.. (step 0 is warm-up) */
  stepSeconds: number[];
  gradNorm: Array<Record<string, number>>;
  finalEval: number;
  cpu: CpuSample;
  inprocess?: InProcessResult;
  troupe?: TroupeResult;
}

async function runJob(
  h: Harness,
  size: (typeof SIZES)[number],
  mode: Mode,
  round: number,
  tag = '',
  steps = durableLike(mode) ? DURABLE_STEPS : STEPS,
): Promise<Job> {
  const runId = `bench-${mode}-${size.label}-r${round}${tag}-${Date.now().toString(36)}`;
  const config = { ...jobConfig(size, mode, runId), steps };
  const c0 = cpuSample(h.pool.supervisor?.pid, h.db.name);
  if (mode === 'inprocess') {
    const r = await trainInProcess(h.pool.getClient(), config);
    const cpu = cpuDelta(c0, cpuSample(h.pool.supervisor?.pid, h.db.name));
    return {
      mode,
      size: size.label,
      round,
      runId,
      wallSeconds: r.wallSeconds,
      stepSeconds: r.steps.slice(1).map((s) => s.seconds),
      gradNorm: r.steps.map((s) => s.gradNorm),
      finalEval: r.evals.at(-1)!.success,
      cpu,
      inprocess: r,
    };
  }
  const r = await runTroupe(h, config);
  const cpu = cpuDelta(c0, cpuSample(h.pool.supervisor?.pid, h.db.name));
  return {
    mode,
    size: size.label,
    round,
    runId,
    wallSeconds: r.wallSeconds,
    stepSeconds: r.steps.slice(1).map((s) => s.seconds),
    gradNorm: r.steps.map((s) => s.gradNorm),
    finalEval: r.evals.at(-1)?.success ?? NaN,
    cpu,
    troupe: r,
  };
}

/** Same gradient norms in every step (both jobs ran) and model: bit-identical updates. */
function sameUpdates(a: Job, b: Job): string {
  let worst = 0;
  for (let s = 0; s < Math.min(a.gradNorm.length, b.gradNorm.length); s++) {
    const x = a.gradNorm[s] ?? {};
    const y = b.gradNorm[s] ?? {};
    for (const m of new Set([...Object.keys(x), ...Object.keys(y)])) {
      const u = x[m];
      const v = y[m];
      if (u === undefined || v === undefined) return `step ${s} ${m}: missing`;
      worst = Math.max(worst, Math.abs(u - v) / Math.max(Math.abs(u), 1e-12));
    }
  }
  return worst === 0 ? 'identical' : `max rel diff ${worst.toExponential(1)}`;
}

async function main() {
  console.log(`# ${COMMAND}`);
  console.log(
    `# math team, seed 0, ${STEPS} steps per job (durable ${DURABLE_STEPS}; step 0 not timed), evalEvery 0, evalTasks 32; sizes ${SIZES.map((s) => s.label).join(', ')}; ${ROUNDS} interleaved rounds of ${MODES.join(' / ')}`,
  );
  console.log(
    `# node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}), load ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`,
  );
  const tStart = performance.now();
  const h = await startHarness();
  console.log(
    `# stack up in ${f((performance.now() - tStart) / 1000)} s (Temporal dev server, Postgres database ${h.db.name}, control + pool worker, CPU engine pid ${h.pool.supervisor?.pid})`,
  );
  const jobs: Job[] = [];
  try {
    // Warm-up, not recorded: JIT, workflow caches and engine sessions. The in-process loop at
    // every size (the engine's batch shapes), both Troupe modes once at the smallest size.
    const warmSteps = Math.min(STEPS, 2);
    for (const size of SIZES) if (MODES.includes('inprocess')) await runJob(h, size, 'inprocess', -1, '-warm', warmSteps);
    for (const mode of MODES) if (mode !== 'inprocess' && runs(SIZES[0]!, mode)) await runJob(h, SIZES[0]!, mode, -1, '-warm', warmSteps);
    console.log(`# warm-up done at ${f((performance.now() - tStart) / 1000)} s`);

    for (const size of SIZES) {
      for (let round = 0; round < ROUNDS; round++) {
        for (const mode of MODES) {
          if (!runs(size, mode)) continue;
          const job = await runJob(h, size, mode, round);
          jobs.push(job);
          console.log(
            `  ${size.label} round ${round} ${mode.padEnd(9)} step ${f(median(job.stepSeconds) * 1000, 0).padStart(6)} ms  job ${f(job.wallSeconds, 1).padStart(5)} s  final eval ${f(job.finalEval, 3)}`,
          );
        }
      }
    }

    // ---- micro-timings of the store and advantage work in one batched step at the default size
    const ref = jobs.find((j) => j.mode === 'batched' && j.size === DEFAULT_SIZE) ?? jobs.find((j) => j.mode === 'batched');
    const micro = ref ? await storeMicro(h, ref) : undefined;

    // ---- durable: history events and activities per step, keyed `mode size`
    const durableCounts: Record<string, DurableCounts> = {};
    for (const size of SIZES)
      for (const mode of MODES.filter(durableLike)) {
        const job = jobs.find((j) => j.mode === mode && j.size === size.label);
        if (!job?.troupe) continue;
        const step = job.troupe.steps[1] ?? job.troupe.steps[0]!;
        let childEvents = 0;
        let childActivities = 0;
        const timings: ChildTimings[] = [];
        const ids: string[] = [];
        const episodes = size.groups * size.groupSize;
        const plan = { runId: job.runId, step: step.step, rule: { split: 'train' as const, seed: 0, groupsPerStep: size.groups, groupSize: size.groupSize } };
        const per = mode === 'grouped' ? PER_WORKFLOW : 1;
        for (let at = 0; at < episodes; at += per) ids.push(per > 1 ? episodeGroupIdOf(plan, at, Math.min(at + per, episodes)) : episodeIdOf(plan, at));
        for (const id of ids) {
          const history = await h.env.client.workflow.getHandle(id).fetchHistory();
          const c = childCounts(history);
          childEvents += c.events;
          childActivities += c.activities;
          timings.push(childTimings(history));
        }
        durableCounts[`${mode} ${size.label}`] = { parentEvents: step.spans.events, childEvents, childActivities, episodes, workflows: ids.length, timings };
      }
    const batchedEvents: Record<string, number> = {};
    for (const size of SIZES) {
      const job = jobs.find((j) => j.mode === 'batched' && j.size === size.label);
      if (job?.troupe) batchedEvents[size.label] = median(job.troupe.steps.slice(1).map((s) => s.spans.events));
    }

    report(jobs, micro, durableCounts, batchedEvents, (performance.now() - tStart) / 1000);
  } finally {
    await h.shutdown();
  }
}

interface DurableCounts {
  parentEvents: number;
  childEvents: number;
  childActivities: number;
  episodes: number;
  /** child workflows the episodes ran in */
  workflows: number;
  timings: ChildTimings[];
}

interface Micro {
  episodes: number;
  perEpisodeSaveMs: number;
  bulkSaveMs: number;
  loadMs: number;
  buildMs: number;
  versionOfStepMs: number;
  exportMs: number;
}

/** Re-does the store and advantage work of one step of a finished batched run, in isolation. */
async function storeMicro(h: Harness, job: Job): Promise<Micro> {
  const sql = h.db.sql;
  const step = 1;
  const config = parseRunConfig(
    jobConfig(
      SIZES.find((s) => s.label === job.size)!,
      'batched',
      job.runId,
    ),
  );
  const team = loadTeam(config.team, config.teamOptions);
  const settings = checkAgainstTeam(config, team);
  const reps = 3;
  const timeIt = async (fn: () => Promise<unknown>) => {
    const xs: number[] = [];
    for (let i = 0; i < reps; i++) {
      const t = performance.now();
      await fn();
      xs.push(performance.now() - t);
    }
    return median(xs);
  };
  let episodes: StoredEpisode[] = [];
  const loadMs = await timeIt(async () => (episodes = await loadStepEpisodes(sql, job.runId, step, 'train')));
  const buildMs = await timeIt(async () => buildStepBatch(episodes, settings));
  const versionOfStepMs = await timeIt(() => versionOfStep(sql, job.runId, Object.keys(team.models)[0]!, step));
  const exportMs = await timeIt(() =>
    Promise.all(
      Object.keys(team.models).map((m) => h.pool.getClient().exportVersion({ modelKey: modelKey(job.runId, m), version: job.troupe!.summary.versions[m]! })),
    ),
  );
  // Writes: the same episodes under fresh ids (a scratch step number), as rolloutBatch writes them (all at once) ...
  let rep = 0;
  const copy = (tag: string, scratchStep: number) =>
    episodes.map((e) => {
      const episodeId = `${e.meta.episodeId}:${tag}`;
      return { meta: { ...e.meta, episodeId, step: scratchStep }, trajectory: { ...e.trajectory, episodeId }, rewards: e.rewards, success: e.success };
    });
  // scratch steps 100000.. (one transaction per episode, all concurrent: how rolloutBatch
  // stored episodes before flushes) and 200000.. (all in one transaction); never read by the run
  const perEpisodeSaveMs = await timeIt(async () => {
    const batch = copy(`resave${rep}`, 100_000 + rep++);
    await Promise.all(batch.map((e) => saveEpisodes(sql, [e])));
  });
  const bulkSaveMs = await timeIt(async () => {
    const batch = copy(`bulk${rep}`, 200_000 + rep++);
    await saveEpisodes(sql, batch);
  });
  return { episodes: episodes.length, perEpisodeSaveMs, bulkSaveMs, loadMs, buildMs, versionOfStepMs, exportMs };
}

type Out = (line?: string) => void;

/** The jobs of one batch size and mode. */
const jobsOf = (jobs: Job[]) => (size: string, mode: Mode) => jobs.filter((j) => j.size === size && j.mode === mode);
const stepMs = (js: Job[]) => median(js.flatMap((j) => j.stepSeconds)) * 1000;

/** Wall time per step of every mode and its ratio to the in-process loop. */
function stepTable(out: Out, jobs: Job[]) {
  const by = jobsOf(jobs);
  const ratioOf = (size: string, mode: Mode) => {
    // one ratio per round (same round = adjacent in time), then the median over rounds
    const rs: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const a = by(size, 'inprocess').find((j) => j.round === r);
      const b = by(size, mode).find((j) => j.round === r);
      if (a && b) rs.push(median(b.stepSeconds) / median(a.stepSeconds));
    }
    return { ratio: median(rs), min: Math.min(...rs), max: Math.max(...rs) };
  };
  out('## Wall time per training step (median over steps 1..N-1 of every round) and ratio to the in-process loop');
  out();
  out(
    '| batch (groups x size) | episodes/step | mode | ms/step | ratio (median of rounds) | ratio range | job wall s | CPU s/step main / engine / temporal / postgres | same updates as in-process |',
  );
  out('|---|---|---|---|---|---|---|---|---|');
  for (const size of SIZES) {
    const base = by(size.label, 'inprocess')[0];
    for (const mode of MODES) {
      const js = by(size.label, mode);
      if (js.length === 0) continue;
      const r = mode === 'inprocess' ? { ratio: 1, min: 1, max: 1 } : ratioOf(size.label, mode);
      const cpu = (k: keyof CpuSample) => median(js.map((j) => j.cpu[k] / j.gradNorm.length));
      out(
        `| ${size.label} | ${size.groups * size.groupSize} | ${mode} | ${f(stepMs(js), 0)} | ${f(r.ratio, 2)}x | ${f(r.min, 2)}-${f(r.max, 2)} | ${f(median(js.map((j) => j.wallSeconds)), 1)} | ${f(cpu('main'), 2)} / ${f(cpu('engine'), 2)} / ${f(cpu('temporal'), 2)} / ${f(cpu('postgres'), 2)} | ${base && mode !== 'inprocess' ? sameUpdates(base, js[0]!) : '-'} |`,
      );
    }
  }
  out();
  out(
    "CPU s/step: CPU seconds of each process group over the whole job divided by the steps (includes the job's two 32-task evals); the machine has 2 cores shared by all of them.",
  );
}

/** Durable rollouts: overhead per agent turn and history events per step. */
function durableTable(out: Out, jobs: Job[], durable: Record<string, DurableCounts>, batchedEvents: Record<string, number>) {
  const by = jobsOf(jobs);
  out();
  out('## Durable rollouts: overhead per agent turn and Temporal history events per step');
  out();
  out(
    '| batch | mode (episodes per workflow) | agent turns/step | generate activities/step | tool activities/step | durable - in-process ms/step | overhead ms per agent turn | per activity | history events/step: parent + children = total | events per episode | batched: parent events/step |',
  );
  out('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const size of SIZES)
    for (const mode of MODES.filter(durableLike)) {
      const ip = by(size.label, 'inprocess')[0]?.inprocess;
      const d = durable[`${mode} ${size.label}`];
      if (!ip || !d || by(size.label, mode).length === 0) continue;
      const st = ip.steps[1] ?? ip.steps[0]!;
      const extra = stepMs(by(size.label, mode)) - stepMs(by(size.label, 'inprocess'));
      const activities = st.generates + st.toolCalls + d.episodes; // + recordEpisode per episode
      out(
        `| ${size.label} | ${mode} (${f(d.episodes / d.workflows, 0)}) | ${st.turns} | ${st.generates} | ${st.toolCalls} | ${f(extra, 0)} | ${f(extra / st.turns, 2)} | ${f(extra / activities, 2)} | ${d.parentEvents} + ${d.childEvents} = ${d.parentEvents + d.childEvents} | ${f(d.childEvents / d.episodes, 1)} | ${f(batchedEvents[size.label] ?? NaN, 0)} |`,
      );
    }
  out();
  out(
    "Activities per episode = its generate segments + tool calls + one recordEpisode. Events per step count the parent's events of that step plus the full histories of its episode children.",
  );
}

/** Where the time goes in one step of `mode`, part by part, beside the in-process loop. */
function timeTable(out: Out, jobs: Job[], mode: Exclude<Mode, 'inprocess'>, micro: Micro | undefined, durable: Record<string, DurableCounts>) {
  const by = jobsOf(jobs);
  const batchedLike = !durableLike(mode);
  const js = by(DEFAULT_SIZE, mode).filter((j) => j.troupe);
  const ipJobs = by(DEFAULT_SIZE, 'inprocess').filter((j) => j.inprocess);
  if (js.length === 0 || ipJobs.length === 0) return;
  const steps = js.flatMap((j) => j.troupe!.steps.slice(1));
  const ipSteps = ipJobs.flatMap((j) => j.inprocess!.steps.slice(1));
  const med = (fn: (s: (typeof steps)[number]) => number) => median(steps.map(fn));
  const ex = (s: (typeof steps)[number], t: string) => execSpan(s.spans.activities, t)?.ms ?? 0;
  const wall = med((s) => s.seconds * 1000);
  const plan = med((s) => ex(s, 'planStep'));
  const rollout = batchedLike ? med((s) => ex(s, 'rolloutBatch')) : med((s) => (s.spans.childEnd ?? 0) - (s.spans.childStart ?? 0));
  const update = med((s) => ex(s, 'updateModel'));
  const finish = med((s) => ex(s, 'finishStep'));
  const rolloutQ = batchedLike ? med((s) => execSpan(s.spans.activities, 'rolloutBatch')?.queuedMs ?? 0) : NaN;
  const updateQ = med((s) => execSpan(s.spans.activities, 'updateModel')?.queuedMs ?? 0);
  const orchestration = med(
    (s) =>
      s.seconds * 1000 -
      ex(s, 'planStep') -
      (batchedLike ? ex(s, 'rolloutBatch') : (s.spans.childEnd ?? 0) - (s.spans.childStart ?? 0)) -
      ex(s, 'updateModel') -
      ex(s, 'finishStep'),
  );
  const ipm = (k: keyof (typeof ipSteps)[number]['phases']) => median(ipSteps.map((s) => s.phases[k] * 1000));
  const ipWall = median(ipSteps.map((s) => s.seconds * 1000));
  const team = med((s) => (s.metrics.rolloutSeconds ?? 0) * 1000);
  const upd = med((s) => (s.metrics.updateSeconds ?? 0) * 1000);
  out();
  out(`## Where the time goes in one ${mode} step (${DEFAULT_SIZE}, medians over steps 1..N-1, ms)`);
  out();
  out(
    `Step metrics (Postgres \`metrics\`, scope team): rolloutSeconds ${f(team, 0)} ms, updateSeconds ${f(upd, 0)} ms; step wall from the workflow history ${f(wall, 0)} ms; in-process step ${f(ipWall, 0)} ms.`,
  );
  out();
  out('| part | Troupe ms | in-process ms | how measured |');
  out('|---|---|---|---|');
  out(`| plan (planStep, a local activity) | ${f(plan, 1)} | ${f(ipm('plan'), 1)} | history: activity started -> completed |`);
  if (batchedLike) {
    out(`| rollout activity (rolloutBatch) | ${f(rollout, 0)} | ${f(ipm('rollout') + ipm('reward'), 0)} | history; in-process = generation + tools + reward |`);
    out(`| - generation + tools | | ${f(ipm('rollout'), 0)} | in-process loop, same tokens |`);
    out(`| - reward (scoreEpisode) | | ${f(ipm('reward'), 1)} | in-process loop |`);
    if (micro)
      out(
        `| - store: saveEpisodes, ${micro.episodes} episodes in one transaction | ${f(micro.bulkSaveMs, 0)} (isolated) | - | re-saved step 1's episodes under new ids; in the step, flushes of 32 overlap generation |`,
      );
    out(
      `| - rest of rollout activity (store writes overlapping generation, heartbeats) | ${f(rollout - ipm('rollout') - ipm('reward'), 0)} | - | rollout activity - in-process rollout - reward |`,
    );
  } else {
    out(
      `| rollout (episode children: first start -> last completion) | ${f(rollout, 0)} | ${f(ipm('rollout') + ipm('reward'), 0)} | history; includes every generate/tool/recordEpisode activity and child workflow task |`,
    );
    const d = durable[`${mode} ${DEFAULT_SIZE}`];
    if (d) {
      const t = d.timings;
      const wf = t.flatMap((c) => c.workflowTasks);
      const firstWf = t.map((c) => c.workflowTasks[0]?.execMs ?? 0);
      const acts = t.flatMap((c) => c.activities);
      const actOf = (type: string) => acts.filter((a) => a.type === type);
      out(
        `| - one child workflow (${f(d.episodes / d.workflows, 0)} episodes), start -> completion (median of ${t.length}) | ${f(median(t.map((c) => c.durationMs)), 0)} | - | child history |`,
      );
      out(
        `| - workflow tasks per episode: ${f(wf.length / d.episodes, 1)}; queue wait / execution (median) | ${f(median(wf.map((w) => w.queuedMs)), 0)} / ${f(median(wf.map((w) => w.execMs)), 0)} | - | execution = from the worker's poll to its completion, waits inside the worker included; first task ${f(median(firstWf), 0)} ms |`,
      );
      for (const type of [...new Set(acts.map((a) => a.type))]) {
        const xs = actOf(type);
        out(
          `| - ${type} activities per episode: ${f(xs.length / d.episodes, 2)}; queue wait / execution (median) | ${f(median(xs.map((a) => a.queuedMs)), 0)} / ${f(median(xs.map((a) => a.execMs)), 0)} | - | child histories |`,
        );
      }
    }
  }
  out(
    `| update activities (updateModel, parallel per model) | ${f(update, 0)} | ${f(ipm('advantage') + ipm('update'), 0)} | history; in-process = advantage + engine Update |`,
  );
  if (micro && batchedLike) {
    out(`| - load the step's episodes (loadStepEpisodes) | ${f(micro.loadMs, 0)} | - | isolated re-run |`);
    out(`| - advantage (buildStepBatch) | ${f(micro.buildMs, 1)} | ${f(ipm('advantage'), 1)} | isolated re-run / in-process loop |`);
    out(`| - engine Update | | ${f(ipm('update'), 0)} | in-process loop |`);
    out(`| - versionOfStep + exportVersion | ${f(micro.versionOfStepMs + micro.exportMs, 1)} | - | isolated re-run |`);
    out(
      `| - commit (weights, metrics, step row) + rest | ${f(update - micro.loadMs - micro.buildMs - ipm('update') - micro.versionOfStepMs - micro.exportMs, 0)} | - | update activity - the parts above |`,
    );
  }
  out(`| finishStep (step metrics to Postgres, a local activity) | ${f(finish, 1)} | - | history |`);
  out(
    `| orchestration (everything between activity executions) | ${f(orchestration, 0)} | - | step wall - activity executions; of which queue wait before rollout ${f(rolloutQ, 1)} ms, before update ${f(updateQ, 1)} ms |`,
  );
  out(`| **step** | **${f(wall, 0)}** | **${f(ipWall, 0)}** | |`);
}

/** bench/results/orchestration.md and .json. */
function writeResults(lines: string[], jobs: Job[], micro: Micro | undefined, durable: Record<string, DurableCounts>) {
  fs.mkdirSync(RESULTS, { recursive: true });
  fs.writeFileSync(path.join(RESULTS, 'orchestration.md'), lines.join('\n') + '\n');
  const slim = jobs.map(({ inprocess, troupe, ...j }) => ({
    ...j,
    phases: inprocess?.steps.map((s) => s.phases),
    troupeSteps: troupe?.steps.map((s) => ({
      step: s.step,
      seconds: s.seconds,
      events: s.spans.events,
      rolloutSeconds: s.metrics.rolloutSeconds,
      updateSeconds: s.metrics.updateSeconds,
    })),
  }));
  fs.writeFileSync(
    path.join(RESULTS, 'orchestration.json'),
    JSON.stringify({
      command: COMMAND,
      date: new Date().toISOString(),
      steps: STEPS,
      durableSteps: DURABLE_STEPS,
      rounds: ROUNDS,
      micro,
      durable: Object.fromEntries(
        Object.entries(durable).map(([k, { timings, ...d }]) => [k, { ...d, medianEpisodeMs: median(timings.map((t) => t.durationMs)) }]),
      ),
      jobs: slim,
    }) + '\n',
  );
  console.log(`\nwrote ${path.relative(process.cwd(), path.join(RESULTS, 'orchestration.md'))} and orchestration.json`);
}

function report(jobs: Job[], micro: Micro | undefined, durable: Record<string, DurableCounts>, batchedEvents: Record<string, number>, totalSeconds: number) {
  const lines: string[] = [];
  const out = (l = '') => {
    lines.push(l);
    console.log(l);
  };
  out(`# ${COMMAND}`);
  out(
    `# ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'}), load ${os
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}, bench took ${f(totalSeconds, 0)} s`,
  );
  out();
  out(
    `Job: bundled math team (shared policy), seed 0, groups x group size as below, ${STEPS} steps (durable ${DURABLE_STEPS}), evalEvery 0, evalTasks 32, CPU engine; ${ROUNDS} rounds, modes interleaved in each round. "Same updates" compares the gradient norm of every step and model with the in-process loop's.`,
  );
  out();
  stepTable(out, jobs);
  durableTable(out, jobs, durable, batchedEvents);
  for (const mode of ['batched', 'durable', 'grouped'] as const) timeTable(out, jobs, mode, micro, durable);
  if (micro) {
    out();
    out(
      `Store writes: the ${micro.episodes} episodes of a step in one transaction with one multi-row INSERT per table (saveEpisodes, as rolloutBatch flushes) take ${f(micro.bulkSaveMs, 0)} ms against ${f(micro.perEpisodeSaveMs, 0)} ms as ${micro.episodes} concurrent one-episode transactions (isolated, same rows).`,
    );
  }

  if (!values['no-write']) writeResults(lines, jobs, micro, durable);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
