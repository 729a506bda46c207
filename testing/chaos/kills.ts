/**
 * The kills of a chaos run: the schedule played against a live run, each kill
 * landing inside a step (and on a busy worker), the run held paused between
 * kills, what was killed restarted, and its activities' retries followed.
 */
import { WorkflowNotFoundError } from '@temporalio/client';
import { pauseSignal, resumeSignal } from '../../workflows/definitions';
import { logFilePath, pidAlive, tailFile } from '../../stack/processes';
import { followRetries, pendingWork, stepsDone, type Pending } from './observe';
import type { KillRecord } from './report';
import type { PlannedKill } from './schedules';
import type { ChaosStack, FaultKind } from './stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
export async function inflict(
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
