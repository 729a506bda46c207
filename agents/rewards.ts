/**
 * Scoring an episode: each role's reward function is called once per turn of
 * that role. A reward function that throws marks the episode `failed` (it is
 * then excluded from the update and counted), never the run.
 */
import type { Trajectory, TurnRewards } from '../schema/trajectory';
import type { AnyTeam, TurnView } from './team';

export interface Scored {
  status: Trajectory['status'];
  error?: string;
  rewards: TurnRewards[];
}

export function turnViews(team: AnyTeam, trajectory: Trajectory): TurnView[] {
  return trajectory.turns.map((t) => {
    const lastTool = t.lossMask.lastIndexOf(0);
    return {
      index: t.index,
      agent: t.agent,
      text: team.tokenizer.decode(t.responseTokens),
      reply: team.tokenizer.decode(t.responseTokens.slice(lastTool + 1)),
      toolCalls: t.toolCalls,
      stopReason: t.stopReason,
    };
  });
}

export function scoreEpisode(team: AnyTeam, task: unknown, trajectory: Trajectory): Scored {
  if (trajectory.status === 'failed') return { status: 'failed', error: trajectory.error, rewards: [] };
  const turns = turnViews(team, trajectory);
  const outcome = trajectory.status === 'completed' ? trajectory.outcome : undefined;
  const rewards: TurnRewards[] = [];
  for (const turn of turns) {
    const fn = team.rewards[turn.agent]!;
    let components: Record<string, number>;
    try {
      components = fn({ task, outcome, status: trajectory.status, turn, turns });
    } catch (e) {
      return { status: 'failed', error: `rewards.${turn.agent}: ${(e as Error)?.message ?? String(e)}`, rewards: [] };
    }
    for (const [k, v] of Object.entries(components ?? {})) {
      if (typeof v !== 'number' || !Number.isFinite(v)) {
        return { status: 'failed', error: `rewards.${turn.agent}.${k}: must be a finite number, got ${v}`, rewards: [] };
      }
    }
    rewards.push({ turn: turn.index, agent: turn.agent, components });
  }
  return { status: trajectory.status, error: trajectory.error, rewards };
}
