/**
 * Engine work done during a run, across engine restarts: every `everyMs` (and right before
 * each kill) it reads the live engine's Stats counters, keeps the highest seen per engine
 * process, and sums them over every engine that lived. An uninterrupted run measured the
 * same way is the work the run needs; what a chaos run did beyond it was done twice.
 *
 * Counted per engine: tokens of finished generate device runs, generate and score device
 * runs, update device runs (an Update answered from the engine's idempotency cache runs
 * nothing, so it is not counted). What the meter misses, so the numbers are lower bounds of
 * the waste: a device run cut by the engine's own kill (never finished, never counted), and
 * work an engine finished in the last moments before a kill of its pool worker that came
 * between two samples (the harness samples right before its kills; a worker found dead
 * unplanned is not sampled first).
 */
import * as fs from 'node:fs';
import { EngineClient } from '../../engines/protocol/client';
import { logFilePath } from '../../stack/processes';
import type { ChaosStack } from './stack';

export interface EngineWork {
  tokensGenerated: number;
  generateRuns: number;
  scoreRuns: number;
  updateRuns: number;
  /** Engine processes that did any of it. */
  engines: number;
  /** Tokens generated per engine process that did any work, in the order they were first seen (each kill of its pool worker starts the next). */
  tokensByEngine: number[];
  /** Per engine process: its pid, the tokens counted at the start (offset), its first and last readings and how many were taken. */
  readings: { pid: number; offset: number; first: number; last: number; n: number }[];
}

type Counters = Omit<EngineWork, 'engines' | 'tokensByEngine' | 'readings'>;

const ZERO: Counters = { tokensGenerated: 0, generateRuns: 0, scoreRuns: 0, updateRuns: 0 };

export class WorkMeter {
  private readonly byEngine = new Map<number, Counters>();
  private readonly offsets = new Map<number, Counters>();
  private readonly addresses = new Map<number, string>();
  private readonly clients = new Map<string, Promise<EngineClient | undefined>>();
  private readonly seen = new Map<number, { first: number; n: number }>();
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> = Promise.resolve();

  constructor(private readonly stack: ChaosStack) {}

  /**
   * Takes the live engine's counters as the starting point (an engine that outlived earlier
   * runs counts their work too), then samples every `everyMs`.
   */
  async start(everyMs = 100): Promise<void> {
    await this.sample();
    for (const [pid, c] of this.byEngine) this.offsets.set(pid, c);
    this.timer ??= setInterval(() => void this.sample(), everyMs);
  }

  /** One reading of the live engine (serialised: a reading waits for the one before). */
  sample(): Promise<void> {
    this.sampling = this.sampling.then(() => this.read()).catch(() => undefined);
    return this.sampling;
  }

