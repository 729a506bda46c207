/**
 * Optimization settings per model and per agent (Dr. MAS puts lr, clip, KL
 * coefficient and reward weights on the agent). A model's settings apply to
 * every agent that uses it; an agent may override any of them.
 *
 *   resolveSettings(modelLevel, agentLevel)  →  defaults ← model ← agent
 *
 * Merging is per field; `kl`, `estimator` and `rewardWeights` merge per key
 * (set a weight to 0 to drop a component). One exception: `normalizeStd` and
 * `gamma` belong to an estimator, so they are not inherited when the agent
 * names a different estimator than its model.
 *
 * Errors name the full path, e.g. `agents.verifier.optimizer.lr: must be > 0`;
 * unknown keys are rejected (a typo must not silently fall back to a default).
 */

import { z } from 'zod';
import {
  gammaMessage,
  gammaProblem,
  getEstimator,
  isEstimatorName,
  normalizeStdMessage,
  scopeMessage,
  unknownEstimatorMessage,
  type AdvantageSpec,
} from '../rl/advantages/registry';
import { SCOPES, type Scope } from '../rl/advantages/types';
import { DEFAULT_POLICY_LOSS_SETTINGS, KL_TYPES, type KlType, type PolicyLossSettings } from '../rl/loss-settings';
import { LOSS_AGGREGATIONS, type LossAggregation } from '../rl/tokens';
import { FieldError, issuesFromZod } from '../infra/issues';
import { lazily } from '../infra/lazily';

// ---- field validators (shared by the override and the full schema) --------

/**
 * A number the engine takes as float32. Each rule ([holds, message]) must hold
 * for the value written and for the float32 value the engine will see (1e300
 * becomes Infinity, 1e-50 becomes 0, 0.9999999999 becomes 1), so nothing passes
 * here that the engine refuses. One message per problem: the first rule broken.
 */
const engineNumber = (...rules: Array<[(x: number) => boolean, string]>) =>
  z.number().check((ctx) => {
    const v = ctx.value;
    const f = Math.fround(v);
    const fail = (message: string) => ctx.issues.push({ code: 'custom', input: v, message });
    const broken = rules.find(([holds]) => !holds(v));
    const brokenInFloat32 = rules.find(([holds]) => !holds(f));
    if (broken) fail(broken[1]);
    else if (!Number.isFinite(f)) fail(`must be at most 3.4e38 in magnitude (the engine computes in float32), got ${v}`);
    else if (brokenInFloat32) fail(`${brokenInFloat32[1]}; ${v} is ${f} in float32, which the engine computes in`);
  });
const oneOf = <T extends string>(what: string, values: readonly T[]) =>
  z.enum(values as [T, ...T[]], { error: (iss) => `unknown ${what} ${JSON.stringify(iss.input)}; known: ${values.join(', ')}` });

// Built on first use (infra/lazily.ts), as every schema below.
const fields = lazily(() => {
  const positive = engineNumber([(x) => x > 0, 'must be > 0']);
  const nonNegative = engineNumber([(x) => x >= 0, 'must be ≥ 0']);
  const fraction = engineNumber([(x) => x >= 0, 'must be ≥ 0'], [(x) => x < 1, 'must be < 1']);
  return {
    /** AdamW. lr 1e-3 suits the bundled tiny models; LLM-scale runs use ~1e-6. */
    lr: positive,
    betas: z.tuple([fraction, fraction]),
    eps: positive,
    weightDecay: nonNegative,
    /** Global grad-norm clip; null turns it off. */
    gradClipMaxNorm: positive.nullable(),
    /** PPO clip range [1 − clipLow, 1 + clipHigh]. */
    clipLow: fraction,
    clipHigh: nonNegative,
    /** Dual-clip bound c for negative advantages; null turns it off. */
    dualClip: engineNumber([(x) => x > 1, 'must be > 1']).nullable(),
    klType: oneOf<KlType>('KL type', KL_TYPES),
    klCoef: nonNegative,
    entropyCoef: engineNumber(),
    lossAggregation: oneOf<LossAggregation>('loss aggregation', LOSS_AGGREGATIONS),
    /** Token budget H for seq-mean-token-sum-norm (usually the role's maxTokens). */
    horizon: z.number().int('must be an integer').gt(0, 'must be > 0'),
    rewardWeights: z.record(z.string(), z.number()),
    // checked against the live registry: a project's defineEstimator names count too
    estimatorName: z
      .string({ error: (iss) => unknownEstimatorMessage(iss.input) })
      .refine(isEstimatorName, { error: (iss) => unknownEstimatorMessage(iss.input) }),
    scope: oneOf<Scope>('scope', SCOPES),
    normalizeStd: z.boolean(),
    /** Discount per turn of the discounted (turn-level) estimators. */
    gamma: z.number({ error: (iss) => gammaProblem(iss.input) }).refine((x) => gammaProblem(x) === undefined, { error: (iss) => gammaProblem(iss.input) }),
  };
});

