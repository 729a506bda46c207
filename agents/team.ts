/**
 * defineTeam: a named multi-agent system. Checked when defined, with every
 * problem reported by its path (`agents.verifier.model: unknown model ...`).
 */
import type { EpisodeStatus } from '../schema/trajectory';
import type { AgentSpec } from './agent';
import type { AgentHandle } from './episode';
import type { ModelSpec } from './model';
import type { TaskSource } from './tasks';
import type { Tokenizer } from './tokenizer';
import type { ToolSyntax } from './tool';

/** A turn as reward functions see it. */
export interface TurnView {
  index: number;
  agent: string;
  text: string;
  reply: string;
  toolCalls: ReadonlyArray<{ tool: string; input: unknown; output?: unknown; error?: string }>;
  stopReason: string;
}

export interface RewardArgs<TTask, TOutcome> {
  task: TTask;
  /** Undefined when the episode was truncated. */
  outcome: TOutcome | undefined;
  status: EpisodeStatus;
  /** The turn being scored (a reward function is called once per turn of its role). */
  turn: TurnView;
  /** Every turn of the episode, for rewards that depend on the whole graph. */
  turns: readonly TurnView[];
}

/** Named reward components; a constant per turn is an episode-level reward. */
export type RewardFn<TTask, TOutcome> = (args: RewardArgs<TTask, TOutcome>) => Record<string, number>;

export interface TeamDefinition<TTask, TOutcome, Roles extends string> {
  name: string;
  description?: string;
  tokenizer: Tokenizer;
  models: Record<string, ModelSpec>;
  agents: Record<Roles, AgentSpec>;
  tasks: TaskSource<TTask>;
  toolSyntax?: ToolSyntax;
  limits?: { maxTurns?: number };
  /** Plain async code: who talks to whom. Must be workflow-safe (no I/O, no Math.random). */
  episode(ctx: { task: TTask; agents: Record<Roles, AgentHandle> }): Promise<TOutcome>;
  rewards: Record<Roles, RewardFn<TTask, TOutcome>>;
  /** Whether the team solved the task: the eval success metric. */
  success(args: { task: TTask; outcome: TOutcome | undefined; status: EpisodeStatus }): boolean;
}

export interface Team<TTask = any, TOutcome = any, Roles extends string = string> extends TeamDefinition<TTask, TOutcome, Roles> {
  readonly limits: { maxTurns: number };
  readonly roles: readonly Roles[];
}

export type AnyTeam = Team<any, any, string>;

export class TeamDefinitionError extends Error {
  constructor(
    readonly team: string,
    readonly problems: string[],
  ) {
    super(`team ${team}: ${problems.join('; ')}`);
    this.name = 'TeamDefinitionError';
  }
}

const positiveInt = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v > 0;

export function defineTeam<TTask, TOutcome, Roles extends string>(def: TeamDefinition<TTask, TOutcome, Roles>): Team<TTask, TOutcome, Roles> {
  const problems: string[] = [];
  const name = def.name;
  if (typeof name !== 'string' || !/^[a-z][a-z0-9-]{0,39}$/.test(name)) problems.push(`name: must be lowercase letters, digits or '-', got ${JSON.stringify(name)}`);
  const models = Object.keys(def.models ?? {});
  if (models.length === 0) problems.push('models: at least one model is required');
  for (const [m, spec] of Object.entries(def.models ?? {})) {
    if (spec.tokenizer !== def.tokenizer) problems.push(`models.${m}.tokenizer: must be the team's tokenizer`);
    for (const k of ['contextWindow', 'embedDim', 'hiddenDim', 'layers'] as const) if (!positiveInt(spec[k])) problems.push(`models.${m}.${k}: must be a positive integer, got ${spec[k]}`);
  }
  const roles = Object.keys(def.agents ?? {}) as Roles[];
  if (roles.length === 0) problems.push('agents: at least one agent is required');
  for (const role of roles) {
    const a = def.agents[role];
    const at = `agents.${role}`;
    if (!a.model) problems.push(`${at}.model: every agent needs a model`);
    else if (!models.includes(a.model)) problems.push(`${at}.model: unknown model ${JSON.stringify(a.model)} (models: ${models.join(', ')})`);
    if (!positiveInt(a.maxTokens)) problems.push(`${at}.maxTokens: must be a positive integer, got ${a.maxTokens}`);
    if (!positiveInt(a.maxTurns)) problems.push(`${at}.maxTurns: must be a positive integer, got ${a.maxTurns}`);
    if (!(Number.isInteger(a.maxToolCalls) && a.maxToolCalls >= 0)) problems.push(`${at}.maxToolCalls: must be an integer >= 0`);
    const names = new Set<string>();
    a.tools.forEach((t, i) => {
      if (!t || typeof t.execute !== 'function') problems.push(`${at}.tools[${i}]: not a tool (use defineTool)`);
      else if (names.has(t.name)) problems.push(`${at}.tools[${i}]: duplicate tool ${t.name}`);
      else names.add(t.name);
    });
    if (a.tools.length > 0 && !def.toolSyntax) problems.push(`toolSyntax: agent ${role} has tools, so the team must declare how they are called`);
    if (typeof def.rewards?.[role] !== 'function') problems.push(`rewards.${role}: every agent needs a reward function`);
    try {
      def.tokenizer.encode(a.instructions);
    } catch (e) {
      problems.push(`${at}.instructions: ${(e as Error).message}`);
    }
    const s = a.sampling;
    if (!(s.temperature >= 0)) problems.push(`${at}.sampling.temperature: must be >= 0`);
    if (!(Number.isInteger(s.topK) && s.topK >= 0)) problems.push(`${at}.sampling.topK: must be an integer >= 0 (0 = off)`);
    if (!(s.topP > 0 && s.topP <= 1)) problems.push(`${at}.sampling.topP: must be in (0, 1]`);
  }
  for (const role of Object.keys(def.rewards ?? {})) if (!roles.includes(role as Roles)) problems.push(`rewards.${role}: no agent has this role`);
  for (const t of def.toolSyntax?.triggers ?? []) {
    try {
      def.tokenizer.encode(t);
    } catch (e) {
      problems.push(`toolSyntax.triggers: ${(e as Error).message}`);
    }
  }
  const maxTurns = def.limits?.maxTurns ?? roles.reduce((n, r) => n + (def.agents[r]?.maxTurns ?? 0), 0);
  if (!positiveInt(maxTurns)) problems.push(`limits.maxTurns: must be a positive integer, got ${maxTurns}`);
  if (typeof def.episode !== 'function') problems.push('episode: must be an async function');
  if (typeof def.success !== 'function') problems.push('success: must be a function');
  if (!def.tasks || (def.tasks.kind !== 'generated' && def.tasks.kind !== 'jsonl')) problems.push('tasks: must be generatedTasks(...) or jsonlTasks(...)');
  if (problems.length > 0) throw new TeamDefinitionError(String(name), problems);
  return { ...def, limits: { maxTurns }, roles };
}
