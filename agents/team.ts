/**
 * defineTeam: a named multi-agent system. Checked when defined, with every
 * problem reported by its path (`agents.verifier.model: unknown model ...`).
 */
import type { EpisodeStatus } from '../schema/trajectory';
import type { AgentSpec } from './agent';
import type { AgentHandle } from './episode';
import { familyOf, normalizeModelSpec } from '../engines/families';
import { ModelSpecError, type ModelSpec as EngineModelSpec } from '../engines/families/model-family';
import { MAX_TOKENS_LIMIT } from '../engines/protocol/types';
import { checkpointIssues, checkpointOf, engineSpec, resolveLoraModels, type ModelSpec } from './model';
import type { TaskSource } from './tasks';
import type { ChatTemplate } from './chat-template';
import type { Tokenizer } from './tokenizer';
import { renderIssues, toolIssues, type ToolSyntax } from './tool';
import { chatOpening } from './turn';
import { FieldError, joinPath, type FieldIssue } from '../infra/issues';

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

/**
 * Named reward components of one turn. A plain object scores the episode (a constant per turn
 * is an episode-level reward). `{ episode, turn }` also scores the turn itself: `turn` holds the
 * turn's own signal (a step done right), which turn-level estimators credit to this turn and the
 * turns before it, and `episode` the outcome; episode-level estimators add the two up. A name
 * is in one of them, not both.
 */
export type RewardFn<TTask, TOutcome> = (args: RewardArgs<TTask, TOutcome>) => Record<string, number> | SplitRewards;

/** Episode and per-turn components of one turn (see RewardFn). */
export interface SplitRewards {
  episode?: Record<string, number>;
  turn?: Record<string, number>;
}

export interface TeamDefinition<TTask, TOutcome, Roles extends string> {
  name: string;
  description?: string;
  tokenizer: Tokenizer;
  /** Frames every agent's turns (system / user / assistant / tool) with the model's chat template; without it, contexts are BOS + instructions + message. */
  chatTemplate?: ChatTemplate;
  models: Record<string, ModelSpec>;
  agents: Record<Roles, AgentSpec>;
  tasks: TaskSource<TTask>;
  toolSyntax?: ToolSyntax;
  /**
   * maxTurns: turns per episode. cpuMs: how long an episode's own code may run in all (batched
   * mode, default 30 s); code that runs that long without awaiting a turn or tool is stopped.
   */
  limits?: { maxTurns?: number; cpuMs?: number };
  /**
   * The run settings this team trains best with (e.g. `{ steps: 60, groupsPerStep: 32 }`): a run of
   * the team takes them where its own config leaves the field unset (schema/run-config.ts, withTeamRunDefaults).
   */
  run?: TeamRunDefaults;
  /** Plain async code: who talks to whom. Must be workflow-safe (no I/O, no Math.random). */
  episode(ctx: { task: TTask; agents: Record<Roles, AgentHandle> }): Promise<TOutcome>;
  rewards: Record<Roles, RewardFn<TTask, TOutcome>>;
  /** Whether the team solved the task: the eval success metric. */
  success(args: { task: TTask; outcome: TOutcome | undefined; status: EpisodeStatus }): boolean;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- as Tool's: callbacks take TTask / TOutcome, so unknown would refuse every typed team
export interface Team<TTask = any, TOutcome = any, Roles extends string = string> extends TeamDefinition<TTask, TOutcome, Roles> {
  readonly limits: { maxTurns: number; cpuMs: number };
  readonly roles: readonly Roles[];
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any team whatever its task and outcome types (see Team)
export type AnyTeam = Team<any, any, string>;

/** Run-config fields a team may default (TeamDefinition.run); the run config's own bounds still apply. */
export interface TeamRunDefaults {
  steps?: number;
  groupsPerStep?: number;
  groupSize?: number;
  evalEvery?: number;
}
const RUN_DEFAULT_FIELDS: readonly (keyof TeamRunDefaults)[] = ['steps', 'groupsPerStep', 'groupSize', 'evalEvery'];

/** A team definition's problems, each by path (`agents.x.model: unknown model "y"`). */
export class TeamDefinitionError extends FieldError {
  override readonly name = 'TeamDefinitionError';
  constructor(
    readonly team: string,
    issues: readonly FieldIssue[],
  ) {
    super(issues, `team ${team}`);
  }