/**
 * A run's defaults. The policy loss's come from rl/loss-settings.ts. AdamW's equal the
 * engine's (engines/protocol/contract.json; test/unit/engine/contract.test.ts checks
 * them) except weight decay: 0.01 for a run, 0 for an Update that leaves it out.
 */
const LOSS = DEFAULT_POLICY_LOSS_SETTINGS;
export const OPTIMIZER_DEFAULTS = {
  lr: 1e-3,
  betas: [0.9, 0.999] as [number, number],
  eps: 1e-8,
  weightDecay: 0.01,
  gradClipMaxNorm: 1.0,
  clipLow: LOSS.clipLow,
  clipHigh: LOSS.clipHigh,
  dualClip: LOSS.dualClip,
  kl: { type: LOSS.kl.type, coef: LOSS.kl.coef },
  entropyCoef: LOSS.entropyCoef,
  lossAggregation: 'token-mean' as LossAggregation,
  estimator: { name: 'grpo' as const, scope: 'group-agent' as Scope },
} as const;

// ---- one level as a user writes it: every field optional ------------------

export const optimizerOverridesSchema = lazily(() =>
  z.strictObject({
    lr: fields().lr.optional(),
    betas: fields().betas.optional(),
    eps: fields().eps.optional(),
    weightDecay: fields().weightDecay.optional(),
    gradClipMaxNorm: fields().gradClipMaxNorm.optional(),
    clipLow: fields().clipLow.optional(),
    clipHigh: fields().clipHigh.optional(),
    dualClip: fields().dualClip.optional(),
    kl: z.strictObject({ type: fields().klType.optional(), coef: fields().klCoef.optional() }).optional(),
    entropyCoef: fields().entropyCoef.optional(),
    lossAggregation: fields().lossAggregation.optional(),
    horizon: fields().horizon.optional(),
    rewardWeights: fields().rewardWeights.optional(),
    estimator: z
      .strictObject({
        name: fields().estimatorName.optional(),
        scope: fields().scope.optional(),
        normalizeStd: fields().normalizeStd.optional(),
        gamma: fields().gamma.optional(),
      })
      .optional(),
  }),
);
export type OptimizerOverrides = z.input<ReturnType<typeof optimizerOverridesSchema>>;

// ---- the optimizer part of a run config, and a change to it (setOptimizer) ---

/** Overrides for every model, per model and per agent (role); unknown keys rejected. */
export const optimizerChangeSchema = lazily(() =>
  z.strictObject({
    all: optimizerOverridesSchema().optional(),
    models: z.record(z.string(), optimizerOverridesSchema()).optional(),
    agents: z.record(z.string(), optimizerOverridesSchema()).optional(),
  }),
);
export type OptimizerChange = z.output<ReturnType<typeof optimizerChangeSchema>>;

