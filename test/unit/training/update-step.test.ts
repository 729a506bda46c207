/** One RL step's update as pure functions (activities/training/update-step.ts): hand-written requests and rows. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { StepBatch, UpdateSequence } from '../../../activities/training/batch';
import {
  REDUCED_LR,
  agentRows,
  agentsOfModel,
  needsReference,
  scoreRequest,
  skipReason,
  updateMetrics,
  updateRequest,
  updateRows,
  updateSamples,
} from '../../../activities/training/update-step';
import type { UpdateMetrics } from '../../../engines/protocol/types';
import { resolveSettings } from '../../../schema/optimizer';

const seq = (agent: string, weights: number[]): UpdateSequence => ({
  agent,
  version: 2,
  context: [1, 2],
  tokens: [7, 8],
  mask: [1, 0],
  advantages: [0.5, 0],
  oldLogprobs: [-1, -2],
  weights,
});
const diag = (agentId: string, mean: number) => ({
  agentId,
  samples: 2,
  trainedSamples: 2,
  advantage: { mean, std: 1, min: -1, max: 1 },
  groups: 1,
  zeroAdvantageGroupFraction: 0.5,
  advantageByPosition: [mean, -mean],
  stepGroupShare: agentId === 'solver' ? 0.75 : null,
  clipFraction: null,
  approxKl: null,
  entropy: null,
});

describe('skipReason', () => {
  it('skips a model whose sequences give no token a weight, also when it has none', () => {
    assert.equal(skipReason([seq('solver', [0, 0]), seq('verifier', [0, 0])]), 'no trainable tokens');
    assert.equal(skipReason([]), 'no trainable tokens');
    assert.equal(skipReason([seq('solver', [0, 0]), seq('verifier', [0.25, 0])]), undefined);
  });
});

describe('the Score and Update requests', () => {
  const settings = resolveSettings({ lr: 0.5, betas: [0.8, 0.9], gradClipMaxNorm: null, kl: { type: 'k1', coef: 0.1 } }, {});

  it('scores the reference only when the KL term is on', () => {
    assert.equal(needsReference(settings), true);
    assert.equal(needsReference(resolveSettings({ kl: { type: 'k1', coef: 0 } }, {})), false);
    assert.equal(needsReference(resolveSettings({ kl: { coef: 0.1 } }, {})), false, 'type none (the default)');
  });

  it("asks the engine to score the sequences' context and tokens", () => {
    assert.deepEqual(scoreRequest('r/policy', 0, [seq('solver', [1, 0])]), {
      modelKey: 'r/policy',
      version: 0,
      sequences: [{ context: [1, 2], tokens: [7, 8] }],
    });
  });

  it("sends the sequences as samples, with each one's reference log-probs when scored", () => {
    const q = [seq('solver', [0.5, 0]), seq('verifier', [0.25, 0])];
    const plain = { context: [1, 2], tokens: [7, 8], lossMask: [1, 0], advantages: [0.5, 0], oldLogprobs: [-1, -2] };
    assert.deepEqual(updateSamples(q), [
      { ...plain, lossWeights: [0.5, 0] },
      { ...plain, lossWeights: [0.25, 0] },
    ]);
    assert.deepEqual(
      updateSamples(q, [
        [-3, -4],
        [-5, -6],
      ]).map((s) => s.refLogprobs),
      [
        [-3, -4],
        [-5, -6],
      ],
    );
  });

  it("names run, model, step and attempt in the request id, with the settings in the engine's terms", () => {
    const samples = updateSamples([seq('solver', [1, 0])]);
    const engine = {
      lr: 0.5,
      beta1: 0.8,
      beta2: 0.9,
      eps: 1e-8,
      weightDecay: 0.01,
      maxGradNorm: 0,
      clipLow: 0.2,
      clipHigh: 0.2,
      dualClip: 3,
      klCoef: 0.1,
      klType: 'k1',
      entropyCoef: 0,
      innerSteps: 1,
    };
    const at = { runId: 'r', model: 'policy', step: 4, baseVersion: 3 };
    assert.deepEqual(updateRequest(at, samples, settings), {
      modelKey: 'r/policy',
      baseVersion: 3,
      requestId: 'r/policy/step4',
      allowStaleBase: true,
      samples,
      settings: engine,
    });
    const retry = updateRequest(at, samples, settings, REDUCED_LR);
    assert.equal(retry.requestId, 'r/policy/step4/lr0.1');
    assert.equal(retry.settings!.lr, 0.05);
    // without KL the engine gets coefficient 0 and no type
    const noKl = updateRequest(at, samples, resolveSettings({}, {})).settings!;
    assert.equal(noKl.klCoef, 0);
    assert.equal('klType' in noKl, false);
  });
});

describe('the metrics of an update', () => {
  const engineMetrics: UpdateMetrics = {
    loss: 1,
    pgLoss: 0.75,
    klLoss: 0.25,
    entropySum: 9,
    gradNorm: 2,
    clipFraction: 0.125,
    dualClipFraction: 0,
    approxKl: 0.01,
    entropy: 1.5,
  };
  const res = { metrics: engineMetrics, tokens: 12, samples: 4, durationMs: 30, logprobGap: { mean: 0.001, max: 0.002 } };
  const off = {
    staleness: 1,
    'isWeight.mean': 0.9,
    'isWeight.max': 1.2,
    'isWeight.truncated': 0,
    'isWeight.masked': 0.5,
    mismatch_kl: 0.003,
    baselineShift: 0,
    'isWeight.ess': 0.8,
    'staleness.tokens.1': 6,
  };

  it("keeps the engine's loss terms, sizes, time and logprob gap, and the off-policy correction when there is one", () => {
    const base = {
      loss: 1,
      pgLoss: 0.75,
      klLoss: 0.25,
      gradNorm: 2,
      clipFraction: 0.125,
      approxKl: 0.01,
      entropy: 1.5,
      tokens: 12,
      samples: 4,
      updateMs: 30,
      logprobGapMean: 0.001,
      logprobGapMax: 0.002,
    };
    assert.deepEqual(updateMetrics(res), base);
    assert.deepEqual(updateMetrics(res, off), { ...base, ...off });
  });

  // solver trained on policy; verifier (policy) acted only in a failed episode; critic is on another model.
  const team = { roles: ['verifier', 'solver', 'critic'], agents: { solver: { model: 'policy' }, verifier: { model: 'policy' }, critic: { model: 'judge' } } };
  const batch = {
    diagnostics: { solver: diag('solver', 0.25), critic: diag('critic', 0) },
    endings: { solver: { episodes: 2, truncatedShare: 0.5, failedShare: 0 }, verifier: { episodes: 1, truncatedShare: 0, failedShare: 1 } },
    lengths: { solver: { turns: 1, tokens: 3 } },
    rewards: { solver: { correct: 0.5 } },
    scores: { solver: { mean: 0.5, std: 0.7 } },
    entropy: {},
  } as unknown as StepBatch;

  it("finds the model's roles in team order: trained ones, and all that acted", () => {
    assert.deepEqual(agentsOfModel(team, 'policy', batch), { trained: ['solver'], acted: ['verifier', 'solver'] });
    assert.deepEqual(agentsOfModel(team, 'judge', batch), { trained: ['critic'], acted: ['critic'] });
  });

  it('gives rewards, endings and lengths of agents without an update', () => {
    assert.deepEqual(agentRows(batch, ['verifier', 'solver']), [
      { kind: 'train', scope: 'verifier', name: 'truncatedShare', value: 0 },
      { kind: 'train', scope: 'verifier', name: 'failedShare', value: 1 },
      { kind: 'train', scope: 'solver', name: 'reward.correct', value: 0.5 },
      { kind: 'train', scope: 'solver', name: 'truncatedShare', value: 0.5 },
      { kind: 'train', scope: 'solver', name: 'failedShare', value: 0 },
      { kind: 'train', scope: 'solver', name: 'episodeTurns', value: 1 },
      { kind: 'train', scope: 'solver', name: 'episodeTokens', value: 3 },
    ]);
  });

  it('writes the update per model, the rollout per team, and per trained agent its advantages, scores, loss terms, entropy and correction', () => {
    const metrics = updateMetrics(res, off);
    const rows = updateRows(
      'policy',
      metrics,
      { seconds: 7, episodes: 8, failed: 1 },
      batch,
      { trained: ['solver'], acted: ['verifier', 'solver'] },
      { solver: off },
    );
    const t = (scope: string, name: string, value: number) => ({ kind: 'train', scope, name, value });
    assert.deepEqual(rows, [
      ...Object.entries(metrics).map(([name, value]) => ({ kind: 'update', scope: 'policy', name, value })),
      t('team', 'rolloutSeconds', 7),
      t('team', 'episodes', 8),
      t('team', 'failedEpisodes', 1),
      t('solver', 'advantage.mean', 0.25),
      t('solver', 'advantage.std', 1),
      t('solver', 'advantage.min', -1),
      t('solver', 'advantage.max', 1),
      t('solver', 'score.mean', 0.5),
      t('solver', 'score.std', 0.7),
      t('solver', 'zeroAdvantageGroupFraction', 0.5),
      t('solver', 'samples', 2),
      t('solver', 'advantage.position.0', 0.25),
      t('solver', 'advantage.position.1', -0.25),
      t('solver', 'stepGroupShare', 0.75),
      t('solver', 'loss', 1),
      t('solver', 'gradNorm', 2),
      t('solver', 'clipFraction', 0.125),
      t('solver', 'approxKl', 0.01),
      t('solver', 'entropy', NaN), // no sampled token of its own: NaN, left out when committed
      t('solver', 'staleness', 1),
      t('solver', 'isWeight.mean', 0.9),
      t('solver', 'isWeight.max', 1.2),
      t('solver', 'isWeight.truncated', 0),
      t('solver', 'isWeight.masked', 0.5),
      t('solver', 'mismatch_kl', 0.003),
      t('solver', 'baselineShift', 0),
      t('solver', 'isWeight.ess', 0.8),
      t('solver', 'staleness.tokens.1', 6),
      ...agentRows(batch, ['verifier', 'solver']),
    ]);
    assert.equal(rows.filter((r) => r.kind === 'update').length, 21, '12 engine metrics and 9 of the correction');
  });
});
