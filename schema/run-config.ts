/**
 * The run config: the one object a trainingRun workflow takes (the Temporal UI
 * sends one JSON payload). Validated inside the workflow and by the CLI, with
 * every bad field named. Checks that need the team (model and role names) are
 * in `checkAgainstTeam`.
 */
import { z } from 'zod';
import type { AnyTeam } from '../agents/team';
import {
  applyOptimizerChange,
  mergeOverrides,
  optimizerConfigSchema,
  parseOptimizerChange,
  resolveSettings,
  SettingsError,
  type OptimizerChange,
  type OptimizerOverrides,
  type OptimizerSettings,
} from './optimizer';
import { FieldError, issuesFromZod, type FieldIssue } from '../infra/issues';
import { lazily } from '../infra/lazily';
import { TRACKING_URI, TRACKING_URI_RULE } from '../infra/mlflow-client';
import { CORRECTION_NAMES, DEFAULT_CORRECTION, type CorrectionName } from '../rl/corrections/registry';
import { BASELINES, DEFAULT_BASELINE, type Baseline } from '../rl/corrections/proximal-baseline';
import { DEFAULT_STEP_SIZE, STEP_SIZES, type StepSize } from '../rl/corrections/step-size';
import { DEFAULT_MOMENTUM, MOMENTA, type Momentum } from '../rl/corrections/momentum';

/** Bound on staleness: each step of lag keeps one more step's rollout in flight. */
export const MAX_STALENESS = 8;

const poolName = () => z.string().regex(/^[A-Za-z0-9._-]{1,100}$/, 'a pool name: letters, digits, . _ - only (1-100)');
const int = (min: number, max: number) => z.number().int('must be an integer').min(min, `must be >= ${min}`).max(max, `must be <= ${max}`);

/** One model's off-policy correction (rl/corrections/): which, and the settings it reads. */
const correctionSchema = () =>
  z.strictObject({
    correction: z.enum(CORRECTION_NAMES, `must be one of ${CORRECTION_NAMES.join(', ')}`).optional(),
    /** C: the truncation cap (decoupled-ppo, tis-*) or the masking threshold (mis-*). */
    cap: z.number().min(1, 'must be >= 1').max(1e6, 'must be <= 1000000').optional(),
    /** [lo, hi]: the ratios IcePop keeps. */
    band: z
      .tuple([z.number().min(0, 'must be >= 0').max(1, 'must be <= 1'), z.number().min(1, 'must be >= 1').max(1e6, 'must be <= 1000000')], 'must be [lo, hi]')
      .optional(),
    /**
     * Which policy a stale group's advantages are centred on (rl/corrections/proximal-baseline.ts):
     * 'behaviour' (default) keeps the estimator's centring on what the sampling version scored,
     * 'proximal' re-centres each (task group, agent) set under the correction's weights.
     */
    baseline: z.enum(BASELINES, `must be one of ${BASELINES.join(', ')}`).optional(),
    /**
     * The update's learning rate for a stale batch (rl/corrections/step-size.ts): 'ess' (default) scales it
     * by the batch's effective sample share under the weights, 'constant' keeps it (before 2026-12).
     */
    stepSize: z.enum(STEP_SIZES, `must be one of ${STEP_SIZES.join(', ')}`).optional(),
    /**
     * Adam's first moment for a stale batch (rl/corrections/momentum.ts): 'off' (default) updates with β1 = 0,
     * 'keep' with the model's betas (before 2026-12).
     */
    momentum: z.enum(MOMENTA, `must be one of ${MOMENTA.join(', ')}`).optional(),
  });

const runIdSchema = () => z.string().regex(/^[A-Za-z0-9._-]{1,100}$/, 'a run id: letters, digits, . _ - only (1-100)');

/** init.<model>: { run, step } or { run, version } (and the other run's model name when it differs). */
const initSourceSchema = () =>
  z
    .strictObject({
      run: runIdSchema(),
      model: z.string().min(1, 'must name a model').optional(),
      step: int(0, 1_000_000).optional(),
      version: int(0, 1_000_000).optional(),
    })
    .superRefine((v, ctx) => {
      if ((v.step === undefined) === (v.version === undefined))
        ctx.addIssue({ code: 'custom', path: [], message: 'give one of step (the version served after that step) or version' });
    });

