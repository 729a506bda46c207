/**
 * The advantage-estimator registry. Callers use `computeAdvantages` (one
 * estimator for the whole batch) or `computeAdvantagesByAgent` (one per
 * role); both validate input, resolve options and dispatch by name. No
 * estimator is special-cased here or at any call site: everything an
 * estimator needs (scope, pivots, whitening) happens inside it, and what a
 * caller must know about it is a capability it declares (types.ts), read
 * through the registry (`estimatorsWith`, `getEstimator(name).perComponent`).
 *
 * Built-in estimators are a fixed table; a project adds its own with
 * `defineEstimator`, in a module its troupe.config.ts lists under `estimators`:
 * every process (CLI, workers, the workflow sandbox) loads those modules at
 * start, before any config is validated, so a name is checked the same way
 * wherever a config is.
 */

import { IssueList, describe } from '../errors';
import { validateSamples, validateWeights, type Sample } from '../samples';
import { atGrpoEstimator } from './at-grpo';
import { gdpoEstimator } from './gdpo';
import { gigpoEstimator } from './gigpo';
import { grpoEstimator } from './grpo';
import { hgpoEstimator } from './hgpo';
import { mcGrpoEstimator } from './mc-grpo';
import { reinforcePlusPlusBaselineEstimator } from './reinforce-plus-plus-baseline';
import { rlooEstimator } from './rloo';
import { saltEstimator } from './salt';
import { turnReturnEstimator } from './turn-return';
import {
  DEFAULT_GAMMA,
  SCOPES,
  type Scope,
  type AdvantageDiagnostics,
  type AdvantageEstimator,
  type AdvantageOptions,
  type AdvantageResult,
  type ResolvedAdvantageOptions,
} from './types';

/** The registry: a new estimator is its own file plus one line here. */
export const ESTIMATORS = {
  grpo: grpoEstimator,
  'mc-grpo': mcGrpoEstimator,
  gdpo: gdpoEstimator,
  rloo: rlooEstimator,
  'reinforce++-baseline': reinforcePlusPlusBaselineEstimator,
  'turn-return': turnReturnEstimator,
  gigpo: gigpoEstimator,
  'at-grpo': atGrpoEstimator,
  salt: saltEstimator,
  hgpo: hgpoEstimator,
} as const satisfies Readonly<Record<string, AdvantageEstimator>>;
export type EstimatorName = keyof typeof ESTIMATORS;
/** The built-in names; `estimatorNames()` adds the project's. */
export const ESTIMATOR_NAMES = Object.keys(ESTIMATORS) as [EstimatorName, ...EstimatorName[]];

/** Estimators a project defined (defineEstimator), by name. */
const custom = new Map<string, AdvantageEstimator>();

/**
 * Registers a project's advantage estimator under `name`, validated like the built-in ones
 * (run configs name it, `--estimator` accepts it). Call it at the top level of a module listed
 * under `estimators` in troupe.config.ts. Defining the same name again replaces it (a module
 * loaded twice); a built-in name is refused.
 */
export function defineEstimator(estimator: AdvantageEstimator): AdvantageEstimator {
  const issues = new IssueList();
  const e = estimator as Partial<AdvantageEstimator> | null;
  if (typeof e !== 'object' || e === null) issues.add('estimator', `must be an object, got ${describe(e)}`);
  else {
    if (typeof e.name !== 'string' || !/^[a-z0-9][a-z0-9+._-]*$/.test(e.name))
      issues.add('estimator.name', `must be lower-case letters, digits, + . _ -, got ${describe(e.name)}`);
    else if (Object.prototype.hasOwnProperty.call(ESTIMATORS, e.name)) issues.add('estimator.name', `${JSON.stringify(e.name)} is a built-in estimator`);
    if (typeof e.summary !== 'string') issues.add('estimator.summary', `must be a string, got ${describe(e.summary)}`);
    for (const flag of ['supportsNormalizeStd', 'perComponent'] as const)
      if (typeof e[flag] !== 'boolean') issues.add(`estimator.${flag}`, `must be a boolean, got ${describe(e[flag])}`);
    if (e.discounted !== undefined && typeof e.discounted !== 'boolean') issues.add('estimator.discounted', `must be a boolean, got ${describe(e.discounted)}`);
    if (e.scopes !== undefined && !(Array.isArray(e.scopes) && e.scopes.length > 0 && e.scopes.every((x) => SCOPES.includes(x))))
      issues.add('estimator.scopes', `must be a non-empty list of ${SCOPES.join(', ')}, got ${describe(e.scopes)}`);
    if (typeof e.estimate !== 'function') issues.add('estimator.estimate', `must be a function, got ${describe(e.estimate)}`);
  }
  issues.throwIfAny();
  custom.set(estimator.name, estimator);
  return estimator;
}

