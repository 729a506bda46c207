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
 */
import { parseArgs } from 'node:util';
import { WorkflowFailedError, WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import type { trainingRun, RunSummary } from '../../workflows/training-run';
import { pauseSignal, resumeSignal } from '../../workflows/definitions';
import { seededRandom } from '../../agents/seed';
import { logFilePath, pidAlive, tailFile } from '../../stack/processes';
import { TroupeStep } from '../../infra/search-attributes';
import { compareRuns, loadStoredRun, type Comparison } from './compare';
import { FAULT_KINDS, startChaosStack, type ChaosStack, type FaultKind } from './stack';
import { WorkMeter, workAfterLastKill, type EngineWork } from './work-meter';

export type Mode = 'batched' | 'durable';

export interface ChaosOptions {
  /** The bundled team trained, and its options. */
  team: { name: string; options?: Record<string, unknown> };
  /** Seed of the kill schedule (kinds, moments, restart delays). */
  seed: number;
  /** Seed of the training runs (the same for the chaos run and its uninterrupted twin). */
  runSeed: number;
  modes: Mode[];
  /** Training steps per mode. */
  steps: Record<Mode, number>;
  /** Kills per mode; kinds are dealt round-robin from seeded shuffles of `kinds`, so each kind comes up evenly. */
  kills: number;
  kinds: readonly FaultKind[];
  /** Random wait before each kill, as a share of an uninterrupted step's time (the kill lands inside a step). */
  gapShare: [number, number];
  /** A worker or engine kill waits up to this long (ms) for an activity to be running on it. */
  busyWaitMs: number;
  /** Random delay between a kill and the restart (ms). */
  restartDelayMs: [number, number];
  /** Give up on a run after this long (ms). */
  runTimeoutMs: number;
  /** Never pause the run around kills (kills that come after its end are skipped). */
  noPause?: boolean;
  /**
   * Double kills: the same process again this long (ms, seeded in the range) after it is
   * back; an engine is killed again as soon as its successor exists (before it listens), and
   * a restarted pool worker's first engine is killed while the worker starts. Unset: one kill each.
   */
  againAfterMs?: [number, number];
  /**
   * Share of kills (seeded) that take a second process down at the same moment, its partner
   * in PAIRS (Temporal + PostgreSQL, control + pool worker). Unset: none.
   */
  pairShare?: number;
  /** The runs' staleness k (asynchronous RL); unset: synchronous. */
  staleness?: number;
  /** Steps between evals; unset: 3. 0: only the final eval (what the partial-rollout work check needs). */
  evalEvery?: number;
  /** The runs' partialRollouts setting (batched; maxCarrySteps: groups carried that often are held); unset: off. */
  partialRollouts?: { overProvision?: number; minFinished?: number; maxCarrySteps?: number };
  /**
   * Measure the engines' work (work-meter.ts) in each run: the uninterrupted twins then run one
   * at a time, so each one's work and wall time are its own (bench/lost-work.ts).
   */
  meterWork?: boolean;
  log?: (line: string) => void;
}

export const SHORT: Omit<ChaosOptions, 'log'> = {
  team: { name: 'math' },
  seed: 1,
  runSeed: 7,
  modes: ['batched', 'durable'],
  steps: { batched: 20, durable: 7 },
  kills: 5,
  kinds: FAULT_KINDS,
  gapShare: [0.05, 0.9],
  restartDelayMs: [300, 1500],
  busyWaitMs: 2000,
  runTimeoutMs: 240_000,
};

/**
 * No pauses, and each process killed twice: again 0.5-1.7 s after it is back, so a worker
 * or an engine dies during its own start-up (issue 18). Batched only, to fit the CI budget.
 */
export const SHORT_NO_PAUSE: Omit<ChaosOptions, 'log'> = {
  ...SHORT,
  seed: 3,
  modes: ['batched'],
  steps: { batched: 20, durable: 7 },
  kills: 3,
  kinds: ['engine', 'pool-worker', 'temporal'],
  noPause: true,
  againAfterMs: [500, 1700],
};

export const LONG: Omit<ChaosOptions, 'log'> = {
  ...SHORT,
  steps: { batched: 60, durable: 20 },
  kills: 15,
  restartDelayMs: [200, 3000],
  runTimeoutMs: 1_800_000,
};

/** The long run without pauses: every kind, each killed twice, a third of the kills paired (issue 18). */
export const LONG_NO_PAUSE: Omit<ChaosOptions, 'log'> = {
  ...LONG,
  seed: 5,
  steps: { batched: 32, durable: 6 },
  kills: 10,
  noPause: true,
  againAfterMs: [500, 1700],
  pairShare: 1 / 3,
};

/**
 * A transformer policy (issue 12): `recall`, whose engine state (a transformer's
 * versions, its KV-cache generation) is what a pool worker or engine kill loses.
 * Short for CI: those two kinds, once per mode, in a few steps.
 */
export const SHORT_TRANSFORMER: Omit<ChaosOptions, 'log'> = {
  ...SHORT,
  team: { name: 'recall' },
  steps: { batched: 6, durable: 4 },
  kills: 2,
  kinds: ['engine', 'pool-worker'],
};

/** The transformer run against every kind, each twice per mode. */
export const LONG_TRANSFORMER: Omit<ChaosOptions, 'log'> = {
  ...LONG,
  team: { name: 'recall' },
  steps: { batched: 24, durable: 12 },
  kills: 10,
};

/**
 * Asynchronous runs (staleness 1): the worker kills that land in overlapped work (a rollout of
 * step t + 1 beside the update of step t). Batched, to fit the CI budget; the long one adds durable.
 */
export const SHORT_STALE: Omit<ChaosOptions, 'log'> = {
  ...SHORT,
  seed: 11,
  modes: ['batched'],
  steps: { batched: 12, durable: 5 },
  kills: 2,
  kinds: ['pool-worker', 'control-worker'],
  staleness: 1,
};

/**
 * Partial rollouts on the long-tail `chain` (issue #31): pool worker kills land in steps that
 * continue carried episodes; the run must end identical to its uninterrupted twin, the carried
 * episodes (their generations) included. The engines' work is metered and only the final eval
 * runs, so the tokens the engine after the last kill sampled can be held against the twin's
 * (work-meter.ts workAfterLastKill).
 */
export const SHORT_PARTIAL: Omit<ChaosOptions, 'log'> = {
  ...SHORT,
  team: { name: 'chain', options: { longTail: 0.2 } },
  seed: 17,
  modes: ['batched'],
  steps: { batched: 10, durable: 5 },
  kills: 2,
  kinds: ['pool-worker'],
  partialRollouts: { overProvision: 1.5 },
  evalEvery: 0,
  meterWork: true,
};

/** SHORT_PARTIAL with staleness 1: the kills also land while a step's rollout, continuing what the previous one carried, overlaps the previous update. */
export const SHORT_PARTIAL_STALE: Omit<ChaosOptions, 'log'> = { ...SHORT_PARTIAL, staleness: 1 };

/**
 * The long partial run (opt-in, TROUPE_CHAOS_LONG=1): maxCarrySteps 1, so every group carried
 * into a step is held there (its rollout waits for it to be whole), and more pool worker kills
 * over more steps land in steps holding groups; the same checks as SHORT_PARTIAL.
 */
export const LONG_PARTIAL: Omit<ChaosOptions, 'log'> = {
  ...SHORT_PARTIAL,
  seed: 19,
  steps: { batched: 24, durable: 5 },
  kills: 8,
  partialRollouts: { ...SHORT_PARTIAL.partialRollouts, maxCarrySteps: 1 },
  runTimeoutMs: 1_800_000,
};

/** LONG_PARTIAL with staleness 1 (opt-in): kills land in steps holding groups at the bound while the rollout overlaps the previous update. */
export const LONG_PARTIAL_STALE: Omit<ChaosOptions, 'log'> = { ...LONG_PARTIAL, staleness: 1 };

export const LONG_STALE: Omit<ChaosOptions, 'log'> = {
  ...LONG,
  seed: 13,
  steps: { batched: 30, durable: 10 },
  kills: 10,
  staleness: 1,
};

/** The process killed together with a kind in a paired kill (the engine dies with its pool worker anyway). */
export const PAIRS: Partial<Record<FaultKind, FaultKind>> = {
  temporal: 'postgres',
  postgres: 'temporal',
  'control-worker': 'pool-worker',
  'pool-worker': 'control-worker',
};

export interface KillRecord {
  kind: FaultKind;
  /** Killed at the same moment as `kind` (a paired kill), and its pid. */
  with?: FaultKind;
  withPid?: number;
  /** The second kill of a double kill (its process had just been restarted). */
  again?: boolean;
  /** Pid of the engine killed as soon as the restarted pool worker spawned it (double kills). */
  engineKilledAtStart?: number;
  pid: number;
  /** ms since epoch */
  at: number;
  /** Steps committed when it was killed (from the store; undefined if the store was down). */
  stepsDone?: number;
  /** Kill → the process (or a new engine) runs again, ms. */
  backAfterMs: number;
  /** Activities running on the killed process (for an engine kill: on its pool worker). */
  inFlight?: number;
  /** Kill → the first of them started its next attempt (server time), ms. */
  retryAfterMs?: number;
  /** Kill → the last of them started its next attempt, ms. */
  lastRetryAfterMs?: number;
  /** Which activity was retried first (type and attempt), or 'workflow task'. */
  retried?: string;
  /** Of those in flight, how many finished without a retry (their result got through). */
  finishedWithoutRetry?: number;
}

export interface ModeReport {
  mode: Mode;
  steps: number;
  status: string;
  error?: string;
  baselineSeconds: number;
  chaosSeconds: number;
  kills: KillRecord[];
  /** Processes found dead that the schedule had not killed (restarted too). */
  unplanned: string[];
  comparison?: Comparison;
  identical: boolean;
  /** With `meterWork`: the engines' work in the uninterrupted twin and in the chaos run. */
  work?: { baseline: EngineWork; chaos: EngineWork };
  /** Partial rollouts: the steps whose rollout continued episodes carried into it (in the chaos run). */
  carriedInto?: number[];
  /** Partial rollouts with maxCarrySteps: the steps whose rollout held groups carried that often (in the chaos run). */
  heldIn?: number[];
  /** Partial rollouts with `meterWork`: what was sampled twice, from the engines' counters against the twin's stored per-step tokens. */
  partialWork?: PartialWork;
}

export interface PartialWork {
  /** The twin's tokens sampled per step, and served from the store per step (carried episodes' earlier generations). */
  stepTokens: number[];
  servedTokens: number[];
  /** Diagnostics: the chaos run's stored per-step tokens, tokens per engine process. */
  chaosStepTokens: number[];
  /** The twin's eval turns' sampled tokens: the initial eval (step 0) and the final one. */
  evalTokens: { initial: number; final: number };
  tokensByEngine: { twin: number[]; chaos: number[] };
  /** Engine tokens of the chaos run less the twin's: the killed attempts' tokens, sampled again by their retries. */
  killedAttemptTokens: number;
  after: ReturnType<typeof workAfterLastKill>;
}

export interface ChaosReport {
  options: Omit<ChaosOptions, 'log'>;
  modes: ModeReport[];
  seconds: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface PlannedKill {
  kind: FaultKind;
  gapShare: number;
  restartDelayMs: number;
  /** A double kill: the same kind again this long after it is back. */
  againAfterMs?: number;
  /** A paired kill: this kind too, at the same moment. */
  with?: FaultKind;
}

/** The kill schedule of one mode: a pure function of (seed, mode, options). */
export function schedule(
  opts: Pick<ChaosOptions, 'seed' | 'kills' | 'kinds' | 'gapShare' | 'restartDelayMs' | 'againAfterMs' | 'pairShare'>,
  mode: Mode,
): PlannedKill[] {
  const random = seededRandom(opts.seed * 2 + (mode === 'durable' ? 1 : 0));
  const between = ([lo, hi]: [number, number]) => Math.round(lo + random() * (hi - lo));
  const out: PlannedKill[] = [];
  let deck: FaultKind[] = [];
  for (let i = 0; i < opts.kills; i++) {
    if (deck.length === 0) {
      deck = [...opts.kinds];
      for (let j = deck.length - 1; j > 0; j--) {
        const k = Math.floor(random() * (j + 1));
        [deck[j], deck[k]] = [deck[k]!, deck[j]!];
      }
    }
    out.push({
      kind: deck.shift()!,
      gapShare: opts.gapShare[0] + random() * (opts.gapShare[1] - opts.gapShare[0]),
      restartDelayMs: between(opts.restartDelayMs),
    });
    // Drawn only for double-kill schedules, so single-kill schedules stay what they were.
    if (opts.againAfterMs) out.at(-1)!.againAfterMs = between(opts.againAfterMs);
    if (opts.pairShare !== undefined && random() < opts.pairShare && PAIRS[out.at(-1)!.kind]) out.at(-1)!.with = PAIRS[out.at(-1)!.kind];
  }
  return out;
}

/** The run config of a mode. Batched steps are bigger (32 episodes), so they last long enough to be hit mid-rollout. */
export function runConfig(opts: Pick<ChaosOptions, 'team' | 'runSeed' | 'steps' | 'staleness' | 'partialRollouts' | 'evalEvery'>, mode: Mode) {
  const size = mode === 'batched' ? { groupsPerStep: 4, groupSize: 8 } : { groupsPerStep: 2, groupSize: 4 };
  return {
    team: opts.team.name,
    teamOptions: opts.team.options ?? {},
    steps: opts.steps[mode],
    ...size,
    rollout: mode,
    evalEvery: opts.evalEvery ?? 3,
    evalTasks: 4,
    seed: opts.runSeed,
    ...(opts.staleness ? { staleness: opts.staleness } : {}),
    ...(opts.partialRollouts ? { partialRollouts: opts.partialRollouts } : {}),
  };
}

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

/**
 * Steps committed so far, from the run's TroupeStep search attribute (the server's
 * record: no worker and no store needed, so the harness itself never talks to a
 * PostgreSQL that is being killed). undefined while the server is down.
 */
async function stepsDone(stack: ChaosStack, runId: string): Promise<number | undefined> {
  const q = stack.client.workflow
    .getHandle(runId)
    .describe()
    .then((d) => d.typedSearchAttributes.get(TroupeStep) ?? 0);
  return Promise.race([q.catch(() => undefined), sleep(1500).then(() => undefined)]);
}

const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => (t ? Number(t.seconds) * 1000 + Math.floor((t.nanos ?? 0) / 1e6) : 0);

/**
 * For control-worker kills that caught no activity: kill -> the first workflow
 * task started after a timed-out one (the run's workflow moving again on the
 * new worker), from the recorded histories of the run and its episode children.
 */
async function measureWorkflowTasks(stack: ChaosStack, workflowId: string, kills: KillRecord[]): Promise<void> {
  const wanted = kills.filter((k) => k.kind === 'control-worker' && k.retryAfterMs === undefined);
  if (wanted.length === 0) return;
  const starts: number[] = [];
  const ids = [workflowId];
  for (let i = 0; i < ids.length && i < 2000; i++) {
    const history = await stack.client.workflow.getHandle(ids[i]!).fetchHistory();
    let timedOut = false;
    for (const e of history.events ?? []) {
      if (e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId) ids.push(e.startChildWorkflowExecutionInitiatedEventAttributes.workflowId);
      if (e.workflowTaskTimedOutEventAttributes || e.workflowTaskFailedEventAttributes) timedOut = true;
      if (e.workflowTaskStartedEventAttributes) {
        if (timedOut) starts.push(ms(e.eventTime));
        timedOut = false;
      }
    }
  }
  starts.sort((x, y) => x - y);
  for (const k of wanted) {
    const first = starts.find((t) => t >= k.at);
    if (first !== undefined && first - k.at < 120_000) {
      k.retryAfterMs = first - k.at;
      k.retried = 'workflow task';
    }
  }
}

interface Pending {
  key: string;
  workflowId: string;
  activityId: string;
  type: string;
  attempt: number;
  started: boolean;
  startedAt: number;
  identity: string;
}

/** Pending activities of the run and of its running episode children (server-side; no worker needed). */
async function pendingWork(stack: ChaosStack, workflowId: string): Promise<Pending[]> {
  const describe = async (id: string) => (await stack.client.workflow.getHandle(id).describe()).raw;
  const root = await describe(workflowId);
  const all = [
    { id: workflowId, raw: root },
    ...(await Promise.all((root.pendingChildren ?? []).map(async (c) => ({ id: c.workflowId!, raw: await describe(c.workflowId!).catch(() => undefined) })))),
  ];
  return all.flatMap(({ id, raw }) =>
    (raw?.pendingActivities ?? []).map((a) => ({
      key: `${id}/${a.activityId}`,
      workflowId: id,
      activityId: a.activityId ?? '',
      type: a.activityType?.name ?? '?',
      attempt: a.attempt ?? 1,
      started: a.state === 2, // PENDING_ACTIVITY_STATE_STARTED
      startedAt: ms(a.lastStartedTime),
      identity: a.lastWorkerIdentity ?? '',
    })),
  );
}

/** The attempt number and start time of an activity's last attempt, from its workflow's history. */
async function lastAttempt(stack: ChaosStack, p: Pending): Promise<{ attempt: number; startedAt: number } | undefined> {
  const events = (await stack.client.workflow.getHandle(p.workflowId).fetchHistory()).events ?? [];
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityId === p.activityId);
  if (!scheduled) return undefined;
  const started = events.find(
    (e) => e.activityTaskStartedEventAttributes && String(e.activityTaskStartedEventAttributes.scheduledEventId) === String(scheduled.eventId),
  );
  return started ? { attempt: started.activityTaskStartedEventAttributes!.attempt ?? 1, startedAt: ms(started.eventTime) } : undefined;
}

/**
 * Follows the activities that were running on a killed worker (or, for an
 * engine kill, on its pool worker) until each has started its next attempt or
 * finished: kill -> retried activity start, measured from the server's own
 * record of the attempt's start.
 */
async function followRetries(stack: ChaosStack, workflowId: string, lost: Pending[], at: number, isDone: () => boolean, timeoutMs = 90_000) {
  const open = new Map(lost.map((p) => [p.key, p]));
  const retries: Array<{ type: string; attempt: number; afterMs: number }> = [];
  let finished = 0;
  const deadline = Date.now() + timeoutMs;
  while (open.size > 0 && Date.now() < deadline && !isDone()) {
    const now = await pendingWork(stack, workflowId).catch(() => undefined); // the server may be restarting
    if (now) {
      for (const [key, before] of open) {
        const p = now.find((x) => x.key === key);
        if (!p) {
          // Closed between two polls: its history says whether a later attempt ran.
          const last = await lastAttempt(stack, before).catch(() => undefined);
          if (last && last.attempt > before.attempt) retries.push({ type: before.type, attempt: last.attempt, afterMs: last.startedAt - at });
          else finished++; // its result got through before the kill
          open.delete(key);
        } else if (p.attempt > before.attempt && p.started) {
          retries.push({ type: p.type, attempt: p.attempt, afterMs: p.startedAt - at });
          open.delete(key);
        }
      }
    }
    await sleep(250);
  }
  return { retries: retries.sort((a, b) => a.afterMs - b.afterMs), finished, unresolved: open.size };
}

/** Kill i of n waits until floor(i * steps / (n + 2)) steps are committed: kills spread over the run, the last well before its end. */
function stepWindow(i: number, n: number, steps: number): number {
  return Math.floor((i * steps) / (n + 2));
}

/**
 * Keeps a run from ending while kills remain, whatever the machine's speed: the
 * run is paused (the `pause` signal, effective at its next step boundary) right
 * after each kill and resumed just before the next one, so each kill costs at
 * most the two steps it may land in. Restarting a process can keep this process busy
 * for seconds; meanwhile the run waits. A pause changes no result (the run is
 * deterministic); it only holds the clock.
 */
class Hold {
  held = false;

  constructor(
    private readonly stack: ChaosStack,
    private readonly runId: string,
    private readonly isDone: () => boolean,
    private readonly log: (l: string) => void,
    private readonly off = false,
  ) {}

  /** Sends a signal until the server takes it (it may be restarting); false if the run has ended. */
  private async send(which: 'pause' | 'resume'): Promise<boolean> {
    const handle = this.stack.client.workflow.getHandle(this.runId);
    for (let attempt = 0; !this.isDone(); attempt++) {
      try {
        const sent = handle.signal(which === 'pause' ? pauseSignal : resumeSignal);
        await Promise.race([sent, sleep(3000).then(() => Promise.reject(new Error('no answer in 3 s')))]);
        return true;
      } catch (e) {
        if (e instanceof WorkflowNotFoundError || /already completed/.test((e as Error).message)) return false;
        if (attempt >= 100) throw new Error(`chaos: could not ${which} the run: ${(e as Error).message}`);
        await sleep(300);
      }
    }
    return false;
  }

  async pause(why: string): Promise<void> {
    if (this.held || this.off) return;
    this.log(`chaos: pausing the run ${why}`);
    this.held = await this.send('pause');
  }

  async release(): Promise<void> {
    if (!this.held) return;
    await this.send('resume');
    this.held = false;
  }
}

/** Runs the schedule against one live run; returns the kills made and processes found dead unplanned. */
async function inflict(
  stack: ChaosStack,
  runId: string,
  steps: number,
  plan: PlannedKill[],
  timing: { busyWaitMs: number; stepMs: number; noPause?: boolean; beforeKill?: () => Promise<void> },
  isDone: () => boolean,
  log: (l: string) => void,
) {
  const kills: KillRecord[] = [];
  const unplanned: string[] = [];
  const t0 = Date.now();
  const hold = new Hold(stack, runId, isDone, log, timing.noPause);
  try {
    for (const [i, p] of plan.entries()) {
      await hold.release();
      const window = stepWindow(i, plan.length, steps);
      while (!isDone() && ((await stepsDone(stack, runId)) ?? -1) < window) await sleep(100);
      if (isDone()) break;
      // The kill lands inside a step: after its seeded share of a step (and, for a worker, once
      // it is busy), at the latest when the step after the one under way is committed.
      const before = (await stepsDone(stack, runId)) ?? 0;
      const killed = await killOne(
        stack,
        runId,
        p,
        { gapMs: Math.round(p.gapShare * timing.stepMs), busyWaitMs: timing.busyWaitMs, stepLimit: before + 2, beforeKill: timing.beforeKill },
        isDone,
        t0,
        log,
        hold,
      );
      if (killed === 'done') break;
      if (killed.unplanned) unplanned.push(...killed.unplanned);
      if (killed.kill) kills.push(killed.kill);
      if (killed.kill && p.againAfterMs !== undefined && !isDone()) {
        // The same process again, soon after it is back (during its start-up).
        const again = await killOne(
          stack,
          runId,
          { ...p, againAfterMs: undefined, with: undefined },
          { gapMs: p.kind === 'engine' ? 0 : p.againAfterMs, busyWaitMs: 0, stepLimit: Number.MAX_SAFE_INTEGER, beforeKill: timing.beforeKill },
          isDone,
          t0,
          log,
          hold,
        );
        if (again === 'done') break;
        if (again.unplanned) unplanned.push(...again.unplanned);
        if (again.kill) kills.push({ ...again.kill, again: true });
      }
    }
  } finally {
    await hold.release();
  }
  return { kills, unplanned };
}

/**
 * One planned kill: waits `gapMs`, catches the worker busy when it is one (at most
 * `busyWaitMs`), but kills at once when the run has `stepLimit` steps committed; pauses
 * the run, restarts what was killed and follows the retries.
 */
async function killOne(
  stack: ChaosStack,
  runId: string,
  p: PlannedKill,
  { gapMs, busyWaitMs, stepLimit, beforeKill }: { gapMs: number; busyWaitMs: number; stepLimit: number; beforeKill?: () => Promise<void> },
  isDone: () => boolean,
  t0: number,
  log: (l: string) => void,
  hold: Hold,
): Promise<'done' | { kill?: KillRecord; unplanned?: string[] }> {
  const unplanned: string[] = [];
  const late = async () => ((await stepsDone(stack, runId)) ?? 0) >= stepLimit;
  {
    const until = Date.now() + gapMs;
    while (Date.now() < until && !isDone() && !(await late())) await sleep(20);
    if (isDone()) return 'done';
  }
  const done = await stepsDone(stack, runId);
  // A worker (or engine) is killed while it works: the first moment (polled, at most
  // `busyWaitMs`) an activity of the run has its current attempt running on it.
  const worker = p.kind === 'engine' ? 'pool-worker' : p.kind;
  const workerPid = stack.pidOf(worker as FaultKind);
  const onWorker = (list: Pending[]) => list.filter((a) => a.started && workerPid !== undefined && a.identity.startsWith(`${workerPid}@`));
  let lost: Pending[] = [];
  if (worker === 'control-worker' || worker === 'pool-worker') {
    const until = Date.now() + busyWaitMs;
    do {
      lost = onWorker(await pendingWork(stack, runId).catch(() => [] as Pending[]));
      if (lost.length === 0) await sleep(20);
    } while (lost.length === 0 && Date.now() < until && !isDone() && !(await late()));
  }
  const enginePid = p.kind === 'pool-worker' ? stack.pidOf('engine') : undefined;
  await beforeKill?.();
  const pid = await stack.kill(p.kind);
  const withPid = p.with !== undefined && pid !== undefined ? await stack.kill(p.with) : undefined;
  const at = Date.now();
  // With Temporal down the pause waits for its restart (below).
  const temporalDown = p.kind === 'temporal' || (withPid !== undefined && p.with === 'temporal');
  if (!temporalDown) await hold.pause('at the kill');
  if (pid === undefined) {
    log(`chaos: ${p.kind} was not running at ${((at - t0) / 1000).toFixed(1)}s; restarting the stack instead`);
    unplanned.push(...(await stack.restart()).map((d) => `${d.kind} found dead before a kill: ${d.cause}`));
    return { unplanned };
  }
  log(
    `chaos: SIGKILL ${p.kind} (pid ${pid})${withPid !== undefined ? ` and ${p.with} (pid ${withPid})` : ''} at ${((at - t0) / 1000).toFixed(1)}s, ${done ?? '?'} steps done, ${lost.length} activities running on it`,
  );
  const following = followRetries(stack, runId, lost, at, isDone);
  let back: number;
  let engineKilledAtStart: number | undefined;
  if (p.kind === 'engine') {
    await stack.waitForEngine(pid);
    back = Date.now() - at;
  } else {
    await sleep(p.restartDelayMs);
    // Double kills of a pool worker: the engine of its successor dies while that worker starts.
    const startupKill = p.kind === 'pool-worker' && p.againAfterMs !== undefined ? killEngineAtStart(stack, pid, log) : undefined;
    const restarted = await stack.restart();
    const atStart = await startupKill;
    if (atStart) {
      engineKilledAtStart = atStart.engine;
      // The worker must outlive it: a new engine under the same worker, not a dead worker.
      const until = Date.now() + 90_000;
      while (pidAlive(atStart.pool) && [undefined, atStart.engine].includes(stack.pidOf('engine')) && Date.now() < until) await sleep(100);
      if (!pidAlive(atStart.pool)) {
        unplanned.push(
          `pool-worker ${atStart.pool} died when its engine was killed during its start-up: ${tailFile(logFilePath(stack.stateDir, 'pool-worker'), 3).replace(/\s+/g, ' ').slice(-300)}`,
        );
        await stack.restart();
      }
    }
    back = Date.now() - at;
    if (temporalDown) await hold.pause('once Temporal is back');
    for (const d of restarted)
      if (d.kind !== p.kind && !(withPid !== undefined && d.kind === p.with)) unplanned.push(`${d.kind} found dead after killing ${p.kind}: ${d.cause}`);
    if (p.kind === 'pool-worker' && enginePid !== undefined) {
      for (let j = 0; j < 100 && pidAlive(enginePid); j++) await sleep(100);
      if (pidAlive(enginePid)) unplanned.push(`engine ${enginePid} outlived its killed pool worker`);
    }
  }
  const followed = await following;
  const first = followed.retries[0];
  const kill: KillRecord = {
    kind: p.kind,
    pid,
    ...(withPid !== undefined ? { with: p.with, withPid } : {}),
    at,
    ...(engineKilledAtStart !== undefined ? { engineKilledAtStart } : {}),
    stepsDone: done,
    backAfterMs: back,
    inFlight: lost.length,
    ...(first ? { retryAfterMs: first.afterMs, retried: `${first.type} attempt ${first.attempt}`, lastRetryAfterMs: followed.retries.at(-1)!.afterMs } : {}),
    finishedWithoutRetry: followed.finished,
  };
  return { kill, unplanned };
}

/** SIGKILLs the first engine of the pool worker that replaces `oldPoolPid`, as soon as it exists (before it listens). */
async function killEngineAtStart(stack: ChaosStack, oldPoolPid: number, log: (l: string) => void): Promise<{ engine: number; pool: number } | undefined> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const pool = stack.pidOf('pool-worker');
    const engine = pool !== undefined && pool !== oldPoolPid ? stack.pidOf('engine') : undefined;
    if (engine !== undefined) {
      process.kill(engine, 'SIGKILL');
      log(`chaos: SIGKILL engine (pid ${engine}) during the start-up of pool worker ${pool}`);
      return { engine, pool: pool! };
    }
    await sleep(10);
  }
  return undefined;
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