// Built on first use (infra/lazily.ts).
export const runConfigSchema = lazily(() =>
  z.strictObject({
    /** Team name in the registry (agents/team-registry.ts): a team of the project. */
    team: z.string().min(1, 'must name a team'),
    teamOptions: z.record(z.string(), z.unknown()).default({}),
    /** Stable id of the run; defaults to the workflow id. */
    runId: z
      .string()
      .regex(/^[A-Za-z0-9._-]{1,100}$/, 'letters, digits, . _ - only (1-100)')
      .optional(),
    /** Training steps; 0: evaluate the initial models only (with `init` or `fork`: another run's committed version). */
    steps: int(0, 1_000_000).default(40),
    groupsPerStep: int(1, 4096).default(16),
    groupSize: int(1, 1024).default(8),
    rollout: z.enum(['batched', 'durable']).default('batched'),
    /**
     * Durable rollouts: episodes per rollout node (workflows/rollout-node.ts). A rollout of more episodes
     * starts ceil(episodes / rolloutNodeSize) nodes, each starting its slice of episode children; at most
     * 1,000 keeps a node well inside Temporal's 2,000 pending children and its history limits.
     */
    rolloutNodeSize: int(1, 1000).default(500),
    /**
     * Durable rollouts: episodes per workflow. 1: each episode is its own child workflow. More: that many
     * consecutive episodes of the plan run in one workflow (workflows/episode.ts, episodeGroupWorkflow),
     * each still with its own id, turns and record, at a fraction of the per-workflow cost; a hung
     * episode then stops its whole workflow. At most 64 keeps a workflow's history well under Temporal's limits.
     */
    episodesPerWorkflow: int(1, 64).default(1),
    /** Optimizer settings for every model, per model, and per agent (role). */
    optimizer: optimizerConfigSchema().prefault({}),
    /** Eval on held-out tasks every N steps (0: only before the first and after the last step). */
    evalEvery: int(0, 1_000_000).default(10),
    /** Held-out tasks per eval (0: all of them). */
    evalTasks: int(0, 100_000).default(0),
    seed: int(0, 2 ** 31 - 1).default(0),
    /** What to do when an update's loss or gradients are not finite. */
    nonFinite: z.enum(['skip', 'reduce-lr', 'fail']).default('skip'),
    /**
     * Asynchronous RL (docs/running.md, "Asynchronous RL"): the rollout of step t uses the version each model
     * had at step max(0, t − k) and runs while the updates of steps t − k … t − 1 are in flight.
     * One k for every model, or one per model name (missing models: 0). 0: synchronous.
     */
    staleness: z
      .union([z.number(), z.record(z.string(), z.number())], 'must be an integer k or an object { <model>: k }')
      .superRefine((v, ctx) => {
        for (const [path, k] of typeof v === 'number' ? [[[], v] as const] : Object.entries(v).map(([m, k]) => [[m], k] as const)) {
          const r = int(0, MAX_STALENESS).safeParse(k);
          if (!r.success) ctx.addIssue({ code: 'custom', path: [...path], message: r.error.issues[0]!.message });
        }
      })
      .default(0),
    /** The default cap C of the off-policy corrections (offPolicy.cap overrides it). */
    importanceCap: z.number().min(1, 'must be >= 1').max(1e6, 'must be <= 1000000').default(5),
    /**
     * How asynchronous models' updates correct for their stale rollouts (docs/running.md, "Off-policy
     * corrections"): one setting for every model, `models` overriding it per model name.
     * Default: decoupled PPO with cap importanceCap.
     */
    offPolicy: correctionSchema()
      .extend({ models: z.record(z.string(), correctionSchema()).optional() })
      .optional(),
    /**
     * Where each model samples and trains, overriding its team's `pool` / `trainPool`: { <model>: { sample?, train? } }.
     * Pool names map to task queues as the team's do (activities/training/pool-queues.ts).
     */
    pools: z.record(z.string(), z.strictObject({ sample: poolName().optional(), train: poolName().optional() })).optional(),
    /**
     * Partial rollouts (docs/running.md, "Partial rollouts"; batched rollouts, any staleness): a step starts
     * ceil(groupsPerStep x overProvision) groups (carried ones first), ends its rollout once minFinished
     * whole groups finished (default groupsPerStep), trains on the finished groups and carries the rest,
     * turns and tokens so far, in the store into the next step's rollout. maxCarrySteps bounds the carry:
     * a group planned at step s is trained at step s + maxCarrySteps at the latest (that step's rollout
     * waits for it to finish); unset: no bound.
     */
    partialRollouts: z
      .strictObject({
        overProvision: z.number().min(1, 'must be >= 1').max(8, 'must be <= 8').default(1.5),
        minFinished: int(1, 4096).optional(),
        maxCarrySteps: int(1, 1_000_000).optional(),
      })
      .optional(),
    /**
     * MLflow tracking server the run's params, metrics, config and end go to (activities/store/mlflow.ts),
     * e.g. http://mlflow.internal:5000; unset: the control worker's MLFLOW_TRACKING_URI; `off`: none.
     */
    mlflow: z.string().regex(TRACKING_URI, TRACKING_URI_RULE).optional(),
    /** Fail the run after this many consecutive steps in which no model could train (every update skipped); 0: never. */
    maxStepsWithoutSignal: int(0, 1_000_000).default(3),
    /**
     * Models that sample but never update (docs/running.md, "Fork, freeze and init-from"): their update is not
     * scheduled and they serve their version 0 for the whole run. At least one model must train.
     */
    frozen: z.array(z.string().min(1, 'must name a model'), 'must be a list of model names').optional(),
    /**
     * Version 0 of a model is another run's version (weights and optimizer state, by reference): the version that
     * model served after `step` of that run (its newest version committed at or before it), or `version` itself.
     * `model`: the other run's model name when it differs. The specs must match.
     */
    init: z.record(z.string(), initSourceSchema()).optional(),
    /**
     * A fork of another run at one of its committed steps: every model's version 0 is the version it served after
     * that step (init-from of every model); the lineage troupe list, status and the dashboard show.
     */
    fork: z.strictObject({ run: runIdSchema(), step: int(0, 1_000_000) }).optional(),
    /**
     * A supervised run (docs/running.md, "Supervised fine-tuning (SFT)"): each step trains every trained model on a
     * seeded batch of stored agent turns (cross-entropy on their response tokens) instead of a rollout.
     */
    sft: sftSchema().optional(),
  }),
);

