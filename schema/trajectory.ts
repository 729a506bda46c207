/**
 * The graph trajectory of one episode: turns (nodes) with parent edges, the
 * tokens each turn saw and produced, and the tool calls inside each turn.
 * Written by activities, read back verbatim from Postgres.
 */
import { z } from 'zod';

export const episodeStatus = z.enum(['completed', 'truncated', 'failed']);
export type EpisodeStatus = z.infer<typeof episodeStatus>;

export const stopReason = z.enum(['eos', 'max_tokens', 'tool_limit', 'turn_limit']);
export type StopReason = z.infer<typeof stopReason>;

export const toolCallRecord = z.object({
  index: z.number().int().nonnegative(),
  tool: z.string(),
  input: z.unknown(),
  output: z.unknown().optional(),
  error: z.string().optional(),
  durationMs: z.number().nonnegative(),
});
export type ToolCallRecord = z.infer<typeof toolCallRecord>;

export const turnRecord = z.object({
  index: z.number().int().nonnegative(),
  agent: z.string(),
  model: z.string(),
  version: z.number().int().nonnegative(),
  /** Turns whose output this turn received (edges of the graph). */
  parents: z.array(z.number().int().nonnegative()),
  contextTokens: z.array(z.number().int().nonnegative()),
  /** Everything after the context: sampled tokens and tool-output tokens, in order. */
  responseTokens: z.array(z.number().int().nonnegative()),
  /** Log-prob of each response token under the serving version (0 where mask is 0). */
  logprobs: z.array(z.number()),
  /** 1 on tokens the policy sampled, 0 on tool output. */
  lossMask: z.array(z.union([z.literal(0), z.literal(1)])),
  stopReason,
  /** The version that sampled each response token, where it is not `version` for all of them (a carried episode's turn). */
  tokenVersions: z.array(z.number().int().nonnegative()).optional(),
  toolCalls: z.array(toolCallRecord),
  durationMs: z.number().nonnegative(),
});
export type TurnRecord = z.infer<typeof turnRecord>;

export const trajectory = z.object({
  episodeId: z.string(),
  status: episodeStatus,
  outcome: z.unknown().optional(),
  error: z.string().optional(),
  turns: z.array(turnRecord),
  /** Per agent, counts the gateway keeps (gateway/): calls, retokenizedTurns, unparsedToolCalls. */
  counters: z.record(z.string(), z.record(z.string(), z.number())).optional(),
});
export type Trajectory = z.infer<typeof trajectory>;

/** An episode error with its numbers masked: 'ran 30.2 s ... after its turn 1' and '... turn 2' are one kind of failure. */
export const failureKind = (error: string) => error.replace(/\d+(\.\d+)?/g, '#');

/** Reward components of one turn, from its role's reward function. */
export const turnRewards = z.object({
  turn: z.number().int().nonnegative(),
  agent: z.string(),
  /** Every component, episode and per-turn ones. */
  components: z.record(z.string(), z.number()),
  /** Names in `components` that score the turn itself rather than the episode (agents/team.ts RewardFn). */
  perTurn: z.array(z.string()).optional(),
});
export type TurnRewards = z.infer<typeof turnRewards>;