/** Every estimator name, built-in first, then the project's in definition order. */
export function estimatorNames(): string[] {
  return [...ESTIMATOR_NAMES, ...custom.keys()];
}

/** A yes/no property an estimator declares (e.g. `supportsNormalizeStd`). */
export type EstimatorCapability = {
  [K in keyof AdvantageEstimator]-?: NonNullable<AdvantageEstimator[K]> extends boolean ? K : never;
}[keyof AdvantageEstimator];

/** The estimators that declare `capability`, in registry order: for help texts and messages. */
export function estimatorsWith(capability: EstimatorCapability): string[] {
  return estimatorNames().filter((name) => getEstimator(name)[capability]);
}

export function isEstimatorName(name: unknown): name is string {
  return typeof name === 'string' && (Object.prototype.hasOwnProperty.call(ESTIMATORS, name) || custom.has(name));
}

export function unknownEstimatorMessage(name: unknown): string {
  return `unknown estimator ${describe(name)}; known: ${estimatorNames().join(', ')}`;
}

/** Why `normalizeStd` is refused for an estimator that does not support it. */
export function normalizeStdMessage(name: string): string {
  const names = estimatorsWith('supportsNormalizeStd');
  const list = names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names.at(-1)}` : names.join('');
  return `is not an option of ${name} (only ${list})`;
}

/** Why `gamma` is refused for an estimator that does not discount. */
export function gammaMessage(name: string): string {
  const names = estimatorsWith('discounted');
  const list = names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names.at(-1)}` : names.join('');
  return `is not an option of ${name} (only ${list})`;
}

/** What a `gamma` must be; undefined when `value` is one. */
export function gammaProblem(value: unknown): string | undefined {
  return typeof value === 'number' && value >= 0 && value <= 1 ? undefined : `must be a number from 0 to 1, got ${describe(value)}`;
}

/** Why a scope is refused for an estimator that makes its own sets. */
export function scopeMessage(estimator: AdvantageEstimator, scope: Scope): string {
  return `${JSON.stringify(scope)} is not a scope of ${estimator.name} (it accepts ${estimator.scopes!.join(', ')})`;
}

/** The estimator registered under `name`; throws listing the known names. */
export function getEstimator(name: string, path = 'estimator'): AdvantageEstimator {
  if (!isEstimatorName(name)) {
    const issues = new IssueList();
    issues.add(path, unknownEstimatorMessage(name));
    issues.throwIfAny();
  }
  return Object.prototype.hasOwnProperty.call(ESTIMATORS, name) ? ESTIMATORS[name as EstimatorName] : custom.get(name)!;
}

/** An estimator by name plus its options: what a role's config resolves to. */
export interface AdvantageSpec {
  estimator: string;
  options?: AdvantageOptions;
}