/**
 * sft: where the dataset's turns come from and how many a step trains on. `from.run`: the episodes of an earlier
 * run in the store, filtered (activities/training/sft.ts): `split` train (default) or eval episodes, of steps
 * `steps.from`..`steps.to`, completed only (default; false also keeps truncated ones, failed ones never), with
 * success only where `successOnly`, and turns whose own reward (the sum of the components its role's reward
 * gave it) is at least `minReward`. `jsonl` instead: an absolute path of a JSONL file of conversations
 * (`{"agent": "<name>", "messages": [{"role", "content"}, ...]}` a line), each assistant message one turn, rendered as
 * the agent's episode renders its turns. `batch`: turns per step, drawn without replacement from the run seed and step.
 */
const sftSchema = () =>
  z
    .strictObject({
      from: z
        .strictObject({
          run: runIdSchema(),
          split: z.enum(['train', 'eval']).default('train'),
          steps: z
            .strictObject({ from: int(0, 1_000_000).optional(), to: int(0, 1_000_000).optional() })
            .refine((s) => s.from === undefined || s.to === undefined || s.from <= s.to, { message: 'from must be <= to' })
            .optional(),
          completedOnly: z.boolean().default(true),
          successOnly: z.boolean().default(false),
          minReward: z.number().refine(Number.isFinite, 'must be a finite number').optional(),
        })
        .optional(),
      jsonl: z
        .string()
        .refine((p) => p.startsWith('/'), 'must be an absolute path (the workers may run in another directory)')
        .optional(),
      batch: int(1, 16_384).default(64),
    })
    .refine((s) => (s.from === undefined) !== (s.jsonl === undefined), { message: "give one of from (a run's episodes) or jsonl (a file of conversations)" });
