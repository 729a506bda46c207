/**
 * Chaos runs: a real training run of a bundled team (`math`, or `recall`, a
 * transformer, in the TRANSFORMER schedules) on a stack of
 * separate processes (testing/chaos/stack.ts), while a seeded schedule SIGKILLs
 * the control worker, the pool worker, the engine, the Temporal dev server and
 * PostgreSQL at random moments, each followed by a restart after a short
 * delay. Afterwards the run is compared with an uninterrupted run of the same
 * config on the same stack (testing/chaos/compare.ts).
 *
 * Used by test/integration/chaos/chaos.test.ts (short, in `npm test`; long with
 * TROUPE_CHAOS_LONG=1) and runnable on its own:
 *
 *   node --import tsx testing/chaos/chaos.ts [--long] [--no-pause | --transformer] [--seed N] [--kills N] [--steps N] [--modes batched,durable]
 *                                         [--kinds control-worker,pool-worker,engine,temporal,postgres] [--staleness K]
 *                                         [--partial [--max-carry-steps N]]
 *
 * --no-pause: the no-pause, double-kill discipline (SHORT_NO_PAUSE, or LONG_NO_PAUSE with --long).
 * --transformer: the `recall` team's transformer (SHORT_TRANSFORMER, or LONG_TRANSFORMER with --long).
 * --staleness K: asynchronous runs (SHORT_STALE, or LONG_STALE with --long), kills land while rollouts
 * of later steps overlap updates.
 * --partial: partial rollouts (SHORT_PARTIAL, or LONG_PARTIAL with --long); with --staleness K too, asynchronously
 * (SHORT_PARTIAL_STALE, or LONG_PARTIAL_STALE with --long, for K = 1). --max-carry-steps N sets partialRollouts.maxCarrySteps (LONG_PARTIAL: 1).
 *
 * The pieces: schedules.ts (options, presets, the kill schedule), kills.ts (playing it against a
 * run), observe.ts (the server's record of the run), report.ts (what a run reports, as text).
 */