  /** Stops sampling, takes a last reading and returns the totals; closes its clients. */
  async stop(): Promise<EngineWork> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // The last reading of the live engine must get through (a loaded host can time one out).
    const live = this.stack.pidOf('engine');
    const n = live === undefined ? 0 : (this.seen.get(live)?.n ?? 0);
    for (let i = 0; i < 10 && live !== undefined && (this.seen.get(live)?.n ?? 0) === n; i++) await this.sample();
    for (const c of this.clients.values()) void c.then((x) => x?.close());
    this.clients.clear();
    const total: EngineWork = { ...ZERO, engines: 0, tokensByEngine: [], readings: [] };
    for (const [pid, all] of this.byEngine) {
      const o = this.offsets.get(pid) ?? ZERO;
      const c = {
        tokensGenerated: all.tokensGenerated - o.tokensGenerated,
        generateRuns: all.generateRuns - o.generateRuns,
        scoreRuns: all.scoreRuns - o.scoreRuns,
        updateRuns: all.updateRuns - o.updateRuns,
      };
      total.tokensGenerated += c.tokensGenerated;
      total.generateRuns += c.generateRuns;
      total.scoreRuns += c.scoreRuns;
      total.updateRuns += c.updateRuns;
      if (c.tokensGenerated + c.generateRuns + c.scoreRuns + c.updateRuns > 0) {
        total.engines++;
        total.tokensByEngine.push(c.tokensGenerated);
      }
      const seen = this.seen.get(pid)!;
      total.readings.push({ pid, offset: o.tokensGenerated, first: seen.first, last: all.tokensGenerated, n: seen.n });
    }
    return total;
  }

  private async read(): Promise<void> {
    const pid = this.stack.pidOf('engine');
    if (pid === undefined) return;
    const address = this.addressOf(pid);
    if (!address) return;
    if (!this.clients.has(address))
      this.clients.set(
        address,
        EngineClient.connect(address, { timeoutMs: 1000 }).catch(() => undefined),
      );
    const client = await this.clients.get(address);
    if (!client) {
      this.clients.delete(address); // not listening yet: try again next time
      return;
    }
    const s = await Promise.race([client.stats().catch(() => undefined), new Promise<undefined>((r) => setTimeout(() => r(undefined), 2000))]);
    if (!s) return;
    const before = this.byEngine.get(pid) ?? ZERO;
    const seen = this.seen.get(pid) ?? { first: Number(s.tokensGenerated), n: 0 };
    seen.n++;
    this.seen.set(pid, seen);
    // Counters only grow within one engine process; the highest reading is its latest.
    this.byEngine.set(pid, {
      tokensGenerated: Math.max(before.tokensGenerated, Number(s.tokensGenerated)),
      generateRuns: Math.max(before.generateRuns, Number(s.generateBatches)),
      scoreRuns: Math.max(before.scoreRuns, Number(s.scoreRuns)),
      updateRuns: Math.max(before.updateRuns, Number(s.updateRuns)),
    });
  }

  /** The engine's address, from its pool worker's `engine_started` log line. */
  private addressOf(pid: number): string | undefined {
    const known = this.addresses.get(pid);
    if (known) return known;
    let text = '';
    try {
      text = fs.readFileSync(logFilePath(this.stack.stateDir, 'pool-worker'), 'utf8');
    } catch {
      return undefined;
    }
    for (const line of text.split('\n')) {
      if (!line.includes('"engine_started"')) continue;
      const p = /"pid":(\d+)/.exec(line);
      const a = /"address":"([^"]+)"/.exec(line);
      if (p && a) this.addresses.set(Number(p[1]), a[1]!);
    }
    return this.addresses.get(pid);
  }
}

/**
 * Tokens generated twice after the last kill of a run whose only work that samples is its
 * steps' rollouts and its evals (evalEvery 0: the initial and the final eval), from the
 * engines' own counters:
 *
 * - the twin's engines sampled its steps' tokens (`stepTokens`, the stored per-step count) and
 *   its evals' (`evalTokens`, from its stored eval turns): `meterMatchesStore` says the meter
 *   and the store agree on that;
 * - the engine started after the last kill ran the rest of the run: the retried step from its
 *   start and every step after it, then the final eval. If it sampled nothing the twin had not
 *   sampled in those steps, its tokens less the final eval's equal the twin's from some step t
 *   on: `resumedAt` is that t (at or after the steps committed when the kill was decided), and
 *   `excess` what it sampled beyond the twin from the step under way at the kill.
 *
 * A carried episode's stored generations sampled again after the kill would be excess; the killed
 * attempt's own tokens (sampled again by the retry) were counted on the killed engine, not here.
 */
export function workAfterLastKill(
  stepTokens: readonly number[],
  evalTokens: { initial: number; final: number },
  twinTokens: number,
  chaosTokensByEngine: readonly number[],
  lastKillStepsDone: number,
): { meterMatchesStore: boolean; lastEngineTokens: number; resumedAt?: number; excess: number } {
  const suffix = (t: number) => stepTokens.slice(t).reduce((a, b) => a + b, 0);
  const lastEngineTokens = chaosTokensByEngine.at(-1) ?? 0;
  const rest = lastEngineTokens - evalTokens.final;
  let resumedAt: number | undefined;
  for (let t = lastKillStepsDone; t <= stepTokens.length && resumedAt === undefined; t++) if (suffix(t) === rest) resumedAt = t;
  return {
    meterMatchesStore: twinTokens === suffix(0) + evalTokens.initial + evalTokens.final,
    lastEngineTokens,
    ...(resumedAt === undefined ? {} : { resumedAt }),
    excess: rest - suffix(resumedAt ?? lastKillStepsDone),
  };
}