export type SftSetting = z.output<ReturnType<typeof sftSchema>>;

/** Where a model's version 0 comes from (init.<model>, or every model of a fork). */
export interface InitSource {
  run: string;
  /** The other run's model (default: the same name). */
  model?: string;
  step?: number;
  version?: number;
}

/** The source of model `model`'s version 0 in this run, if it does not start from its own init: `init.<model>`, else the fork. */
export function initSourceOf(config: Pick<RunConfig, 'init' | 'fork'>, model: string): InitSource | undefined {
  const own = config.init?.[model];
  if (own) return own;
  return config.fork ? { run: config.fork.run, step: config.fork.step } : undefined;
}

/** The field a source of model `model` came from, for messages (`init.policy`, `fork`). */
export const initFieldOf = (config: Pick<RunConfig, 'init'>, model: string) => (config.init?.[model] ? `init.${model}` : 'fork');

/** A stored run config's lineage (fork, init, frozen), read leniently: what list, status and the dashboard show. */
export interface Lineage {
  fork?: { run: string; step: number };
  init?: Record<string, InitSource>;
  frozen?: string[];
  /** An SFT run's dataset (run config sft). */
  sft?: SftSetting;
}

export function lineageOf(config: unknown): Lineage {
  const c = (config ?? {}) as { fork?: Lineage['fork']; init?: Lineage['init']; frozen?: Lineage['frozen']; sft?: Lineage['sft'] };
  return {
    ...(c.fork ? { fork: c.fork } : {}),
    ...(c.init ? { init: c.init } : {}),
    ...(c.frozen?.length ? { frozen: c.frozen } : {}),
    ...(c.sft?.from || c.sft?.jsonl ? { sft: c.sft } : {}),
  };
}

/** "SFT from run R (train episodes, completed, reward >= 1), 64 turns a step": what troupe status says of an SFT run. */
export function sftLine(sft: SftSetting): string {
  const f = sft.from;
  if (!f) return `SFT from ${sft.jsonl}, ${sft.batch ?? 64} turns a step`;
  const steps = f.steps ? `, steps ${f.steps.from ?? 0}-${f.steps.to ?? 'last'}` : '';
  const filters = [
    `${f.split ?? 'train'} episodes${steps}`,
    ...(f.completedOnly === false ? [] : ['completed']),
    ...(f.successOnly ? ['successful'] : []),
    ...(f.minReward !== undefined ? [`turn reward >= ${f.minReward}`] : []),
  ];
  return `SFT from run ${f.run} (${filters.join(', ')}), ${sft.batch ?? 64} turns a step`;
}

/** One line each: "forked from R at step N", "model m starts from run R step N", "frozen: a, b". */
export function lineageLines(l: Lineage): string[] {
  const source = (s: InitSource) => `run ${s.run}${s.model ? ` model ${s.model}` : ''} ${s.step !== undefined ? `step ${s.step}` : `version ${s.version}`}`;
  return [
    ...(l.fork ? [`forked from ${l.fork.run} at step ${l.fork.step}`] : []),
    ...Object.entries(l.init ?? {}).map(([m, s]) => `model ${m} starts from ${source(s)}`),
    ...(l.frozen ? [`frozen: ${l.frozen.join(', ')}`] : []),
    ...(l.sft ? [sftLine(l.sft)] : []),
  ];
}

/** The models a run updates: every model of the team but the frozen ones. */
export function trainedModels(config: Pick<RunConfig, 'frozen'>, models: readonly string[]): string[] {
  const frozen = new Set(config.frozen ?? []);
  return models.filter((m) => !frozen.has(m));
}

/** Temporal's limit on a workflow's pending child workflows (the run's, and each rollout node's). */
export const MAX_PENDING_CHILDREN = 2000;

/** Child workflows a durable rollout of n episodes starts from the run: its episodes' workflows, or past one node's worth its rollout nodes. */
export const rolloutChildren = (episodes: number, nodeSize: number, perWorkflow = 1) =>
  episodes <= nodeSize ? Math.ceil(episodes / perWorkflow) : Math.ceil(episodes / nodeSize);

