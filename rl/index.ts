/** Public API of the RL core: samples → advantages → per-token weights → loss. */

export { RlInputError, type InputIssue } from './errors';
export { validateSamples, scoreOf, episodeScoreOf, turnScoreOf, componentNames, type Sample, type RewardWeights } from './samples';
export { agentParents, type GraphTurn } from './turn-graph';
export {
  ESTIMATOR_NAMES,
  ESTIMATORS,
  isEstimatorName,
  defineEstimator,
  estimatorNames,
  getEstimator,
  resolveOptions,
  computeAdvantages,
  computeAdvantagesByAgent,
  type EstimatorName,
  type AdvantageSpec,
  type AgentAdvantageResult,
} from './advantages/registry';
export {
  SCOPES,
  type Scope,
  type AdvantageOptions,
  type ResolvedAdvantageOptions,
  type AdvantageResult,
  type AdvantageDiagnostics,
  type AdvantageEstimator,
} from './advantages/types';
export {
  LOSS_AGGREGATIONS,
  broadcastAdvantages,
  aggregationWeights,
  countTrainable,
  validateMasks,
  flatten,
  type LossAggregation,
  type LossMask,
  type AggregationOptions,
  type AggregationWeights,
} from './tokens';
export { KL_TYPES, DEFAULT_POLICY_LOSS_SETTINGS, type KlType, type PolicyLossSettings } from './loss-settings';
export { policyLoss, resolveLossSettings, type PolicyLossInput, type PolicyLossOutput, type PolicyLossDiagnostics } from './loss-reference';
export {
  CORRECTIONS,
  CORRECTION_NAMES,
  DEFAULT_BAND,
  DEFAULT_CORRECTION,
  correctionSettingIssues,
  importanceWeights,
  type CorrectionName,
  type ImportanceWeights,
} from './corrections/registry';
export type { Correction, CorrectionSettings, CorrectionWeights } from './corrections/types';
export { BASELINES, DEFAULT_BASELINE, proximalBaselineShifts, type Baseline, type BaselineSample } from './corrections/proximal-baseline';
export { DEFAULT_STEP_SIZE, STEP_SIZES, effectiveSampleShare, type StepSize } from './corrections/step-size';
export { DEFAULT_MOMENTUM, MOMENTA, staleBetas, type Momentum } from './corrections/momentum';
export { stepDiagnostics, mergeLossDiagnostics, type AgentStepDiagnostics, type AdvantageSummary } from './diagnostics';