import { parseArgs } from 'node:util';
import { WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import type { trainingRun, RunSummary } from '../../workflows/training-run';
import { episodeRetentionOf, planEpisodePrune, pruneEpisodes } from '../../activities/store/episode-retention';
import { compareRuns, loadStoredRun } from './compare';
import { inflict } from './kills';
import { measureWorkflowTasks } from './observe';
import type { ChaosReport, KillRecord, ModeReport, PartialWork } from './report';
import { formatReport } from './report';
import {
  LONG,
  LONG_NO_PAUSE,
  LONG_PARTIAL,
  LONG_PARTIAL_STALE,
  LONG_STALE,
  LONG_TRANSFORMER,
  runConfig,
  schedule,
  SHORT,
  SHORT_NO_PAUSE,
  SHORT_PARTIAL,
  SHORT_STALE,
  SHORT_TRANSFORMER,
  type ChaosOptions,
  type Mode,
} from './schedules';
import { FAULT_KINDS, startChaosStack, type ChaosStack, type FaultKind } from './stack';
import { WorkMeter, workAfterLastKill, type EngineWork } from './work-meter';

export * from './schedules';
export * from './report';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The run's result, waiting through server restarts (bounded by `deadline`). */
async function outcome(handle: WorkflowHandle<typeof trainingRun>, deadline: number): Promise<{ summary?: RunSummary; error?: string }> {
  for (;;) {
    try {
      return { summary: await handle.result() };
    } catch (e) {
      if (e instanceof WorkflowFailedError)
        return { error: `${e.message}: ${(e.cause as Error | undefined)?.message ?? ''} ${(e.cause as { cause?: Error })?.cause?.message ?? ''}`.trim() };
      if (Date.now() > deadline) return { error: `no result within the time limit (last error: ${(e as Error).message})` };
      await sleep(1000); // the server is restarting
    }
  }
}

/** The twin's per-step sampled and served tokens (its partial.* metrics), held against the engines' counters. */
async function partialWork(
  stack: ChaosStack,
  twinId: string,
  chaosId: string,
  steps: number,
  work: { baseline: EngineWork; chaos: EngineWork },
  kills: KillRecord[],
): Promise<PartialWork> {
  const rows = await stack.sql`SELECT step, name, value FROM metrics WHERE run_id = ${twinId} AND kind = 'train' AND scope = 'team'
    AND name IN ('partial.generatedTokens', 'partial.replayedTokens') ORDER BY step`;
  const per = (name: string) => Array.from({ length: steps }, (_, t) => Number(rows.find((r) => r.step === t && r.name === name)?.value ?? NaN));
  const stepTokens = per('partial.generatedTokens');
  const chaos =
    await stack.sql`SELECT step, value FROM metrics WHERE run_id = ${chaosId} AND kind = 'train' AND scope = 'team' AND name = 'partial.generatedTokens' ORDER BY step`;
  // The sampled tokens of the twin's eval turns (loss mask 1), per eval step: the initial eval (step 0) and the final one.
  const evalRows = await stack.sql`SELECT e.step, coalesce(sum((SELECT count(*) FROM unnest(t.loss_mask) m WHERE m = 1)), 0)::int AS sampled
    FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${twinId} AND e.split = 'eval' GROUP BY e.step`;
  const evalAt = (step: number) => Number(evalRows.find((r) => r.step === step)?.sampled ?? 0);
  const evalTokens = { initial: evalAt(0), final: evalAt(steps) };
  return {
    stepTokens,
    chaosStepTokens: chaos.map((r) => Number(r.value)),
    evalTokens,
    tokensByEngine: { twin: work.baseline.tokensByEngine, chaos: work.chaos.tokensByEngine },
    servedTokens: per('partial.replayedTokens'),
    killedAttemptTokens: work.chaos.tokensGenerated - work.baseline.tokensGenerated,
    after: workAfterLastKill(stepTokens, evalTokens, work.baseline.tokensGenerated, work.chaos.tokensByEngine, kills.at(-1)?.stepsDone ?? 0),
  };
}

/** The steps whose rollout held groups at maxCarrySteps (the run's partial.heldGroups metric). */
async function heldIn(stack: ChaosStack, runId: string): Promise<number[]> {
  const rows = await stack.sql`SELECT step FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND scope = 'team'
    AND name = 'partial.heldGroups' AND value > 0 ORDER BY step`;
  return rows.map((r) => Number(r.step));
}

/**
 * What the background retention pruned of the first run, then one pass by hand over every run in `runIds`
 * with the same policy: the loop's passes land at different moments in each run, and the compared runs
 * must hold the same steps.
 */
async function settleRetention(stack: ChaosStack, runIds: string[], keepSteps: number): Promise<{ background: number; byHand: number }> {
  const background = (await episodeRetentionOf(stack.sql, runIds[0]!))?.trainEpisodes ?? 0;
  const policy = { keepSteps, sample: 0 };
  let byHand = 0;
  for (const runId of runIds)
    for (const plan of await planEpisodePrune(stack.sql, policy, { runId })) {
      const pruned = await pruneEpisodes(stack.sql, plan, policy);
      if (runId === runIds[0]) byHand += pruned.episodes;
    }
  return { background, byHand };
}

export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const log = options.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const started = Date.now();
  const retention = options.retention && {
    TROUPE_RETENTION_EPISODE_STEPS: String(options.retention.keepSteps),
    TROUPE_RETENTION_INTERVAL_MINUTES: String(options.retention.intervalSeconds / 60),
  };
  const stack = await startChaosStack({ log: (l) => log(`  up: ${l}`), ...(retention ? { env: retention } : {}) });
  log(`chaos: stack up in ${((Date.now() - started) / 1000).toFixed(1)}s (state ${stack.stateDir})`);
  const reports: ModeReport[] = [];
  const start = (id: string, mode: Mode) =>
    stack.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: stack.config.taskQueue, workflowId: id, args: [runConfig(options, mode)] });
  let failed = false;
  try {
    // The uninterrupted twins first, side by side (one at a time when metered), before any fault.
    const twin = async (mode: Mode) => {
      const t = Date.now();
      const meter = options.meterWork ? new WorkMeter(stack) : undefined;
      await meter?.start();
      const result = await outcome(await start(`uninterrupted-${mode}`, mode), Date.now() + options.runTimeoutMs);
      return { mode, ...result, seconds: (Date.now() - t) / 1000, work: await meter?.stop() };
    };
    const t = Date.now();
    const baselines = [];
    if (options.meterWork) for (const mode of options.modes) baselines.push(await twin(mode));
    else baselines.push(...(await Promise.all(options.modes.map(twin))));
    const bothSeconds = (Date.now() - t) / 1000;
    for (const b of baselines) if (!b.summary) throw new Error(`the uninterrupted ${b.mode} run failed: ${b.error}`);
    log(`chaos: uninterrupted runs done in ${bothSeconds.toFixed(1)}s`);

    for (const mode of options.modes) {
      const plan = schedule(options, mode);
      const workflowId = `chaos-${mode}`;
      const twinOf = baselines.find((b) => b.mode === mode)!;
      const baselineSeconds = options.meterWork ? twinOf.seconds : bothSeconds;
      const meter = options.meterWork ? new WorkMeter(stack) : undefined;
      await meter?.start();
      const t1 = Date.now();
      const handle = await start(workflowId, mode);
      let done = false;
      const result = outcome(handle, t1 + options.runTimeoutMs).finally(() => (done = true));
      const stepMs = (baselineSeconds * 1000) / options.steps[mode];
      const { kills, unplanned } = await inflict(
        stack,
        workflowId,
        options.steps[mode],
        plan,
        { busyWaitMs: options.busyWaitMs, stepMs, noPause: options.noPause, beforeKill: meter && (() => meter.sample()) },
        () => done,
        log,
      );
      // After the schedule: keep everything up until the run ends (bounded by the run's deadline).
      while (!done && Date.now() < t1 + options.runTimeoutMs) {
        const again = await stack.restart();
        unplanned.push(...again.map((d) => `${d.kind} found dead after the schedule: ${d.cause}`));
        await Promise.race([result, sleep(2000)]);
      }
      const { summary, error } = await result;
      const chaosSeconds = (Date.now() - t1) / 1000;
      const work = meter && { baseline: twinOf.work!, chaos: await meter.stop() };
      await stack.restart(); // the store must be up to compare
      const report: ModeReport = {
        mode,
        steps: options.steps[mode],
        status: summary?.status ?? 'failed',
        error,
        baselineSeconds,
        chaosSeconds,
        kills,
        unplanned,
        identical: false,
        ...(work ? { work } : {}),
      };
      if (summary) {
        await measureWorkflowTasks(stack, workflowId, kills).catch((e) => log(`chaos: could not read histories: ${(e as Error).message}`));
        const models = Object.keys(summary.versions);
        if (options.retention) report.retention = await settleRetention(stack, [workflowId, `uninterrupted-${mode}`], options.retention.keepSteps);
        const stored = await loadStoredRun(stack.sql, workflowId);
        report.comparison = compareRuns(await loadStoredRun(stack.sql, `uninterrupted-${mode}`), stored, options.steps[mode], models);
        if (options.partialRollouts)
          report.carriedInto = [...stored.episodes.keys()].filter((k) => k.startsWith('carried/')).map((k) => Number(k.slice('carried/'.length)));
        if (options.partialRollouts?.maxCarrySteps !== undefined) report.heldIn = await heldIn(stack, workflowId);
        if (options.partialRollouts && work)
          report.partialWork = await partialWork(stack, `uninterrupted-${mode}`, workflowId, options.steps[mode], work, kills);
        report.identical = summary.status === 'completed' && summary.steps === options.steps[mode] && report.comparison.problems.length === 0;
      }
      log(
        `chaos: ${mode}: ${report.status} in ${chaosSeconds.toFixed(1)}s with ${kills.length} kills; identical: ${report.identical}${error ? `; ${error}` : ''}`,
      );
      for (const p of report.comparison?.problems.slice(0, 10) ?? []) log(`chaos:   ${p}`);
      reports.push(report);
    }
  } catch (e) {
    failed = true;
    throw e;
  } finally {
    // Keep the state dir (logs, SQLite, data) when something went wrong.
    const keepState = failed || reports.some((r) => !r.identical || r.unplanned.length > 0);
    await stack.shutdown({ keepState });
    if (keepState) log(`chaos: state kept in ${stack.stateDir}`);
  }
  return { options: { ...options, log: undefined } as Omit<ChaosOptions, 'log'>, modes: reports, seconds: (Date.now() - started) / 1000 };
}