/**
 * Episodes one step may plan. A batched step's history grows by one rollout
 * activity per 256 episodes (64 here, ~200 events) and its update loads the
 * whole step into one batch; far larger steps would wedge the control worker.
 */
export const MAX_STEP_EPISODES = 16_384;

export type RunConfigInput = z.input<ReturnType<typeof runConfigSchema>>;
export type RunConfig = z.output<ReturnType<typeof runConfigSchema>>;

export class RunConfigError extends FieldError {
  override readonly name = 'RunConfigError';
  constructor(issues: readonly FieldIssue[]) {
    super(issues, 'invalid run config');
  }
}

/** Parses a config; throws RunConfigError naming each bad field. */
export function parseRunConfig(input: unknown): RunConfig {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new RunConfigError([{ path: '(config)', message: 'must be a JSON object' }]);
  const r = runConfigSchema().safeParse(input);
  if (!r.success) throw new RunConfigError(issuesFromZod(r.error, { unknownKey: 'unknown field', root: '(config)' }));
  const episodes = r.data.groupsPerStep * r.data.groupSize;
  if (r.data.rollout === 'durable') {
    const issue = pendingChildrenIssue(r.data, episodes);
    if (issue) throw new RunConfigError([issue]);
  } else if (r.data.episodesPerWorkflow > 1) {
    throw new RunConfigError([{ path: 'episodesPerWorkflow', message: "needs rollout: 'durable' (a batched rollout runs its episodes in activities)" }]);
  }
  if (episodes > MAX_STEP_EPISODES) {
    throw new RunConfigError([
      {
        path: 'groupSize',
        message: `a step may run at most ${MAX_STEP_EPISODES} episodes: groupsPerStep x groupSize must be <= ${MAX_STEP_EPISODES}, got ${r.data.groupsPerStep} x ${r.data.groupSize} = ${episodes}`,
      },
    ]);
  }
  const sftIssue = sftConfigIssue(r.data);
  if (sftIssue) throw new RunConfigError([sftIssue]);
  const partial = r.data.partialRollouts;
  if (partial) {
    const issue = partialIssue(r.data, partial);
    if (issue) throw new RunConfigError([issue]);
  }
  return r.data;
}

/** An SFT run has no rollout: the settings of the rollout's schedule do not apply to it. */
function sftConfigIssue(c: RunConfig): FieldIssue | undefined {
  if (!c.sft) return undefined;
  if (c.partialRollouts) return { path: 'sft', message: 'an SFT run has no rollout: partialRollouts does not apply (give one of them)' };
  const k = typeof c.staleness === 'number' ? c.staleness : Math.max(0, ...Object.values(c.staleness));
  if (k > 0) return { path: 'sft', message: 'an SFT run has no rollout: staleness must be 0' };
  return undefined;
}

/**
 * The config a run of `team` starts from: the team's run defaults (TeamDefinition.run) under every
 * field the input sets. The CLI, the client and the workflow (a config typed into the Web UI) apply it
 * before parseRunConfig, so a field the user leaves out takes the team's value, then the global default.
 */
export function withTeamRunDefaults<T extends object>(input: T, team: Pick<AnyTeam, 'run'>): T {
  if (!team.run) return input;
  const set = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
  return { ...team.run, ...set } as T;
}

/**
 * A durable run's rollouts in flight at once (1 + staleness steps, and an eval) must stay within the run
 * workflow's pending children; a rollout node keeps its own slice (at most rolloutNodeSize) under the same limit.
 */
function pendingChildrenIssue(config: RunConfig, episodes: number): FieldIssue | undefined {
  const k = Math.max(0, ...(typeof config.staleness === 'number' ? [config.staleness] : Object.values(config.staleness)));
  const step = rolloutChildren(episodes, config.rolloutNodeSize, config.episodesPerWorkflow);
  const evalChildren = rolloutChildren(config.evalTasks, config.rolloutNodeSize, config.episodesPerWorkflow);
  const pending = (1 + k) * step + evalChildren;
  if (pending <= MAX_PENDING_CHILDREN) return undefined;
  return {
    path: 'rolloutNodeSize',
    message: `durable rollouts may keep at most ${MAX_PENDING_CHILDREN} child workflows of the run pending (Temporal's limit): (1 + staleness ${k}) x ${step} for a step of ${episodes} episodes + ${evalChildren} for an eval of ${config.evalTasks} tasks is ${pending}; a rollout of more than rolloutNodeSize ${config.rolloutNodeSize} episodes starts one child per rolloutNodeSize episodes, so lower rolloutNodeSize`,
  };
}

