/** What a chaos run reports: per mode, the kills made and how the run came through them, and the report as text. */
import type { Comparison } from './compare';
import type { ChaosOptions, Mode } from './schedules';
import { FAULT_KINDS, type FaultKind } from './stack';
import type { EngineWork, workAfterLastKill } from './work-meter';

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
  /** With `retention`: training episodes of the chaos run the background loop pruned, and what the pass by hand pruned after it. */
  retention?: { background: number; byHand: number };
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
    if (m.retention)
      lines.push(
        `  retention in the background: ${m.retention.background} training episode(s) of the chaos run pruned while it ran; ${m.retention.byHand} more by the pass by hand before comparing`,
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