async function main() {
  const { values } = parseArgs({
    options: {
      long: { type: 'boolean' },
      'no-pause': { type: 'boolean' },
      transformer: { type: 'boolean' },
      seed: { type: 'string' },
      'run-seed': { type: 'string' },
      kills: { type: 'string' },
      steps: { type: 'string' },
      modes: { type: 'string' },
      kinds: { type: 'string' },
      staleness: { type: 'string' },
      partial: { type: 'boolean' },
      'max-carry-steps': { type: 'string' },
    },
  });
  const long = values.long || process.env.TROUPE_CHAOS_LONG === '1';
  if ([values['no-pause'], values.transformer, values.staleness && !values.partial, values.partial].filter(Boolean).length > 1)
    throw new Error('--no-pause, --transformer, --staleness and --partial (alone or with --staleness): choose one schedule');
  if (values['max-carry-steps'] !== undefined && !values.partial) throw new Error('--max-carry-steps: only with --partial');
  const partial = long ? (values.staleness ? LONG_PARTIAL_STALE : LONG_PARTIAL) : SHORT_PARTIAL;
  const base = values.partial
    ? {
        ...partial,
        ...(values.staleness ? { staleness: Number(values.staleness) } : {}),
        ...(values['max-carry-steps'] !== undefined
          ? { partialRollouts: { ...partial.partialRollouts, maxCarrySteps: Number(values['max-carry-steps']) } }
          : {}),
      }
    : values.staleness
      ? { ...(long ? LONG_STALE : SHORT_STALE), staleness: Number(values.staleness) }
      : values['no-pause']
        ? long
          ? LONG_NO_PAUSE
          : SHORT_NO_PAUSE
        : values.transformer
          ? long
            ? LONG_TRANSFORMER
            : SHORT_TRANSFORMER
          : long
            ? LONG
            : SHORT;
  const steps = values.steps ? Number(values.steps) : undefined;
  const options: ChaosOptions = {
    ...base,
    seed: values.seed ? Number(values.seed) : Number(process.env.TROUPE_CHAOS_SEED ?? base.seed),
    runSeed: values['run-seed'] ? Number(values['run-seed']) : base.runSeed,
    kills: values.kills ? Number(values.kills) : base.kills,
    steps: steps ? { batched: steps, durable: steps } : base.steps,
    modes: values.modes ? (values.modes.split(',') as Mode[]) : base.modes,
    kinds: values.kinds ? (values.kinds.split(',') as FaultKind[]) : base.kinds,
  };
  const unknown = options.kinds.filter((k) => !FAULT_KINDS.includes(k));
  if (unknown.length) throw new Error(`--kinds: unknown ${unknown.join(', ')} (known: ${FAULT_KINDS.join(', ')})`);
  const report = await runChaos(options);
  console.log(formatReport(report));
  return report.modes.every((m) => m.identical) ? 0 : 1;
}

if (require.main === module) {
  main().then(
    (code) => process.exit(code),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
}