/** The shape of a step with partial rollouts (the rollout activity's input, workflows/training-run/rollout.ts). */
export interface PartialShape {
  /** Groups in flight. */
  inFlight: number;
  /** Whole groups that end the rollout. */
  minFinished: number;
  /** Steps a group may be carried: one carried this often must finish in the step's rollout. Unset: no bound. */
  maxCarrySteps?: number;
}

/** Groups a step with partial rollouts keeps in flight, how many whole ones end its rollout, and how often one may be carried. */
export function partialShape(config: Pick<RunConfig, 'groupsPerStep' | 'partialRollouts'>): PartialShape | undefined {
  const p = config.partialRollouts;
  if (!p) return undefined;
  return {
    inFlight: Math.ceil(config.groupsPerStep * p.overProvision - 1e-9),
    minFinished: p.minFinished ?? config.groupsPerStep,
    // only when set: a run without it gives its rollout activity the input it always had
    ...(p.maxCarrySteps === undefined ? {} : { maxCarrySteps: p.maxCarrySteps }),
  };
}

function partialIssue(config: RunConfig, partial: NonNullable<RunConfig['partialRollouts']>): FieldIssue | undefined {
  const shape = partialShape(config)!;
  if (config.rollout !== 'batched') return { path: 'partialRollouts', message: "needs rollout: 'batched' (durable episodes are not carried yet)" };
  if (shape.minFinished > shape.inFlight)
    return {
      path: 'partialRollouts.minFinished',
      message: `must be <= the groups in flight, ceil(groupsPerStep x overProvision) = ceil(${config.groupsPerStep} x ${partial.overProvision}) = ${shape.inFlight}, got ${shape.minFinished}`,
    };
  if (shape.inFlight * config.groupSize > MAX_STEP_EPISODES)
    return {
      path: 'partialRollouts.overProvision',
      message: `a step may run at most ${MAX_STEP_EPISODES} episodes: ${shape.inFlight} groups x groupSize ${config.groupSize} is ${shape.inFlight * config.groupSize}`,
    };
  return undefined;
}

/** Settings that are one per update (per model); an agent on a shared model cannot override them. */
const MODEL_LEVEL = [
  'lr',
  'betas',
  'eps',
  'weightDecay',
  'gradClipMaxNorm',
  'clipLow',
  'clipHigh',
  'dualClip',
  'kl',
  'entropyCoef',
  'lossAggregation',
  'horizon',
] as const;

export interface ResolvedTraining {
  /** Optimizer settings per model (what its Update uses). */
  models: Record<string, OptimizerSettings>;
  /** Settings per agent (estimator and reward weights used for its advantages). */
  agents: Record<string, OptimizerSettings>;
}

/**
 * Resolves every model's and agent's settings:
 * defaults <- team model <- config.all <- config model <- team agent <- config agent.
 * Reports unknown model/role names and shared-model conflicts by path.
 */
