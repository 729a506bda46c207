/**
 * A run's Current Details in the Temporal Web UI: Markdown as the UI renders it,
 * a paragraph, a blank line, then a list. Pure: test/unit/training/run-details.test.ts.
 */
import type { RolloutProgressView, RunStatusView } from '../definitions';

export interface DetailsInput {
  team: string;
  runId: string;
  step: number;
  steps: number;
  phase: RunStatusView['status'];
  rewards: Record<string, Record<string, number>>;
  lastEval: { step: number; success: number } | null;
  initialEval: { step: number; success: number } | null;
  failedEpisodes: number;
  /** Asynchronous runs only: each model's staleness k, the steps whose rollouts started ahead, the last update's off-policy metrics per model. */
  staleness?: { lags: Record<string, number>; ahead: number[]; offPolicy: Record<string, Record<string, number>> };
  /** setOptimizer changes accepted, not yet applied. */
  pendingChanges: number;
  dashboardPage: string | null;
  /** The rollout in flight, live. */
  progress?: RolloutProgressView | null;
}

/** `step 3 rollout: 120/256 episodes, 4 failed (most: <error> ×3), 41.0 turns/s, ETA 12s`: the CLI line, Current Details and the dashboard say it alike. */
export function progressText(p: RolloutProgressView): string {
  const what = p.split === 'eval' ? `eval at step ${p.step}` : `step ${p.step + 1} rollout`;
  const parts = [`${what}: ${p.done}/${p.planned} episodes`];
  if (p.failed > 0) parts.push(`${p.failed} failed${p.reason ? ` (most: ${p.reason.error.slice(0, 120)} ×${p.reason.count})` : ''}`);
  if (p.turnsPerSecond !== null) parts.push(`${p.turnsPerSecond.toFixed(1)} turns/s`);
  if (p.etaSeconds !== null) parts.push(`ETA ${duration(p.etaSeconds)}`);
  return parts.join(', ');
}

/** 75 → '1m15s'. */
export function duration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  const m = Math.floor(seconds / 60);
  const s = Math.round(seconds % 60);
  return m > 0 ? `${m}m${String(s).padStart(2, '0')}s` : `${s}s`;
}

/**
 * The first line is the whole state, link included (the Web UI shows Current Details under
 * User Metadata and cuts long text off at the end): team, run, step/steps (phase), the latest
 * eval, the dashboard. Then a short list: each agent's rewards, failed episodes, pending
 * optimizer changes, and for asynchronous runs one line per model's off-policy metrics.
 */
export function renderDetails(d: DetailsInput): string {
  const head = [`**${d.team}** run \`${d.runId}\`: step ${d.step}/${d.steps} (${d.phase})`];
  if (d.lastEval)
    head.push(`eval ${d.lastEval.success.toFixed(3)} at step ${d.lastEval.step}${d.initialEval ? ` (from ${d.initialEval.success.toFixed(3)})` : ''}`);
  if (d.dashboardPage) head.push(`[dashboard](${d.dashboardPage})`);
  const items = Object.entries(d.rewards).map(
    ([agent, cs]) =>
      `- ${agent}: ${Object.entries(cs)
        .map(([k, v]) => `${k} ${v.toFixed(3)}`)
        .join(', ')}`,
  );
  if (d.progress) items.push(`- ${progressText(d.progress)}`);
  if (d.failedEpisodes > 0) items.push(`- failed episodes: ${d.failedEpisodes}`);
  if (d.pendingChanges > 0) items.push(`- optimizer changes pending: ${d.pendingChanges} (apply at step ${d.step + (d.phase === 'running' ? 1 : 0)})`);
  if (d.staleness) {
    const { lags, ahead, offPolicy } = d.staleness;
    items.push(
      `- staleness ${Object.entries(lags)
        .map(([m, k]) => `${m} k=${k}`)
        .join(', ')}; ahead: ${ahead.length > 0 ? `steps ${ahead.join(', ')}` : 'none'}`,
    );
    // Metrics an older worker returned may lack a name (behaviourKl was mismatch_kl's): '-' then.
    const f = (v: number | undefined, digits = 3) => (v === undefined ? '-' : v.toFixed(digits));
    for (const [m, x] of Object.entries(offPolicy)) {
      if (x.staleness === undefined) continue;
      const kl = x.mismatch_kl ?? x.behaviourKl;
      items.push(
        `- ${m}: staleness ${f(x.staleness, 2)}, IS mean ${f(x['isWeight.mean'])} max ${f(x['isWeight.max'])} cut ${f(x['isWeight.truncated'])} masked ${f(x['isWeight.masked'])}, mismatch KL ${kl === undefined ? '-' : kl.toExponential(2)}, clip ${f(x.clipFraction)}`,
      );
    }
  }
  const line = head.join(' · ');
  return items.length > 0 ? `${line}\n\n${items.join('\n')}` : line;
}
