/**
 * Scoring an episode: each role's reward function is called once per turn of
 * that role. A reward function that throws marks the episode `failed` (it is
 * then excluded from the update and counted), never the run.
 */
import type { Trajectory, TurnRewards } from '../schema/trajectory';
import type { AnyTeam, TurnView } from './team';
import { describe } from '../infra/issues';

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
    let returned: unknown;
    try {
      returned = fn({ task, outcome, status: trajectory.status, turn, turns });
    } catch (e) {
      return { status: 'failed', error: `rewards.${turn.agent}: ${(e as Error)?.message ?? String(e)}`, rewards: [] };
    }
    const read = readRewards(returned, `rewards.${turn.agent}`);
    if (typeof read === 'string') return { status: 'failed', error: read, rewards: [] };
    rewards.push({ turn: turn.index, agent: turn.agent, ...read });
  }
  return { status: trajectory.status, error: trajectory.error, rewards };
}

/**
 * A reward function's return value as stored: all components, plus which of them score the
 * turn (RewardFn's `{ episode, turn }` form). A problem comes back as a message naming the field.
 */
export function readRewards(value: unknown, at: string): Pick<TurnRewards, 'components' | 'perTurn'> | string {
  if (value === undefined || value === null) return { components: {} };
  if (typeof value !== 'object' || Array.isArray(value)) return `${at}: must return an object of named numbers or { episode, turn }, got ${describe(value)}`;
  const entries = Object.entries(value);
  const split = entries.some(([, v]) => typeof v === 'object' && v !== null);
  if (!split) {
    for (const [k, v] of entries) if (typeof v !== 'number' || !Number.isFinite(v)) return `${at}.${k}: must be a finite number, got ${describe(v)}`;
    return { components: value as Record<string, number> };
  }
  const components: Record<string, number> = {};
  const perTurn: string[] = [];
  for (const [part, inner] of entries) {
    if (part !== 'episode' && part !== 'turn') return `${at}.${part}: unknown part (a split reward has episode and turn)`;
    if (inner === undefined) continue;
    if (typeof inner !== 'object' || inner === null || Array.isArray(inner)) return `${at}.${part}: must be an object of named numbers, got ${describe(inner)}`;
    for (const [k, v] of Object.entries(inner)) {
      if (typeof v !== 'number' || !Number.isFinite(v)) return `${at}.${part}.${k}: must be a finite number, got ${describe(v)}`;
      if (Object.prototype.hasOwnProperty.call(components, k)) return `${at}.turn.${k}: is also an episode component; a name is one or the other`;
      components[k] = v;
      if (part === 'turn') perTurn.push(k);
    }
  }
  return perTurn.length > 0 ? { components, perTurn } : { components };
}