export function checkAgainstTeam(config: RunConfig, team: AnyTeam): ResolvedTraining {
  const issues: FieldIssue[] = [];
  const modelNames = Object.keys(team.models);
  for (const m of Object.keys(config.optimizer.models))
    if (!modelNames.includes(m)) issues.push({ path: `optimizer.models.${m}`, message: `unknown model (team ${team.name} has: ${modelNames.join(', ')})` });
  for (const m of Object.keys(config.pools ?? {}))
    if (!modelNames.includes(m)) issues.push({ path: `pools.${m}`, message: `unknown model (team ${team.name} has: ${modelNames.join(', ')})` });
  if (typeof config.staleness === 'object')
    for (const m of Object.keys(config.staleness))
      if (!modelNames.includes(m)) issues.push({ path: `staleness.${m}`, message: `unknown model (team ${team.name} has: ${modelNames.join(', ')})` });
  for (const m of Object.keys(config.offPolicy?.models ?? {})) {
    if (!modelNames.includes(m)) issues.push({ path: `offPolicy.models.${m}`, message: `unknown model (team ${team.name} has: ${modelNames.join(', ')})` });
    else if (stalenessOf(config, m) === 0)
      issues.push({
        path: `offPolicy.models.${m}`,
        message: `model ${m} is synchronous (staleness 0): a correction applies only to a model with staleness > 0`,
      });
  }
  if (config.offPolicy && modelNames.every((m) => stalenessOf(config, m) === 0))
    issues.push({ path: 'offPolicy', message: 'every model is synchronous (staleness 0): a correction applies only to a model with staleness > 0' });
  for (const [i, m] of (config.frozen ?? []).entries())
    if (!modelNames.includes(m)) issues.push({ path: `frozen[${i}]`, message: `unknown model ${m} (team ${team.name} has: ${modelNames.join(', ')})` });
  const frozen = config.frozen ?? [];
  if (frozen.length > 0 && modelNames.every((m) => frozen.includes(m)))
    issues.push({ path: 'frozen', message: `every model of team ${team.name} is frozen: at least one must train` });
  for (const m of Object.keys(config.init ?? {}))
    if (!modelNames.includes(m)) issues.push({ path: `init.${m}`, message: `unknown model (team ${team.name} has: ${modelNames.join(', ')})` });
  if (config.init && config.fork) issues.push({ path: 'init', message: 'a fork starts every model from the run it forks: give init or fork, not both' });
  for (const a of Object.keys(config.optimizer.agents))
    if (!team.roles.includes(a)) issues.push({ path: `optimizer.agents.${a}`, message: `unknown agent (team ${team.name} has: ${team.roles.join(', ')})` });
  const modelLevel = (m: string) => mergeOverrides(team.models[m]?.optimizer as OptimizerOverrides, config.optimizer.all, config.optimizer.models[m]);
  const models: Record<string, OptimizerSettings> = {};
  const agents: Record<string, OptimizerSettings> = {};
  const capture = (fn: () => void) => {
    try {
      fn();
    } catch (e) {
      if (e instanceof SettingsError) issues.push(...e.issues);
      else throw e;
    }
  };
  for (const m of modelNames) capture(() => (models[m] = resolveSettings(modelLevel(m), {}, { model: `optimizer.models.${m}` })));
  for (const role of team.roles) {
    const spec = team.agents[role]!;
    const agentLevel = mergeOverrides(spec.optimizer as OptimizerOverrides, config.optimizer.agents[role]);
    const sharing = team.roles.filter((r) => team.agents[r]!.model === spec.model);
    if (sharing.length > 1) {
      for (const k of MODEL_LEVEL) {
        if (k in agentLevel)
          issues.push({
            path: `optimizer.agents.${role}.${k}`,
            message: `${role} shares model ${spec.model} with ${sharing.filter((r) => r !== role).join(', ')}; set it on the model (optimizer.models.${spec.model}) or give ${role} its own model`,
          });
      }
    }
    capture(
      () =>
        (agents[role] = resolveSettings(modelLevel(spec.model), agentLevel, { model: `optimizer.models.${spec.model}`, agent: `optimizer.agents.${role}` })),
    );
  }
  // An agent's settings are resolved on top of its model's, so a model-level problem comes back
  // once per agent of that model: one report each.
  const seen = new Set<string>();
  const unique = issues.filter((i) => !seen.has(`${i.path}\0${i.message}`) && !!seen.add(`${i.path}\0${i.message}`));
  if (unique.length > 0) throw new RunConfigError(unique);
  return { models, agents };
}

/** The pools a model samples (turns, rollouts) and trains (version 0, updates) on in this run. */
export function poolsOf(config: Pick<RunConfig, 'pools'>, team: AnyTeam, model: string): { sample: string; train: string } {
  const m = team.models[model]!;
  const sample = config.pools?.[model]?.sample ?? m.pool;
  return { sample, train: config.pools?.[model]?.train ?? (config.pools?.[model]?.sample !== undefined ? sample : (m.trainPool ?? sample)) };
}

