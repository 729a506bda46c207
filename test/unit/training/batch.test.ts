import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { agentEndings, buildStepBatch } from '../../../activities/training/batch';
import type { StoredEpisode } from '../../../activities/store/trajectories';
import { mathTeam } from '../../../agents/teams/math';
import { checkAgainstTeam, parseRunConfig } from '../../../schema/run-config';

/** An episode of the math team with the given rewards (solver one turn, verifier one turn). */
function episode(group: number, idx: number, solver: number, verifier: number, status: 'completed' | 'failed' = 'completed'): StoredEpisode {
  const turn = (index: number, agent: string) => ({
    index,
    agent,
    model: 'policy',
    version: 0,
    parents: index === 0 ? [] : [0],
    contextTokens: [1, 5, 6],
    // two sampled tokens around one tool-output token
    responseTokens: [14, 3, 2],
    logprobs: [-1, 0, -2],
    lossMask: [1, 0, 1] as Array<0 | 1>,
    stopReason: 'eos' as const,
    toolCalls: [],
    durationMs: 1,
  });
  return {
    meta: { episodeId: `e${group}.${idx}`, runId: 'r', step: 0, split: 'train', taskId: `t${group}`, task: {}, groupIndex: group, episodeIndex: idx, seed: 1, mode: 'batched' },
    trajectory: { episodeId: `e${group}.${idx}`, status, turns: status === 'failed' ? [] : [turn(0, 'solver'), turn(1, 'verifier')] },
    rewards: status === 'failed' ? [] : [
      { turn: 0, agent: 'solver', components: { correct: solver } },
      { turn: 1, agent: 'verifier', components: { judged: verifier } },
    ],
    success: null,
  };
}

describe('buildStepBatch', () => {
  const settings = checkAgainstTeam(parseRunConfig({ team: 'math' }), mathTeam());

  it('computes per-agent GRPO advantages, broadcasts them over mask-1 tokens with token-mean weights, and leaves failed episodes out', () => {
    // Group 0: solver rewards [1, 0], verifier [10, 0]. Group 1: one failed episode and one [0 | 10].
    const batch = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0), episode(1, 0, 0, 10), episode(1, 1, 0, 0, 'failed')], settings);
    assert.deepEqual(batch.counts, { episodes: 4, completed: 3, truncated: 0, failed: 1, samples: 6, excluded: 0 });
    // Group 0 per agent: solver [1, 0] -> mean 0.5, unbiased std sqrt(0.5); A = ±0.5/(0.70711 + 1e-6).
    // Verifier [10, 0] -> mean 5, std sqrt(50); A = ±5/(7.0711 + 1e-6): the same up to the epsilon, since each
    // agent's set is normalised on its own. Group 1 has one usable episode: singletons get mean 0, std 1, A = s/(1 + 1e-6).
    const seqs = batch.models.policy!;
    assert.equal(seqs.length, 6);
    const a = 0.5 / (Math.sqrt(0.5) + 1e-6);
    const av = 5 / (Math.sqrt(50) + 1e-6);
    const adv = seqs.map((s) => s.advantages);
    assert.ok(Math.abs(adv[0]![0]! - a) < 1e-12);
    assert.equal(adv[0]![1], 0); // tool-output token: mask 0
    assert.ok(Math.abs(adv[1]![2]! - av) < 1e-12); // verifier of the first episode
    assert.ok(Math.abs(adv[2]![0]! + a) < 1e-12);
    assert.deepEqual(adv[4], [0, 0, 0]);
    assert.ok(Math.abs(adv[5]![0]! - 10 / (1 + 1e-6)) < 1e-12);
    // token-mean: 6 sequences x 2 trained tokens = 12 tokens, weight 1/12 on each.
    for (const s of seqs) assert.deepEqual(s.weights, [1 / 12, 0, 1 / 12]);
    assert.deepEqual(batch.rewards, { solver: { correct: 1 / 3 }, verifier: { judged: 20 / 3 } });
    assert.equal(batch.diagnostics.solver!.zeroAdvantageGroupFraction, 0.5);
  });

  it("scope 'group' is the global baseline: every turn gets its episode's average over all roles", () => {
    const global = checkAgainstTeam(parseRunConfig({ team: 'math', optimizer: { all: { estimator: { scope: 'group' } } } }), mathTeam());
    // Episode averages: e0.0 (1 + 10)/2 = 5.5, e0.1 0. Four samples [5.5, 5.5, 0, 0]: mean 2.75,
    // unbiased std sqrt(4 * 2.75^2 / 3) = 3.17543; A = ±2.75 / (3.17543 + 1e-6) = ±0.866025 for both roles.
    const batch = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0)], global);
    const a = 2.75 / (Math.sqrt((4 * 2.75 ** 2) / 3) + 1e-6);
    const first = batch.models.policy!.map((s) => s.advantages[0]!);
    assert.ok(Math.abs(first[0]! - a) < 1e-12 && Math.abs(first[1]! - a) < 1e-12, `solver and verifier of e0.0: ${first}`);
    assert.ok(Math.abs(first[2]! + a) < 1e-12 && Math.abs(first[3]! + a) < 1e-12);
    // Per-agent normalisation gives each role ±0.7071 instead.
    const perAgent = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0)], settings);
    assert.ok(Math.abs(perAgent.models.policy![0]!.advantages[0]! - 0.5 / (Math.sqrt(0.5) + 1e-6)) < 1e-12);
  });

  it('applies each role\'s reward weights before a shared estimator', () => {
    const weighted = checkAgainstTeam(parseRunConfig({ team: 'math', optimizer: { all: { estimator: { scope: 'group' } }, agents: { verifier: { rewardWeights: { judged: 0.1 } } } } }), mathTeam());
    // e0.0: solver 1, verifier 10 * 0.1 = 1 -> episode average 1; e0.1: 0. Same shape as above with 1 for 5.5.
    const batch = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0)], weighted);
    const a = 0.5 / (Math.sqrt((4 * 0.5 ** 2) / 3) + 1e-6);
    assert.ok(Math.abs(batch.models.policy![1]!.advantages[0]! - a) < 1e-12);
    assert.deepEqual(batch.rewards.verifier, { judged: 5 }, 'logged rewards stay unweighted');
  });
});

describe('agentEndings', () => {
  const settings = checkAgainstTeam(parseRunConfig({ team: 'math' }), mathTeam());
  const ended = (e: StoredEpisode, status: 'truncated' | 'failed', turns = e.trajectory.turns) => ({ ...e, trajectory: { ...e.trajectory, status, turns } });

  it('gives each agent the shares of its episodes that ended truncated or failed, counted in the batch', () => {
    const base = episode(0, 0, 1, 10);
    const solverOnly = [base.trajectory.turns[0]!];
    const episodes = [
      episode(0, 0, 1, 10),
      ended(episode(0, 1, 0, 0), 'truncated', solverOnly), // the solver hit a limit: the verifier never acted
      ended(episode(0, 2, 0, 0), 'truncated'),
      { ...ended(episode(0, 3, 0, 0), 'failed'), rewards: [] }, // reward threw after both acted
    ];
    // Solver acted in 4 episodes: 2 truncated, 1 failed. Verifier in 3: 1 truncated, 1 failed.
    const batch = buildStepBatch(episodes, settings);
    assert.deepEqual(batch.endings, {
      solver: { episodes: 4, truncatedShare: 2 / 4, failedShare: 1 / 4 },
      verifier: { episodes: 3, truncatedShare: 1 / 3, failedShare: 1 / 3 },
    });
    assert.deepEqual(agentEndings([]), {});
  });
});
