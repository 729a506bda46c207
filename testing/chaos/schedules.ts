/**
 * What a chaos run does: its options, the preset schedules (SHORT, LONG and
 * their variants), the seeded kill schedule of a mode, and the run config of a
 * mode (the chaos run's and its uninterrupted twin's).
 */
import { seededRandom } from '../../agents/seed';
import { FAULT_KINDS, type FaultKind } from './stack';

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
   * Episode retention in the background (the control worker's loop, TROUPE_RETENTION_EPISODE_STEPS
   * and TROUPE_RETENTION_INTERVAL_MINUTES) while the runs go on: both runs are then pruned by hand to
   * the same policy before they are compared, so the trajectories compared are the evals and the
   * newest `keepSteps` steps; weights and optimizer state are compared at every version as always.
   */
  retention?: { keepSteps: number; intervalSeconds: number };
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
  /** Durable runs: episodes per workflow (run config episodesPerWorkflow); unset: one. */
  episodesPerWorkflow?: number;
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
  // a group's episodes in one workflow: the kills land in workflows of several episodes
  episodesPerWorkflow: 4,
};

/**
 * No pauses, and each process killed twice: again 0.5-1.7 s after it is back, so a worker
 * or an engine dies during its own start-up (issue 18). Batched only, to fit the CI budget.
 */
export const SHORT_NO_PAUSE: Omit<ChaosOptions, 'log'> = {
  ...SHORT,
  retention: { keepSteps: 3, intervalSeconds: 1 },
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
  episodesPerWorkflow: 1,
  kills: 2,
  kinds: ['engine', 'pool-worker'],
};

/** The transformer run against every kind, each twice per mode. */
export const LONG_TRANSFORMER: Omit<ChaosOptions, 'log'> = {
  ...LONG,
  team: { name: 'recall' },
  steps: { batched: 24, durable: 12 },
  episodesPerWorkflow: 1,
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
  // the control worker that prunes is itself killed; a rollout of step N + 1 runs before N commits
  retention: { keepSteps: 3, intervalSeconds: 1 },
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
export function runConfig(
  opts: Pick<ChaosOptions, 'team' | 'runSeed' | 'steps' | 'staleness' | 'partialRollouts' | 'evalEvery' | 'episodesPerWorkflow'>,
  mode: Mode,
) {
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
    ...(mode === 'durable' && opts.episodesPerWorkflow ? { episodesPerWorkflow: opts.episodesPerWorkflow } : {}),
    ...(opts.partialRollouts ? { partialRollouts: opts.partialRollouts } : {}),
  };
}
