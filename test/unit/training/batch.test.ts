import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { agentEndings, agentLengths, buildStepBatch } from '../../../activities/training/batch';
import type { StoredEpisode } from '../../../activities/store/trajectories';
import { mathTeam } from '../../../examples/teams/math';
import { checkAgainstTeam, parseRunConfig } from '../../../schema/run-config';
import { defineEstimator } from '../../../rl/advantages/registry';
import { toResult } from '../../../rl/advantages/scope';

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
    meta: {
      episodeId: `e${group}.${idx}`,
      runId: 'r',
      step: 0,
      split: 'train',
      taskId: `t${group}`,
      task: {},
      groupIndex: group,
      episodeIndex: idx,
      seed: 1,
      mode: 'batched',
    },
    trajectory: { episodeId: `e${group}.${idx}`, status, turns: status === 'failed' ? [] : [turn(0, 'solver'), turn(1, 'verifier')] },
    rewards:
      status === 'failed'
        ? []
        : [
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
    // A role that writes out the default (normalizeStd: true) has the same settings: still one global baseline,
    // not role-by-role estimation (which would give each role ±0.7071 of its own episode-level scores).
    const spelled = checkAgainstTeam(
      parseRunConfig({
        team: 'math',
        optimizer: { all: { estimator: { scope: 'group' } }, agents: { verifier: { estimator: { name: 'grpo', scope: 'group', normalizeStd: true } } } },
      }),
      mathTeam(),
    );
    const same = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0)], spelled);
    assert.deepEqual(
      same.models.policy!.map((s) => s.advantages),
      batch.models.policy!.map((s) => s.advantages),
    );
  });

  it("applies each role's reward weights before a shared estimator", () => {
    const weighted = checkAgainstTeam(
      parseRunConfig({ team: 'math', optimizer: { all: { estimator: { scope: 'group' } }, agents: { verifier: { rewardWeights: { judged: 0.1 } } } } }),
      mathTeam(),
    );
    // e0.0: solver 1, verifier 10 * 0.1 = 1 -> episode average 1; e0.1: 0. Same shape as above with 1 for 5.5.
    const batch = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0)], weighted);
    const a = 0.5 / (Math.sqrt((4 * 0.5 ** 2) / 3) + 1e-6);
    assert.ok(Math.abs(batch.models.policy![1]!.advantages[0]! - a) < 1e-12);
    assert.deepEqual(batch.rewards.verifier, { judged: 5 }, 'logged rewards stay unweighted');
  });

  it('estimates a per-component estimator (gdpo) role by role when the roles weigh rewards differently', () => {
    const gdpo = checkAgainstTeam(
      parseRunConfig({
        team: 'math',
        optimizer: { all: { estimator: { name: 'gdpo', scope: 'group' } }, agents: { verifier: { rewardWeights: { judged: 0.1 } } } },
      }),
      mathTeam(),
    );
    // Role by role. Solver: correct [1, 0] -> A_correct = ±0.5/(sqrt(0.5) + 1e-4) = ±c; pre [c, -c] has mean 0 and
    // unbiased std c·sqrt(2), so A = ±c/(c·sqrt(2) + 1e-4) ≈ ±0.7071. Verifier: judged [10, 0] -> ±5/(sqrt(50) + 1e-4),
    // times its weight 0.1 = c', then the same. Scored beforehand with the weights, the four turns would share one
    // set ([1, 1, 0, 0] by episode): ±0.866 instead.
    const batch = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0)], gdpo);
    const renormalized = (c: number) => c / (c * Math.sqrt(2) + 1e-4);
    const solver = renormalized(0.5 / (Math.sqrt(0.5) + 1e-4));
    const verifier = renormalized((0.1 * 5) / (Math.sqrt(50) + 1e-4));
    const first = batch.models.policy!.map((s) => s.advantages[0]!);
    [solver, verifier, -solver, -verifier].forEach((x, i) => assert.ok(Math.abs(first[i]! - x) < 1e-12, `turn ${i}: ${first[i]} vs ${x}`));
  });

  it("estimates each agent's policy entropy as the mean −log p of its sampled tokens, though both share one model", () => {
    const a = episode(0, 0, 1, 10);
    const b = episode(0, 1, 0, 0);
    // solver turns: logprobs [-1, 0, -2] with mask [1, 0, 1] in both episodes -> (1 + 2 + 1 + 2) / 4 = 1.5;
    // verifier turns: [-0.5, 0, -0.5] and [-3, 0, -1] -> (0.5 + 0.5 + 3 + 1) / 4 = 1.25 (the mask-0 tool token is not sampled).
    a.trajectory.turns[1]!.logprobs = [-0.5, 0, -0.5];
    b.trajectory.turns[1]!.logprobs = [-3, -7, -1];
    const failed = episode(1, 0, 0, 0, 'failed');
    const batch = buildStepBatch([a, b, failed], settings);
    assert.deepEqual(batch.entropy, { solver: 1.5, verifier: 1.25 });
  });
});

