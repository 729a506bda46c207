/**
 * The package root: `import { defineTeam, agent, defineTool, ... } from 'troupe'`.
 * Everything here is workflow-safe (teams are bundled into the workflow sandbox and
 * import this module there): no Node APIs, no client. Programs that drive runs
 * import `troupe/client`.
 */
export * from './agents';
export { defineConfig, type ProjectConfig, type ProjectConfigInput } from './schema/project';
export {
  defineEstimator,
  estimatorNames,
  scoreOf,
  type AdvantageEstimator,
  type AdvantageResult,
  type AdvantageDiagnostics,
  type ResolvedAdvantageOptions,
  type Sample,
  type Scope,
} from './rl';
// for writing an estimator: the scope's statistics sets and scores, and the result with its diagnostics
export { scopeSamples, toResult, type ScopedSamples } from './rl/advantages/scope';
export { mean, unbiasedStd } from './rl/advantages/stats';
