/**
 * Agents that stopped learning for good: for the last STALL_STEPS or more training steps every
 * group gave all its episodes the same reward for the agent (zeroAdvantageGroupFraction 1, so
 * its advantages and its gradient are 0), at a mean reward below the agent's at the run's first
 * step. Such an agent cannot recover by itself: nothing it samples differs in reward. (At a
 * reward above its first step's, equal rewards are a solved task, not a stall.) An
 * asynchronous run makes this more likely where a role judges another that learns fast
 * (docs/performance.md, "Asynchronous RL": math's verifier at staleness 1).
 */
import type { Sql } from '../../infra/db';

/** Consecutive steps without a learning signal before `troupe train` and `status` say so. */
export const STALL_STEPS = 5;

export interface StalledAgent {
  agent: string;
  /** The model the agent's turns sampled from. */
  model: string;
  /** First step of the streak, and its length (to the run's newest training step). */
  since: number;
  steps: number;
  /** Mean reward per episode (its components summed) over the streak, and at the first step. */
  reward: number;
  firstReward: number;
}

export interface AgentStepRow {
  agent: string;
  step: number;
  /** Share of the step's groups whose rewards for the agent were all equal. */
  zeroAdvantageGroupFraction: number;
  /** The agent's mean reward that step (its components summed). */
  reward: number;
}

/** The rule above over each agent's training steps (any order); the model is filled in by the caller. */
export function stalledAgents(rows: readonly AgentStepRow[], minSteps = STALL_STEPS): Array<Omit<StalledAgent, 'model'>> {
  const byAgent = new Map<string, AgentStepRow[]>();
  for (const r of rows) byAgent.set(r.agent, [...(byAgent.get(r.agent) ?? []), r]);
  const out: Array<Omit<StalledAgent, 'model'>> = [];
  for (const [agent, steps] of [...byAgent].sort(([a], [b]) => a.localeCompare(b))) {
    steps.sort((a, b) => a.step - b.step);
    let n = 0;
    while (n < steps.length && (steps[steps.length - 1 - n]?.zeroAdvantageGroupFraction ?? 0) >= 1) n++;
    if (n < minSteps || n === steps.length) continue; // no earlier step to compare with: never moved
    const streak = steps.slice(steps.length - n);
    const reward = streak.reduce((s, r) => s + r.reward, 0) / n;
    const firstReward = steps[0]?.reward ?? 0;
    if (reward < firstReward) out.push({ agent, since: streak[0]?.step ?? 0, steps: n, reward, firstReward });
  }
  return out;
}

/** The run's stalled agents, from its stored training metrics. */
export async function runStalledAgents(sql: Sql, runId: string): Promise<StalledAgent[]> {
  const rows = await sql`
    SELECT scope AS agent, step,
      max(value) FILTER (WHERE name = 'zeroAdvantageGroupFraction') AS zero,
      sum(value) FILTER (WHERE name LIKE 'reward.%') AS reward
    FROM metrics WHERE run_id = ${runId} AND kind = 'train' AND scope <> 'team'
      AND (name = 'zeroAdvantageGroupFraction' OR name LIKE 'reward.%')
    GROUP BY scope, step`;
  const stalled = stalledAgents(
    rows
      .filter((r) => r.zero !== null)
      .map((r) => ({ agent: r.agent as string, step: r.step as number, zeroAdvantageGroupFraction: Number(r.zero), reward: Number(r.reward ?? 0) })),
  );
  const out: StalledAgent[] = [];
  for (const s of stalled) {
    const [t] = await sql`SELECT t.model FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = ${runId} AND t.agent = ${s.agent} LIMIT 1`;
    out.push({ ...s, model: (t?.model as string | undefined) ?? '?' });
  }
  return out;
}