/** As a run config holds it: models and agents always present. */
export const optimizerConfigSchema = lazily(() =>
  optimizerChangeSchema().extend({
    models: z.record(z.string(), optimizerOverridesSchema()).default({}),
    agents: z.record(z.string(), optimizerOverridesSchema()).default({}),
  }),
);
export type OptimizerConfig = z.output<ReturnType<typeof optimizerConfigSchema>>;

// ---- resolved settings: every field present --------------------------------

const D = OPTIMIZER_DEFAULTS;
export const optimizerSettingsSchema = lazily(() =>
  z
    .strictObject({
      lr: fields().lr.default(D.lr),
      betas: fields().betas.default([...D.betas]),
      eps: fields().eps.default(D.eps),
      weightDecay: fields().weightDecay.default(D.weightDecay),
      gradClipMaxNorm: fields().gradClipMaxNorm.default(D.gradClipMaxNorm),
      clipLow: fields().clipLow.default(D.clipLow),
      clipHigh: fields().clipHigh.default(D.clipHigh),
      dualClip: fields().dualClip.default(D.dualClip),
      kl: z.strictObject({ type: fields().klType.default(D.kl.type), coef: fields().klCoef.default(D.kl.coef) }).prefault({}),
      entropyCoef: fields().entropyCoef.default(D.entropyCoef),
      lossAggregation: fields().lossAggregation.default(D.lossAggregation),
      horizon: fields().horizon.optional(),
      rewardWeights: fields().rewardWeights.default({}),
      estimator: z
        .strictObject({
          name: fields().estimatorName.default(D.estimator.name),
          scope: fields().scope.default(D.estimator.scope),
          normalizeStd: fields().normalizeStd.optional(),
          gamma: fields().gamma.optional(),
        })
        .prefault({}),
    })
    .superRefine((s, ctx) => {
      const estimator = getEstimator(s.estimator.name);
      if (s.estimator.normalizeStd !== undefined && !estimator.supportsNormalizeStd)
        ctx.addIssue({
          code: 'custom',
          path: ['estimator', 'normalizeStd'],
          message: normalizeStdMessage(s.estimator.name),
        });
      if (s.estimator.gamma !== undefined && !estimator.discounted)
        ctx.addIssue({ code: 'custom', path: ['estimator', 'gamma'], message: gammaMessage(s.estimator.name) });
      if (estimator.scopes && !estimator.scopes.includes(s.estimator.scope))
        ctx.addIssue({ code: 'custom', path: ['estimator', 'scope'], message: scopeMessage(estimator, s.estimator.scope) });
    }),
);
export type OptimizerSettings = z.output<ReturnType<typeof optimizerSettingsSchema>>;

// ---- errors ----------------------------------------------------------------

/** Invalid optimizer settings, each issue named by its full path. */
export class SettingsError extends FieldError {
  override readonly name = 'SettingsError';
}

const toIssues = (error: z.ZodError, prefix: string) => issuesFromZod(error, { prefix, unknownKey: 'unknown setting' });

/**
 * A setOptimizer change, checked on its own before anything else: one issue per
 * problem, at the path the user sent (`models.policy.lr`, `(change)` for the whole).
 */
export function parseOptimizerChange(input: unknown): OptimizerChange {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    throw new SettingsError([{ path: '(change)', message: `must be a JSON object like {"all": {"lr": 0.01}}, got ${JSON.stringify(input) ?? String(input)}` }]);
  const r = optimizerChangeSchema().safeParse(input);
  if (!r.success) {
    const issues = issuesFromZod(r.error, { unknownKey: 'unknown setting', root: '(change)' });
    throw new SettingsError(
      issues.map((i) => (i.path.includes('.') || i.message !== 'unknown setting' ? i : { ...i, message: 'unknown field (a change has all, models, agents)' })),
    );
  }
  return r.data;
}

// ---- merge -------------------------------------------------------------------

/**
 * The one merge rule of optimizer levels: later levels win per field; `kl`,
 * `estimator` and `rewardWeights` merge per key.
 */