/** Checks options against the chosen estimator and fills defaults. */
export function resolveOptions(estimator: AdvantageEstimator, options: AdvantageOptions | undefined, path = 'options'): ResolvedAdvantageOptions {
  const o = (options ?? {}) as Record<string, unknown>;
  const weights = validateWeights(o.weights, `${path}.weights`);
  const issues = new IssueList();
  const scope = o.scope ?? 'group-agent';
  if (!SCOPES.includes(scope as never)) issues.add(`${path}.scope`, `must be one of ${SCOPES.join(', ')}, got ${describe(scope)}`);
  else if (estimator.scopes && !estimator.scopes.includes(scope as never)) issues.add(`${path}.scope`, scopeMessage(estimator, scope as Scope));
  if (o.normalizeStd !== undefined) {
    if (typeof o.normalizeStd !== 'boolean') issues.add(`${path}.normalizeStd`, `must be a boolean, got ${describe(o.normalizeStd)}`);
    else if (!estimator.supportsNormalizeStd) issues.add(`${path}.normalizeStd`, normalizeStdMessage(estimator.name));
  }
  if (o.gamma !== undefined) {
    const problem = gammaProblem(o.gamma);
    if (problem) issues.add(`${path}.gamma`, problem);
    else if (!estimator.discounted) issues.add(`${path}.gamma`, gammaMessage(estimator.name));
  }
  for (const key of Object.keys(o))
    if (!['weights', 'scope', 'normalizeStd', 'gamma'].includes(key))
      issues.add(`${path}.${key}`, 'unknown option (known: weights, scope, normalizeStd, gamma)');
  issues.throwIfAny();
  return {
    weights,
    scope: scope as ResolvedAdvantageOptions['scope'],
    normalizeStd: o.normalizeStd !== false,
    gamma: (o.gamma as number | undefined) ?? DEFAULT_GAMMA,
  };
}

/** Advantages for a whole batch with one estimator. */
export function computeAdvantages(samples: readonly unknown[], spec: AdvantageSpec): AdvantageResult {
  const estimator = getEstimator(spec.estimator);
  const options = resolveOptions(estimator, spec.options);
  const valid = validateSamples(samples);
  return estimator.estimate(valid, options);
}

export interface AgentAdvantageResult {
  advantages: Float64Array;
  excluded: boolean[];
  /** As AdvantageResult's; set when some agent's estimator reports it (false for the others' samples). */
  sharedStep?: boolean[];
  /** One entry per agent present in the samples. */
  diagnostics: Record<string, AdvantageDiagnostics>;
}

/**
 * Advantages with a per-role estimator choice: the samples of each agent are
 * passed, in their original relative order, to that agent's estimator through
 * the registry, and the results are put back in input order.
 *
 * Each role's call is its own "batch": GDPO's batch renormalization and
 * REINFORCE++'s token whitening run over that role's samples only, and the
 * `group` scope averages only that role's turns of an episode.
 */
export function computeAdvantagesByAgent(samples: readonly unknown[], specs: Readonly<Record<string, AdvantageSpec>>): AgentAdvantageResult {
  const resolved = new Map<string, { estimator: AdvantageEstimator; options: ResolvedAdvantageOptions }>();
  for (const [agentId, spec] of Object.entries(specs)) {
    const estimator = getEstimator(spec.estimator, `byAgent.${agentId}.estimator`);
    resolved.set(agentId, { estimator, options: resolveOptions(estimator, spec.options, `byAgent.${agentId}.options`) });
  }
  const valid = validateSamples(samples);

  const indicesOf = new Map<string, number[]>();
  const issues = new IssueList();
  valid.forEach((s, i) => {
    if (!resolved.has(s.agentId)) {
      if (!indicesOf.has(s.agentId))
        issues.add(
          `samples[${i}].agentId`,
          `no estimator configured for agent ${JSON.stringify(s.agentId)} (configured: ${[...resolved.keys()].join(', ') || 'none'})`,
        );
    }
    let list = indicesOf.get(s.agentId);
    if (list === undefined) indicesOf.set(s.agentId, (list = []));
    list.push(i);
  });
  issues.throwIfAny();

  const advantages = new Float64Array(valid.length);
  const excluded: boolean[] = new Array<boolean>(valid.length).fill(false);
  const diagnostics: Record<string, AdvantageDiagnostics> = {};
  let sharedStep: boolean[] | undefined;
  for (const [agentId, indices] of indicesOf) {
    const { estimator, options } = resolved.get(agentId)!;
    const subset: Sample[] = indices.map((i) => valid[i]!);
    const result = estimator.estimate(subset, options);
    indices.forEach((i, k) => {
      advantages[i] = result.advantages[k]!;
      excluded[i] = result.excluded[k]!;
    });
    if (result.sharedStep) {
      sharedStep ??= new Array<boolean>(valid.length).fill(false);
      indices.forEach((i, k) => (sharedStep![i] = result.sharedStep![k]!));
    }
    diagnostics[agentId] = result.diagnostics;
  }
  return { advantages, excluded, diagnostics, ...(sharedStep ? { sharedStep } : {}) };
}
