/**
 * What the run commands print: a run's summary (lines or --json), its exit status, and
 * reading a --config file. Connecting, starting and watching runs is control/runs.ts.
 */
import * as fs from 'node:fs';
import type { EpisodeProblems } from '../activities/store/trajectories';
import { TroupeError, errorMessage } from '../infra/errors';
import { duration } from '../control/runs';
import type { RunSummary } from '../workflows/training-run';

export function readConfigFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new TroupeError(`--config: cannot read ${file}: ${errorMessage(e)}`, 'give the path of a JSON file with a run config');
  }
  try {
    const v = JSON.parse(text);
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
    return v;
  } catch (e) {
    throw new TroupeError(`--config: ${file} is not a JSON object: ${errorMessage(e)}`, 'the file holds one JSON object, e.g. {"team": "math", "steps": 20}');
  }
}

/** Where a run's wall time went: the run itself, and bringing the stack up before it (when this command did). */
export interface RunTimes {
  runSeconds: number;
  setupSeconds: number;
}

/** Whether any model moved past version 0: a run that never trained learned nothing. */
export function trained(versions: Record<string, number>): boolean {
  return Object.values(versions).some((v) => v > 0);
}

/** A completed run of steps 0: it evaluated its initial models, with nothing to train. */
const evalOnly = (s: Pick<RunSummary, 'status' | 'steps'>) => s.status === 'completed' && s.steps === 0;

/** The exit status of a watched run: 0 only when it completed and trained (or was eval-only); stopped, failed or untrained runs are 1. */
export function runExitCode(s: Pick<RunSummary, 'status' | 'versions' | 'steps'>): number {
  return s.status === 'completed' && (trained(s.versions) || evalOnly(s)) ? 0 : 1;
}

/**
 * A mean reward in its component's own units (a team may scale a component to 10, or make it
 * negative): up to 3 decimals with no trailing zeros, so that `10` or `-2.5` is not read as a
 * rate of 10.000 the way the eval success rate (always 3 decimals, in [0, 1]) is printed.
 */
export function rewardNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (v !== 0 && Math.abs(v) < 0.0005) return String(Number(v.toPrecision(2)));
  const s = v.toFixed(3).replace(/\.?0+$/, '');
  return s === '-0' ? '0' : s;
}

/** An eval: its success rate over the held-out tasks, then each agent's mean reward components, labelled as such. */
export function evalText(e: RunSummary['initialEval']): string {
  if (!e) return '-';
  const rewards = Object.entries(e.rewards)
    .filter(([, cs]) => Object.keys(cs).length > 0)
    .map(
      ([a, cs]) =>
        `${a} ${Object.entries(cs)
          .map(([k, v]) => `${k} ${rewardNumber(v)}`)
          .join(', ')}`,
    );
  return `${e.success.toFixed(3)} (${e.episodes} held-out tasks)${rewards.length > 0 ? `; mean reward: ${rewards.join('; ')}` : ''}`;
}

export function summaryLines(s: RunSummary, times: RunTimes, problems?: EpisodeProblems): string[] {
  const setup = times.setupSeconds >= 1 ? ` (setting up the stack took ${duration(times.setupSeconds)} more)` : '';
  return [
    `run ${s.runId} (${s.team}) ${s.status} after ${s.steps} steps in ${duration(times.runSeconds)}${setup}`,
    `  eval success: ${evalText(s.initialEval)}`,
    `             -> ${evalText(s.finalEval)}`,
    `  versions: ${Object.entries(s.versions)
      .map(([m, v]) => `${m} v${v}`)
      .join(', ')}`,
    ...(problems ? problemLines(problems) : s.failedEpisodes > 0 ? [`  failed episodes (excluded from updates): ${s.failedEpisodes}`] : []),
    ...(trained(s.versions) || evalOnly(s)
      ? []
      : [`  never trained: every model is still at version 0${problems && problems.skippedUpdates.length === 0 && s.steps === 0 ? ' (no step ran)' : ''}`]),
  ];
}

/** Failed and empty episodes with their most common errors, and skipped updates: why a run learned little or nothing. */
export function problemLines(p: EpisodeProblems): string[] {
  const lines: string[] = [];
  if (p.failed > 0 || p.empty > 0) {
    const parts = [...(p.failed > 0 ? [`${p.failed} failed (excluded from updates)`] : []), ...(p.empty > 0 ? [`${p.empty} empty (no agent turn)`] : [])];
    lines.push(`  episodes: ${parts.join(', ')} of ${p.episodes}${p.errors.length > 0 ? '; most common errors:' : ''}`);
    for (const e of p.errors) lines.push(`    ${e.count}x ${e.error.length > 300 ? `${e.error.slice(0, 300)}...` : e.error}`);
  }
  for (const u of p.skippedUpdates) lines.push(`  update skipped: ${u.model}: ${u.reason} (${u.steps} step${u.steps === 1 ? '' : 's'})`);
  for (const a of p.stalledAgents)
    lines.push(
      `  no learning signal: ${a.agent} (model ${a.model}) for its last ${a.steps} steps (from step ${a.since}): every group's rewards ` +
        `were equal, at ${rewardNumber(a.reward)} against ${rewardNumber(a.firstReward)} at its first step; it cannot recover by itself ` +
        `(a role that judges a fast learner stalls so more often with --staleness: docs/performance.md#asynchronous-rl)`,
    );
  return lines;
}

export function summaryJson(s: RunSummary, times: RunTimes, problems?: EpisodeProblems, extra: Record<string, unknown> = {}) {
  const ev = (e: RunSummary['initialEval']) => (e ? { success: e.success, step: e.step, episodes: e.episodes, rewards: e.rewards } : null);
  return {
    runId: s.runId,
    workflowId: s.workflowId,
    team: s.team,
    status: s.status,
    trained: trained(s.versions),
    steps: s.steps,
    versions: s.versions,
    initialEval: ev(s.initialEval),
    finalEval: ev(s.finalEval),
    failedEpisodes: s.failedEpisodes,
    ...(problems ? { problems } : {}),
    wallSeconds: times.runSeconds + times.setupSeconds,
    ...times,
    ...extra,
  };
}