  /** Each problem as `path: message`. */
  get problems(): string[] {
    return this.issues.map((i) => `${i.path}: ${i.message}`);
  }
}

/** Batched episodes: the CPU time an episode's own code may use by default. */
export const DEFAULT_EPISODE_CPU_MS = 30_000;

/**
 * Whether the agent's shortest possible first turn (its instructions, as framed, and an empty
 * message, then maxTokens sampled) already breaks its model's sequence rule (a transformer's
 * maxSeq): every turn would be refused by the engine. Longer contexts (messages, memory, tool
 * output) are known only at run time, where the engine refuses them (INVALID_REQUEST).
 * Throws the tokenizer's error when the instructions do not encode, with `tools` as its path when
 * the tools' definitions (a chat template shows them) do not.
 */
function sequenceIssue(
  def: { tokenizer: Tokenizer; chatTemplate?: ChatTemplate; toolSyntax?: ToolSyntax },
  a: AgentSpec,
  tools: AgentSpec['tools'],
  spec: EngineModelSpec | undefined,
): string | undefined {
  const tok = def.tokenizer;
  let context: number;
  if (!def.chatTemplate) context = 1 + tok.encode(a.instructions).length;
  else {
    const chat = def.chatTemplate;
    // without the tools first: text that does not encode there is the instructions'
    const plain = tok.encode(chatOpening(chat, { instructions: a.instructions, tools: [] }, '', def.toolSyntax)).length;
    try {
      context = tools.length > 0 ? tok.encode(chatOpening(chat, { instructions: a.instructions, tools }, '', def.toolSyntax)).length : plain;
    } catch (e) {
      throw Object.assign(new Error(`its tools as the chat template shows them: ${(e as Error).message}`), { path: 'tools' });
    }
  }
  if (!spec || !positiveInt(a.maxTokens) || a.maxTokens > MAX_TOKENS_LIMIT) return undefined; // maxTokens itself is refused
  const issue = familyOf(spec.family).sequenceIssue(spec, context, context + a.maxTokens);
  if (!issue) return undefined;
  const shortest = def.chatTemplate ? 'its instructions and tools in the chat template, empty message' : 'BOS and its instructions, empty message';
  return `its shortest context (${context} tokens: ${shortest}) + maxTokens ${a.maxTokens}: ${issue.message} (models.${a.model}); lower maxTokens, shorten the instructions or raise maxSeq`;
}

const positiveInt = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v > 0;

export function defineTeam<TTask, TOutcome, Roles extends string>(def: TeamDefinition<TTask, TOutcome, Roles>): Team<TTask, TOutcome, Roles> {
  const issues: FieldIssue[] = [];
  const bad = (path: string, message: string) => issues.push({ path, message });
  const name = def.name;
  if (typeof name !== 'string' || !/^[a-z][a-z0-9-]{0,39}$/.test(name)) bad('name', `must be lowercase letters, digits or '-', got ${JSON.stringify(name)}`);
  // a checkpoint's tokenizer in workflow code: the texts are checked where it is read (activities)
  const readable = def.tokenizer?.kind !== 'placeholder';
  const models = Object.keys(def.models ?? {});
  if (models.length === 0) bad('models', 'at least one model is required');
  const normalized = new Map<string, EngineModelSpec>();
  const lora = resolveLoraModels(def.models ?? {});
  for (const i of lora.issues) bad(i.path, i.message);
  for (const [m, spec] of Object.entries(lora.models)) {
    if (spec.tokenizer !== def.tokenizer) bad(`models.${m}.tokenizer`, "must be the team's tokenizer");
    if (typeof spec.tokenizer?.size !== 'number') continue;
    if (spec.base !== undefined && lora.issues.some((i) => i.path.startsWith(`models.${m}.`))) continue;
    if (checkpointOf(spec) !== undefined) {
      for (const i of checkpointIssues(spec)) bad(`models.${m}.${i.field}`, i.message);
      continue;
    }
    try {
      normalized.set(m, normalizeModelSpec(engineSpec(spec), `models.${m}`)); // the family's own rules, errors by field path
    } catch (e) {
      if (!(e instanceof ModelSpecError)) throw e;
      for (const i of e.issues) bad(i.path, i.message);
    }
  }
  const roles = Object.keys(def.agents ?? {}) as Roles[];
  if (roles.length === 0) bad('agents', 'at least one agent is required');
  const toolNames = new Set<string>();
  for (const role of roles) {
    const a = def.agents[role];
    const at = `agents.${role}`;
    if (!a.model) bad(`${at}.model`, 'every agent needs a model');
    else if (!models.includes(a.model)) bad(`${at}.model`, `unknown model ${JSON.stringify(a.model)} (models: ${models.join(', ')})`);
    if (!positiveInt(a.maxTokens)) bad(`${at}.maxTokens`, `must be a positive integer, got ${a.maxTokens}`);
    else if (a.maxTokens > MAX_TOKENS_LIMIT)
      bad(`${at}.maxTokens`, `must be at most ${MAX_TOKENS_LIMIT} (the engines' limit per generation), got ${a.maxTokens}`);
    if (!positiveInt(a.maxTurns)) bad(`${at}.maxTurns`, `must be a positive integer, got ${a.maxTurns}`);
    if (!(Number.isInteger(a.maxToolCalls) && a.maxToolCalls >= 0)) bad(`${at}.maxToolCalls`, 'must be an integer >= 0');
    const names = new Set<string>();
    a.tools.forEach((t, i) => {
      const problems = toolIssues(t);
      for (const p of problems) bad(joinPath(`${at}.tools[${i}]`, p.path ? [p.path] : []), p.message);
      if (problems.length > 0) return;
      if (readable) for (const p of renderIssues(t, (text) => def.tokenizer.encode(text))) bad(joinPath(`${at}.tools[${i}]`, [p.path]), p.message);
      if (names.has(t.name)) bad(`${at}.tools[${i}]`, `duplicate tool ${t.name}`);
      names.add(t.name);
      toolNames.add(t.name);
    });
    if (a.tools.length > 0 && !def.toolSyntax) bad('toolSyntax', `agent ${role} has tools, so the team must declare how they are called`);
    if (typeof def.rewards?.[role] !== 'function') bad(`rewards.${role}`, 'every agent needs a reward function');
    if (readable) {
      try {
        // tools that are not tools are refused above; the context is then measured without them
        const tools = a.tools.every((t) => toolIssues(t).length === 0) ? a.tools : [];
        const issue = sequenceIssue(def, a, tools, normalized.get(a.model));
        if (issue) bad(`${at}.maxTokens`, issue);
      } catch (e) {
        bad(`${at}.${(e as { path?: string }).path ?? 'instructions'}`, (e as Error).message);
      }
    }
    const s = a.sampling;
    if (!(s.temperature >= 0)) bad(`${at}.sampling.temperature`, 'must be >= 0');
    if (!(Number.isInteger(s.topK) && s.topK >= 0)) bad(`${at}.sampling.topK`, 'must be an integer >= 0 (0 = off)');
    if (!(s.topP > 0 && s.topP <= 1)) bad(`${at}.sampling.topP`, 'must be in (0, 1]');
  }
  for (const role of Object.keys(def.rewards ?? {})) if (!roles.includes(role as Roles)) bad(`rewards.${role}`, 'no agent has this role');
  if (def.toolSyntax && readable) {
    const syntax = def.toolSyntax;
    for (const t of syntax.triggers ?? []) {
      try {
        def.tokenizer.encode(t);
      } catch (e) {
        bad('toolSyntax.triggers', (e as Error).message);
      }
    }
    const context = { tools: [...toolNames], encode: (text: string) => def.tokenizer.encode(text), chatTemplate: def.chatTemplate };
    for (const i of syntax.check?.(context) ?? []) bad(i.path ? joinPath('toolSyntax', [i.path]) : 'toolSyntax', i.message);
  }
  const maxTurns = def.limits?.maxTurns ?? roles.reduce((n, r) => n + (def.agents[r]?.maxTurns ?? 0), 0);
  if (!positiveInt(maxTurns)) bad('limits.maxTurns', `must be a positive integer, got ${maxTurns}`);
  const cpuMs = def.limits?.cpuMs ?? DEFAULT_EPISODE_CPU_MS;
  if (!positiveInt(cpuMs)) bad('limits.cpuMs', `must be a positive integer (milliseconds), got ${JSON.stringify(cpuMs)}`);
  if (def.chatTemplate !== undefined && typeof def.chatTemplate?.open !== 'function')
    bad('chatTemplate', 'must be chatTemplate(...) (agents/chat-template.ts)');
  for (const [field, v] of Object.entries(def.run ?? {})) {
    if (!RUN_DEFAULT_FIELDS.includes(field as keyof TeamRunDefaults))
      bad(`run.${field}`, `unknown field (a team may default ${RUN_DEFAULT_FIELDS.join(', ')})`);
    else if (!(typeof v === 'number' && Number.isInteger(v) && v >= (field === 'evalEvery' ? 0 : 1)))
      bad(`run.${field}`, `must be an integer >= ${field === 'evalEvery' ? 0 : 1}, got ${JSON.stringify(v)}`);
  }
  if (typeof def.episode !== 'function') bad('episode', 'must be an async function');
  if (typeof def.success !== 'function') bad('success', 'must be a function');
  if (!def.tasks || (def.tasks.kind !== 'generated' && def.tasks.kind !== 'jsonl')) bad('tasks', 'must be generatedTasks(...) or jsonlTasks(...)');
  if (issues.length > 0) throw new TeamDefinitionError(String(name), issues);
  return { ...def, models: lora.models as typeof def.models, limits: { maxTurns, cpuMs }, roles };
}