export function mergeOverrides(...levels: Array<OptimizerOverrides | undefined>): OptimizerOverrides {
  const out: Record<string, unknown> = {};
  for (const l of levels) {
    if (!l) continue;
    for (const [k, v] of Object.entries(l)) {
      out[k] = (k === 'kl' || k === 'estimator' || k === 'rewardWeights') && typeof v === 'object' && v !== null ? { ...(out[k] as object), ...v } : v;
    }
  }
  return out as OptimizerOverrides;
}

/** A run's optimizer config with a change applied (each level merged by mergeOverrides). */
export function applyOptimizerChange(base: OptimizerConfig, change: OptimizerChange): OptimizerConfig {
  const merged = (a: Record<string, OptimizerOverrides>, b: Record<string, OptimizerOverrides> = {}) => {
    const out = { ...a };
    for (const [k, o] of Object.entries(b)) out[k] = mergeOverrides(out[k], o);
    return out;
  };
  const all = change.all ? mergeOverrides(base.all, change.all) : base.all;
  return { ...(all ? { all } : {}), models: merged(base.models, change.models), agents: merged(base.agents, change.agents) };
}

export interface SettingsPaths {
  /** Where the model-level settings live, for error messages. */
  model?: string;
  /** Where the agent-level settings live, for error messages. */
  agent?: string;
}

/** Validates one level alone (e.g. when a team is defined). */
export function parseOverrides(level: unknown, path = 'optimizer'): OptimizerOverrides {
  const r = optimizerOverridesSchema().safeParse(level ?? {});
  if (!r.success) throw new SettingsError(toIssues(r.error, path));
  return r.data;
}

/** Agent overrides model overrides defaults; returns complete, validated settings. */
export function resolveSettings(modelLevel: unknown, agentLevel: unknown, paths: SettingsPaths = {}): OptimizerSettings {
  const modelPath = paths.model ?? 'model.optimizer';
  const agentPath = paths.agent ?? 'agent.optimizer';
  const m = optimizerOverridesSchema().safeParse(modelLevel ?? {});
  const a = optimizerOverridesSchema().safeParse(agentLevel ?? {});
  const issues = [...(m.success ? [] : toIssues(m.error, modelPath)), ...(a.success ? [] : toIssues(a.error, agentPath))];
  if (!m.success || !a.success) throw new SettingsError(issues);

  const model = m.data;
  const agent = a.data;
  const switched = agent.estimator?.name !== undefined && agent.estimator.name !== (model.estimator?.name ?? D.estimator.name);
  const modelEstimator = { ...model.estimator };
  if (switched) {
    delete modelEstimator.normalizeStd;
    delete modelEstimator.gamma;
  }
  const merged = {
    ...model,
    ...agent,
    kl: { ...model.kl, ...agent.kl },
    rewardWeights: { ...model.rewardWeights, ...agent.rewardWeights },
    estimator: { ...modelEstimator, ...agent.estimator },
  };
  const r = optimizerSettingsSchema().safeParse(merged);
  if (!r.success) {
    // Only cross-field checks can fail here; blame the level that chose the estimator.
    const blame = agent.estimator !== undefined ? agentPath : modelPath;
    throw new SettingsError(toIssues(r.error, blame));
  }
  return r.data;
}

// ---- what the RL core takes ---------------------------------------------------

export function toAdvantageSpec(s: OptimizerSettings): AdvantageSpec {
  return {
    estimator: s.estimator.name,
    options: {
      weights: s.rewardWeights,
      scope: s.estimator.scope,
      ...(s.estimator.normalizeStd === undefined ? {} : { normalizeStd: s.estimator.normalizeStd }),
      ...(s.estimator.gamma === undefined ? {} : { gamma: s.estimator.gamma }),
    },
  };
}

export function toPolicyLossSettings(s: OptimizerSettings): PolicyLossSettings {
  return {
    clipLow: s.clipLow,
    clipHigh: s.clipHigh,
    dualClip: s.dualClip,
    kl: { type: s.kl.type, coef: s.kl.coef },
    entropyCoef: s.entropyCoef,
  };
}