export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const log = options.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const started = Date.now();
  const stack = await startChaosStack({ log: (l) => log(`  up: ${l}`) });
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

/** The report as text: per mode and kind, kills survived and whether the result was identical. */
export function formatReport(r: ChaosReport): string {
  const lines: string[] = [];
  lines.push(`chaos seed ${r.options.seed}, team ${r.options.team.name}, run seed ${r.options.runSeed}, ${r.seconds.toFixed(0)}s in all`);
  lines.push('| mode | fault | kills survived | result identical |');
  lines.push('|---|---|---|---|');
  for (const m of r.modes) {
    for (const kind of FAULT_KINDS) {
      const n = m.kills.filter((k) => k.kind === kind || k.with === kind).length;
      lines.push(`| ${m.mode} | ${kind} | ${m.status === 'completed' ? n : `0 of ${n}`} | ${n === 0 ? '-' : m.identical ? 'yes' : 'no'} |`);
    }
  }
  for (const m of r.modes) {
    const c = m.comparison;
    lines.push(
      `${m.mode}: ${m.status}, ${m.steps} steps, uninterrupted ${m.baselineSeconds.toFixed(1)}s${m.work ? '' : ' (both modes at once)'}, with chaos ${m.chaosSeconds.toFixed(1)}s; compared ${c?.versionsCompared ?? 0} versions, ${c?.episodesCompared ?? 0} episodes; final sha256 ${Object.entries(
        c?.finalSha ?? {},
      )
        .map(([k, v]) => `${k}=${v.slice(0, 16)}`)
        .join(' ')}`,
    );
    if (m.error) lines.push(`  error: ${m.error}`);
    if (m.carriedInto)
      lines.push(
        `  partial rollouts: steps continuing carried episodes ${m.carriedInto.join(' ')}${m.heldIn ? `; holding groups at maxCarrySteps ${m.heldIn.join(' ')}` : ''}; kills during steps ${m.kills.map((k) => k.stepsDone ?? '?').join(' ')}`,
      );
    if (m.partialWork) {
      const w = m.partialWork;
      lines.push(
        `  partial rollouts: twin sampled ${w.stepTokens.join(' ')} tokens per step (served from the store ${w.servedTokens.join(' ')}) + evals ${w.evalTokens.initial} initial, ${w.evalTokens.final} final (meter agrees: ${w.after.meterMatchesStore}); killed attempts' tokens sampled again ${w.killedAttemptTokens}; engine after the last kill ${w.after.lastEngineTokens} tokens = the twin's from step ${w.after.resumedAt ?? '(none)'} on + the final eval, excess ${w.after.excess}`,
        `  partial rollouts (diagnostics): chaos run sampled ${w.chaosStepTokens.join(' ')} per step; tokens per engine: twin ${w.tokensByEngine.twin.join(' ')}, chaos ${w.tokensByEngine.chaos.join(' ')}; readings (pid offset first last n): twin ${JSON.stringify(m.work?.baseline.readings)}, chaos ${JSON.stringify(m.work?.chaos.readings)}`,
      );
    }
    for (const p of c?.problems ?? []) lines.push(`  PROBLEM ${p}`);
    for (const u of m.unplanned) lines.push(`  unplanned: ${u}`);
    for (const k of m.kills) {
      const retry =
        k.retryAfterMs === undefined
          ? ''
          : `, retried after ${(k.retryAfterMs / 1000).toFixed(1)}s (${k.retried}${k.lastRetryAfterMs !== undefined && k.lastRetryAfterMs !== k.retryAfterMs ? `; last at ${(k.lastRetryAfterMs / 1000).toFixed(1)}s` : ''})`;
      const flight =
        k.inFlight === undefined
          ? ''
          : `, ${k.inFlight} activities on it${k.finishedWithoutRetry ? ` (${k.finishedWithoutRetry} finished without retry)` : ''}`;
      const atStart = k.engineKilledAtStart !== undefined ? `, its successor's engine killed during start-up` : '';
      lines.push(
        `  kill ${k.kind}${k.with ? ` + ${k.with}` : ''}${k.again ? ' again' : ''} after ${k.stepsDone ?? '?'} steps: back after ${(k.backAfterMs / 1000).toFixed(1)}s${atStart}${flight}${retry}`,
      );
    }
  }
  const all = r.modes.flatMap((m) => m.kills).filter((k) => k.retryAfterMs !== undefined);
  for (const kind of ['control-worker', 'pool-worker', 'engine'] as const) {
    const xs = all
      .filter((k) => k.kind === kind)
      .map((k) => k.retryAfterMs! / 1000)
      .sort((x, y) => x - y);
    if (xs.length)
      lines.push(
        `kill -> retried task start, ${kind}: min ${xs[0]!.toFixed(1)}s, median ${xs[Math.floor(xs.length / 2)]!.toFixed(1)}s, max ${xs.at(-1)!.toFixed(1)}s (n=${xs.length})`,
      );
  }
  return lines.join('\n');
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