describe('buildStepBatch with per-turn rewards and a turn-level estimator', () => {
  /** solver t0 → verifier t1 → solver t2 (the solver remembers t0 and hears t1); `step` is per turn, `ok` the episode's. */
  function twoTurnEpisode(idx: number, steps: [number, number], ok: number, judged: number): StoredEpisode {
    const e = episode(0, idx, 0, 0);
    const [t0, t1] = e.trajectory.turns;
    const t2 = { ...t0!, index: 2, parents: [0, 1], contextTokens: [1, 5, 6, 9] };
    e.trajectory.turns = [t0!, t1!, t2];
    e.rewards = [
      { turn: 0, agent: 'solver', components: { ok, step: steps[0] }, perTurn: ['step'] },
      { turn: 1, agent: 'verifier', components: { judged } },
      { turn: 2, agent: 'solver', components: { ok, step: steps[1] }, perTurn: ['step'] },
    ];
    return e;
  }

  it('gives each solver turn its own advantage (turn-return) on its own tokens, the verifier its GRPO one', () => {
    const cfg = checkAgainstTeam(parseRunConfig({ team: 'math', optimizer: { agents: { solver: { estimator: { name: 'turn-return' } } } } }), mathTeam());
    const batch = buildStepBatch([twoTurnEpisode(0, [1, 0], 1, 10), twoTurnEpisode(1, [0, 0], 0, 0)], cfg);
    // Solver returns (γ 0.95): e0 G2 = 0 + 1 = 1, G0 = 1 + 0.95·1 = 1.95; e1 all 0.
    // Leave-one-out per position: e0 [1.95, 1], e1 [−1.95, −1]. Verifier: judged [10, 0] → ±5/(√50 + 1e-6).
    const seqs = batch.models.policy!;
    const v = 5 / (Math.sqrt(50) + 1e-6);
    const expected = [
      [1.95, 0, 1.95],
      [v, 0, v],
      [1, 0, 1],
      [-1.95, 0, -1.95],
      [-v, 0, -v],
      [-1, 0, -1],
    ];
    seqs.forEach((s, i) => s.advantages.forEach((a, k) => assert.ok(Math.abs(a - expected[i]![k]!) < 1e-12, `seq ${i} token ${k}: ${a}`)));
    assert.deepEqual(batch.rewards.solver, { ok: 0.5, step: 0.25 }, 'per-turn components are logged like episode ones');
    assert.deepEqual(batch.diagnostics.solver!.advantageByPosition, [0, 0]);
    assert.equal(batch.diagnostics.solver!.stepGroupShare, null);
  });

  it("gives a project's own estimator (defineEstimator) the turn graph and per-turn rewards, and its per-turn advantages to that turn's tokens", () => {
    // A = 100·|after| + 10·turn + step: each field a user's turn-level estimator reads shows in the result
    defineEstimator({
      name: 'test-turn-fields',
      summary: 'A = 100·|after| + 10·turn + step',
      supportsNormalizeStd: false,
      perComponent: false,
      scopes: ['group-agent'],
      estimate: (samples, options) =>
        toResult(
          'test-turn-fields',
          samples,
          { sets: [] },
          Float64Array.from(samples, (x) => 100 * (x.after?.length ?? 0) + 10 * (x.turn ?? 0) + (x.turnRewards?.step ?? 0)),
          options,
        ),
    });
    const cfg = checkAgainstTeam(parseRunConfig({ team: 'math', optimizer: { agents: { solver: { estimator: { name: 'test-turn-fields' } } } } }), mathTeam());
    const batch = buildStepBatch([twoTurnEpisode(0, [1, 0], 1, 10), twoTurnEpisode(1, [0.5, 0], 0, 0)], cfg);
    // solver t0: after [], step 1 (e0) or 0.5 (e1) → 1, 0.5; t2: after [0], turn 2, step 0 → 120. Verifier: GRPO ±5/(√50 + 1e-6).
    const v = 5 / (Math.sqrt(50) + 1e-6);
    const expected = [1, v, 120, 0.5, -v, 120].map((a) => [a, 0, a]);
    batch.models.policy!.forEach((q, i) => q.advantages.forEach((a, k) => assert.ok(Math.abs(a - expected[i]![k]!) < 1e-12, `seq ${i} token ${k}: ${a}`)));
  });

  it('groups identical contexts into step groups (gigpo) and reports their share', () => {
    const cfg = checkAgainstTeam(parseRunConfig({ team: 'math', optimizer: { agents: { solver: { estimator: { name: 'gigpo' } } } } }), mathTeam());
    const batch = buildStepBatch([twoTurnEpisode(0, [1, 0], 1, 10), twoTurnEpisode(1, [0, 0], 0, 0)], cfg);
    // Both episodes' solver turns share contexts (t0 [1, 5, 6], t2 [1, 5, 6, 9]): all 4 turns are in step groups of 2.
    assert.equal(batch.diagnostics.solver!.stepGroupShare, 1);
    // A_E: totals e0 = 1 + 1 + 0 = 2, e1 = 0 → ±1/(√2 + 1e-6). A_S: t0 returns {1.95, 0} → ±0.975/(0.975·√2 + 1e-6), t2 {1, 0} → ±0.5/(0.5·√2 + 1e-6)
    const e = 1 / (Math.SQRT2 + 1e-6);
    const first = batch.models.policy!.filter((s) => s.agent === 'solver').map((s) => s.advantages[0]!);
    const want = [
      e + 0.975 / (0.975 * Math.SQRT2 + 1e-6),
      e + 0.5 / (0.5 * Math.SQRT2 + 1e-6),
      -e - 0.975 / (0.975 * Math.SQRT2 + 1e-6),
      -e - 0.5 / (0.5 * Math.SQRT2 + 1e-6),
    ];
    want.forEach((x, i) => assert.ok(Math.abs(first[i]! - x) < 1e-12, `solver turn ${i}: ${first[i]} vs ${x}`));
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

describe('what the dashboard shows of a step', () => {
  const settings = checkAgainstTeam(parseRunConfig({ team: 'math' }), mathTeam());

  it('keeps the advantage each trained turn received, none for failed episodes', () => {
    // As in the first test: group 0 solver [1, 0] -> ±0.5/(sqrt(0.5) + 1e-6), verifier [10, 0] -> ±5/(sqrt(50) + 1e-6);
    // group 1's usable episode is a singleton per agent: s/(1 + 1e-6).
    const batch = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0), episode(1, 0, 0, 10), episode(1, 1, 0, 0, 'failed')], settings);
    const a = 0.5 / (Math.sqrt(0.5) + 1e-6);
    const av = 5 / (Math.sqrt(50) + 1e-6);
    const want = [
      ['e0.0', 0, a],
      ['e0.0', 1, av],
      ['e0.1', 0, -a],
      ['e0.1', 1, -av],
      ['e1.0', 0, 0],
      ['e1.0', 1, 10 / (1 + 1e-6)],
    ] as const;
    assert.deepEqual(
      batch.turnAdvantages.map((t) => [t.episodeId, t.turn, t.model]),
      want.map(([e, t]) => [e, t, 'policy']),
    );
    batch.turnAdvantages.forEach((t, i) => assert.ok(Math.abs(t.advantage - want[i]![2]) < 1e-12, `${t.episodeId}#${t.turn}: ${t.advantage}`));
  });

  it("gives each agent's scores before normalization beside its advantages after", () => {
    // Solver scores [1, 0, 0]: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3).
    // Verifier [10, 0, 10] with its reward weight 0.5: [5, 0, 5], mean 10/3, std sqrt(((5/3)^2 * 2 + (10/3)^2) / 2) = sqrt(25/3).
    const weighted = checkAgainstTeam(parseRunConfig({ team: 'math', optimizer: { agents: { verifier: { rewardWeights: { judged: 0.5 } } } } }), mathTeam());
    const batch = buildStepBatch([episode(0, 0, 1, 10), episode(0, 1, 0, 0), episode(1, 0, 0, 10), episode(1, 1, 0, 0, 'failed')], weighted);
    const close = (x: number, y: number) => assert.ok(Math.abs(x - y) < 1e-12, `${x} vs ${y}`);
    close(batch.scores.solver!.mean, 1 / 3);
    close(batch.scores.solver!.std, Math.sqrt(1 / 3));
    close(batch.scores.verifier!.mean, 10 / 3);
    close(batch.scores.verifier!.std, Math.sqrt(25 / 3));
  });

  it("measures each agent's episode length in its own turns and generated tokens", () => {
    const e = episode(0, 0, 1, 10);
    const twoSolverTurns = {
      ...e,
      trajectory: { ...e.trajectory, turns: [e.trajectory.turns[0]!, { ...e.trajectory.turns[0]!, index: 2, responseTokens: [1] }] },
    };
    // Solver: 1 + 2 turns over 2 episodes = 1.5; tokens 3 + (3 + 1) = 7 -> 3.5. Verifier: one episode, 1 turn, 3 tokens.
    assert.deepEqual(agentLengths([e, twoSolverTurns]), { solver: { turns: 1.5, tokens: 3.5 }, verifier: { turns: 1, tokens: 3 } });
    assert.deepEqual(agentLengths([]), {});
  });
});
