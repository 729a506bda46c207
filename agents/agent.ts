/**
 * Agents (roles): which model a role uses, which tools it may call, and the
 * limits that keep every episode bounded.
 */
import type { Tool } from './tool';

export interface Sampling {
  /** 0 means greedy (argmax). */
  temperature: number;
  topK: number;
  topP: number;
}

export const defaultSampling: Sampling = { temperature: 1, topK: 0, topP: 1 };

export interface AgentSpec {
  readonly model: string;
  readonly tools: readonly Tool[];
  /** Text put before everything the agent sees. */
  readonly instructions: string;
  /** Sampled tokens per turn (tool output does not count). */
  readonly maxTokens: number;
  /** Turns this agent may take in one episode. */
  readonly maxTurns: number;
  /** Tool calls within one turn. */
  readonly maxToolCalls: number;
  /** Whether the agent sees its own earlier turns. */
  readonly memory: boolean;
  readonly sampling: Sampling;
  /** Optimizer settings that override the model's for this role. */
  readonly optimizer?: Record<string, unknown>;
}

export interface AgentOptions {
  model: string;
  tools?: Tool[];
  instructions?: string;
  maxTokens: number;
  maxTurns?: number;
  maxToolCalls?: number;
  memory?: boolean;
  sampling?: Partial<Sampling>;
  optimizer?: Record<string, unknown>;
}

export function agent(opts: AgentOptions): AgentSpec {
  return {
    model: opts.model,
    tools: opts.tools ?? [],
    instructions: opts.instructions ?? '',
    maxTokens: opts.maxTokens,
    maxTurns: opts.maxTurns ?? 1,
    maxToolCalls: opts.maxToolCalls ?? 2,
    memory: opts.memory ?? true,
    sampling: { ...defaultSampling, ...opts.sampling },
    optimizer: opts.optimizer,
  };
}