/** The staleness k of a model (0 when not set). */
export function stalenessOf(config: Pick<RunConfig, 'staleness'>, model: string): number {
  return typeof config.staleness === 'number' ? config.staleness : (config.staleness[model] ?? 0);
}

/** What an asynchronous model's update is told about its correction (activities/training/off-policy.ts). */
export interface OffPolicySetting {
  /** The cap C. */
  importanceCap: number;
  /** Absent: decoupled-ppo. */
  correction?: CorrectionName;
  /** Absent: IcePop's [0.5, 5]. */
  band?: readonly [number, number];
  /** Absent: 'behaviour'. */
  baseline?: Baseline;
  /** Absent: 'ess'. */
  stepSize?: StepSize;
  /** Absent: 'off'. */
  momentum?: Momentum;
}

/**
 * Model m's correction: offPolicy.models[m] over offPolicy over the defaults. Only the settings
 * that differ from the defaults are set, so a run without `offPolicy` schedules its updates
 * with the same input as before corrections were selectable (its history replays unchanged).
 */
export function offPolicyOf(config: Pick<RunConfig, 'importanceCap' | 'offPolicy'>, model: string): OffPolicySetting {
  const own = config.offPolicy?.models?.[model];
  const correction = own?.correction ?? config.offPolicy?.correction;
  const band = own?.band ?? config.offPolicy?.band;
  const baseline = own?.baseline ?? config.offPolicy?.baseline;
  const stepSize = own?.stepSize ?? config.offPolicy?.stepSize;
  const momentum = own?.momentum ?? config.offPolicy?.momentum;
  return {
    importanceCap: own?.cap ?? config.offPolicy?.cap ?? config.importanceCap,
    ...(correction !== undefined && correction !== DEFAULT_CORRECTION ? { correction } : {}),
    ...(band !== undefined ? { band } : {}),
    ...(baseline !== undefined && baseline !== DEFAULT_BASELINE ? { baseline } : {}),
    ...(stepSize !== undefined && stepSize !== DEFAULT_STEP_SIZE ? { stepSize } : {}),
    ...(momentum !== undefined && momentum !== DEFAULT_MOMENTUM ? { momentum } : {}),
  };
}

/**
 * Every problem of a setOptimizer change against a run, at the paths the user sent
 * (`all.lr`, `agents.ghost`): its own fields and the models and agents it names, both
 * even when the other fails; then, when those are fine, the settings it leads to
 * (after the changes already accepted, `pending`).
 */
export function optimizerChangeIssues(raw: unknown, config: RunConfig, team: AnyTeam, pending: OptimizerChange[] = []): FieldIssue[] {
  const issues: FieldIssue[] = [];
  let change: OptimizerChange | undefined;
  try {
    change = parseOptimizerChange(raw);
  } catch (e) {
    if (!(e instanceof SettingsError)) throw e;
    issues.push(...e.issues);
  }
  const named = (raw ?? {}) as { models?: unknown; agents?: unknown };
  const keys = (v: unknown) => (typeof v === 'object' && v !== null && !Array.isArray(v) ? Object.keys(v) : []);
  const modelNames = Object.keys(team.models);
  for (const m of keys(named.models))
    if (!modelNames.includes(m)) issues.push({ path: `models.${m}`, message: `unknown model (team ${team.name} has: ${modelNames.join(', ')})` });
  for (const a of keys(named.agents))
    if (!team.roles.includes(a)) issues.push({ path: `agents.${a}`, message: `unknown agent (team ${team.name} has: ${team.roles.join(', ')})` });
  if (issues.length > 0 || !change) return issues;
  try {
    checkAgainstTeam({ ...config, optimizer: [...pending, change].reduce(applyOptimizerChange, config.optimizer) }, team);
  } catch (e) {
    if (!(e instanceof FieldError)) throw e;
    const seen = new Set<string>();
    for (const i of e.issues) {
      const issue = { path: i.path.replace(/^optimizer\./, ''), message: i.message };
      const key = `${issue.path}\u0000${issue.message}`;
      if (seen.has(key)) continue;
      seen.add(key);
      issues.push(issue);
    }
  }
  return issues;
}
