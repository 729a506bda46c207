import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { mathTeam } from '../../../examples/teams/math';
import { transformer } from '../../../agents/model';
import {
  checkAgainstTeam,
  initFieldOf,
  initSourceOf,
  lineageLines,
  lineageOf,
  offPolicyOf,
  parseRunConfig,
  poolsOf,
  type RunConfigError,
  stalenessOf,
  trainedModels,
} from '../../../schema/run-config';

describe('run config', () => {
  it('fills defaults', () => {
    const c = parseRunConfig({ team: 'math' });
    assert.equal(c.rollout, 'batched');
    assert.equal(c.groupSize, 8);
    assert.deepEqual(c.optimizer, { models: {}, agents: {} });
  });

  it('names every bad field', () => {
    assert.throws(
      () => parseRunConfig({ team: 'math', steps: -1, groupSize: 1.5, rollout: 'fast', stpes: 3 }),
      (e: RunConfigError) => {
        const paths = e.issues.map((i) => i.path).sort();
        assert.deepEqual(paths, ['groupSize', 'rollout', 'steps', 'stpes']);
        assert.match(e.message, /steps: must be >= 0/);
        assert.match(e.message, /stpes: unknown field/);
        return true;
      },
    );
    assert.throws(() => parseRunConfig('math'), /\(config\): must be a JSON object/);
  });

  it('resolves settings per model and agent, and rejects names the team does not have', () => {
    const team = mathTeam();
    const c = parseRunConfig({
      team: 'math',
      optimizer: { all: { lr: 0.01 }, models: { policy: { clipHigh: 0.28 } }, agents: { verifier: { rewardWeights: { judged: 0.5 } } } },
    });
    const r = checkAgainstTeam(c, team);
    assert.equal(r.models.policy!.lr, 0.01);
    assert.equal(r.models.policy!.clipHigh, 0.28);
    assert.deepEqual(r.agents.verifier!.rewardWeights, { judged: 0.5 });
    assert.deepEqual(r.agents.solver!.rewardWeights, {});

    const bad = parseRunConfig({ team: 'math', optimizer: { models: { nope: {} }, agents: { judge: {}, solver: { lr: 1 } } } });
    assert.throws(
      () => checkAgainstTeam(bad, team),
      (e: RunConfigError) => {
        const paths = e.issues.map((i) => i.path).sort();
        assert.deepEqual(paths, ['optimizer.agents.judge', 'optimizer.agents.solver.lr', 'optimizer.models.nope']);
        assert.match(e.message, /solver shares model policy with verifier/);
        return true;
      },
    );
    // With separate models an agent may set its own learning rate.
    const sep = checkAgainstTeam(
      parseRunConfig({ team: 'math', teamOptions: { models: 'separate' }, optimizer: { agents: { solver: { lr: 0.05 } } } }),
      mathTeam({ models: 'separate' }),
    );
    assert.equal(sep.agents.solver!.lr, 0.05);
  });

  it('staleness: 0 by default, one k for all models or one per model, bad values and names by path', () => {
    const d = parseRunConfig({ team: 'math' });
    assert.equal(stalenessOf(d, 'policy'), 0);
    assert.equal(d.importanceCap, 5);
    assert.equal(stalenessOf(parseRunConfig({ team: 'math', staleness: 2 }), 'policy'), 2);
    const per = parseRunConfig({ team: 'math', teamOptions: { models: 'separate' }, staleness: { solver: 1 } });
    assert.deepEqual([stalenessOf(per, 'solver'), stalenessOf(per, 'verifier')], [1, 0]);
    assert.throws(() => parseRunConfig({ team: 'math', staleness: -1 }), /staleness: must be >= 0/);
    assert.throws(() => parseRunConfig({ team: 'math', staleness: { policy: 1.5 } }), /staleness\.policy: must be an integer/);
    assert.throws(() => parseRunConfig({ team: 'math', importanceCap: 0.5 }), /importanceCap: must be >= 1/);
    assert.throws(() => checkAgainstTeam(parseRunConfig({ team: 'math', staleness: { polcy: 1 } }), mathTeam()), /staleness\.polcy: unknown model/);
  });

  it('offPolicy: decoupled PPO with importanceCap by default, a correction for all models or per model, bad fields by path', () => {
    // the default sends exactly what updates were sent before corrections were selectable
    assert.deepEqual(offPolicyOf(parseRunConfig({ team: 'math' }), 'policy'), { importanceCap: 5 });
    assert.deepEqual(offPolicyOf(parseRunConfig({ team: 'math', importanceCap: 2, offPolicy: { correction: 'decoupled-ppo' } }), 'policy'), {
      importanceCap: 2,
    });
    const per = parseRunConfig({
      team: 'math',
      teamOptions: { models: 'separate' },
      staleness: 1,
      importanceCap: 4,
      offPolicy: { correction: 'tis-sequence', cap: 3, models: { verifier: { correction: 'icepop', band: [0.2, 8] } } },
    });
    assert.deepEqual(offPolicyOf(per, 'solver'), { importanceCap: 3, correction: 'tis-sequence' });
    assert.deepEqual(offPolicyOf(per, 'verifier'), { importanceCap: 3, correction: 'icepop', band: [0.2, 8] });
    checkAgainstTeam(per, mathTeam({ models: 'separate' }));
    // the baseline and the step size: only what differs from the defaults (behaviour, ess) is set
    const before = parseRunConfig({
      team: 'math',
      staleness: 1,
      offPolicy: { baseline: 'behaviour', stepSize: 'constant', models: { policy: { baseline: 'proximal' } } },
    });
    assert.deepEqual(offPolicyOf(before, 'policy'), { importanceCap: 5, baseline: 'proximal', stepSize: 'constant' });
    assert.throws(() => parseRunConfig({ team: 'math', offPolicy: { baseline: 'group' } }), /offPolicy\.baseline: must be one of proximal, behaviour/);
    assert.throws(() => parseRunConfig({ team: 'math', offPolicy: { stepSize: 'adaptive' } }), /offPolicy\.stepSize: must be one of ess, constant/);
    // momentum: 'off' is the default and not sent; 'keep' is, per model over the run's
    const momentum = parseRunConfig({
      team: 'math',
      teamOptions: { models: 'separate' },
      staleness: 1,
      offPolicy: { momentum: 'off', models: { verifier: { momentum: 'keep' } } },
    });
    assert.deepEqual(offPolicyOf(momentum, 'solver'), { importanceCap: 5 });
    assert.deepEqual(offPolicyOf(momentum, 'verifier'), { importanceCap: 5, momentum: 'keep' });
    assert.throws(() => parseRunConfig({ team: 'math', staleness: 1, offPolicy: { momentum: 'nesterov' } }), /offPolicy\.momentum: must be one of off, keep/);
    assert.throws(
      () => parseRunConfig({ team: 'math', offPolicy: { correction: 'tis' } }),
      /offPolicy\.correction: must be one of decoupled-ppo, tis-token, tis-sequence, mis-token, mis-sequence, icepop/,
    );
    assert.throws(() => parseRunConfig({ team: 'math', offPolicy: { cap: 0.9 } }), /offPolicy\.cap: must be >= 1/);
    assert.throws(() => parseRunConfig({ team: 'math', offPolicy: { band: [0.5] } }), /offPolicy\.band/);
    assert.throws(() => parseRunConfig({ team: 'math', offPolicy: { band: [1.5, 5] } }), /offPolicy\.band\[0\]: must be <= 1/);
    assert.throws(
      () => parseRunConfig({ team: 'math', offPolicy: { models: { policy: { band: [0.5, 0.8] } } } }),
      /offPolicy\.models\.policy\.band\[1\]: must be >= 1/,
    );
    assert.throws(() => parseRunConfig({ team: 'math', offPolicy: { weight: 2 } }), /offPolicy\.weight: unknown field/);
    // names checked against the team, and a correction only where a model is asynchronous
    assert.throws(
      () => checkAgainstTeam(parseRunConfig({ team: 'math', staleness: 1, offPolicy: { models: { polcy: {} } } }), mathTeam()),
      /offPolicy\.models\.polcy: unknown model/,
    );
    assert.throws(
      () => checkAgainstTeam(parseRunConfig({ team: 'math', offPolicy: { correction: 'icepop' } }), mathTeam()),
      /offPolicy: every model is synchronous/,
    );
    assert.throws(
      () =>
        checkAgainstTeam(
          parseRunConfig({
            team: 'math',
            teamOptions: { models: 'separate' },
            staleness: { solver: 1 },
            offPolicy: { models: { verifier: { correction: 'icepop' } } },
          }),
          mathTeam({ models: 'separate' }),
        ),
      /offPolicy\.models\.verifier: model verifier is synchronous/,
    );
  });

  it('a model-level problem is reported once, not once per agent of that model', () => {
    // math's solver and verifier share the model policy: its settings are resolved for the model and for each agent.
    const bad = parseRunConfig({ team: 'math', optimizer: { all: { estimator: { name: 'rloo', normalizeStd: false } } } });
    assert.throws(
      () => checkAgainstTeam(bad, mathTeam()),
      (e: RunConfigError) => e.issues.length === 1 && e.issues[0]!.path === 'optimizer.models.policy.estimator.normalizeStd',
    );
  });

  it("pools: the team's pool (and trainPool) unless the run moves them; sample alone moves both; bad names by path", () => {
    const team = mathTeam();
    const none = parseRunConfig({ team: 'math' });
    assert.deepEqual(poolsOf(none, team, 'policy'), { sample: 'troupe-gpu', train: 'troupe-gpu' });
    assert.deepEqual(poolsOf(parseRunConfig({ team: 'math', pools: { policy: { train: 'torch' } } }), team, 'policy'), {
      sample: 'troupe-gpu',
      train: 'torch',
    });
    assert.deepEqual(poolsOf(parseRunConfig({ team: 'math', pools: { policy: { sample: 'torch' } } }), team, 'policy'), { sample: 'torch', train: 'torch' });
    // a team whose model trains elsewhere
    const split = { ...team, models: { policy: { ...team.models.policy!, trainPool: 'trainers' } } };
    assert.deepEqual(poolsOf(none, split, 'policy'), { sample: 'troupe-gpu', train: 'trainers' });
    assert.deepEqual(poolsOf(parseRunConfig({ team: 'math', pools: { policy: { train: 'torch' } } }), split, 'policy'), {
      sample: 'troupe-gpu',
      train: 'torch',
    });
    assert.equal(transformer({ tokenizer: team.tokenizer, trainPool: 'torch' }).trainPool, 'torch');
    assert.throws(() => parseRunConfig({ team: 'math', pools: { policy: { train: 'has space' } } }), /pools\.policy\.train: a pool name/);
    assert.throws(() => parseRunConfig({ team: 'math', pools: { policy: { trainer: 'torch' } } }), /pools\.policy\.trainer: unknown field/);
    assert.throws(
      () => checkAgainstTeam(parseRunConfig({ team: 'math', pools: { polcy: { train: 'torch' } } }), team),
      /pools\.polcy: unknown model \(team math has: policy\)/,
    );
  });

  it('rejects bad optimizer values by path', () => {
    assert.throws(() => parseRunConfig({ team: 'math', optimizer: { models: { policy: { lr: -1 } } } }), /optimizer\.models\.policy\.lr: must be > 0/);
    assert.throws(
      () => parseRunConfig({ team: 'math', optimizer: { all: { estimator: { name: 'ppo' } } } }),
      /optimizer\.all\.estimator\.name: unknown estimator "ppo"/,
    );
  });

  it('bounds a durable run by the 2,000 pending children Temporal allows the run, counting rollout nodes past rolloutNodeSize', () => {
    // 10,000 episodes at the default 500 per node: 20 nodes, + 6 eval episodes = 26 pending children.
    const big = parseRunConfig({ team: 'math', rollout: 'durable', groupsPerStep: 1250, groupSize: 8, evalTasks: 6 });
    assert.equal(big.rolloutNodeSize, 500);
    // Flat up to one node's worth: 1,000 episodes at rolloutNodeSize 1,000 are 1,000 children; with staleness 1, 2,000; + 1 eval episode is 2,001.
    const at = { team: 'math', rollout: 'durable', groupsPerStep: 125, groupSize: 8, rolloutNodeSize: 1000, staleness: 1 } as const;
    assert.equal(parseRunConfig({ ...at, evalTasks: 0 }).staleness, 1);
    assert.throws(
      () => parseRunConfig({ ...at, evalTasks: 1 }),
      (e: RunConfigError) => {
        assert.deepEqual(
          e.issues.map((i) => i.path),
          ['rolloutNodeSize'],
        );
        assert.match(
          e.message,
          /rolloutNodeSize: durable rollouts may keep at most 2000 .*\(1 \+ staleness 1\) x 1000 for a step of 1000 episodes \+ 1 for an eval of 1 tasks is 2001/,
        );
        return true;
      },
    );
    // One node per episode: 2,001 nodes for a 2,001-episode step.
    assert.throws(() => parseRunConfig({ team: 'math', rollout: 'durable', groupsPerStep: 2001, groupSize: 1, rolloutNodeSize: 1 }), /is 2001;/);
    assert.equal(parseRunConfig({ team: 'math', rollout: 'durable', groupsPerStep: 2000, groupSize: 1, rolloutNodeSize: 1 }).groupsPerStep, 2000);
    assert.equal(
      parseRunConfig({ team: 'math', rollout: 'batched', groupsPerStep: 125, groupSize: 8, rolloutNodeSize: 1000, staleness: 1, evalTasks: 1 }).groupSize,
      8,
    );
    assert.throws(() => parseRunConfig({ team: 'math', rolloutNodeSize: 1001 }), /rolloutNodeSize: must be <= 1000/);
  });

  it('runs durable episodes several to a workflow only where asked, counting those workflows as the pending children', () => {
    assert.equal(parseRunConfig({ team: 'math', rollout: 'durable' }).episodesPerWorkflow, 1);
    // 2,001 pending children one per episode; at 8 episodes a workflow, 125 x 2 + ceil(1 / 8) = 251.
    const at = { team: 'math', rollout: 'durable', groupsPerStep: 125, groupSize: 8, rolloutNodeSize: 1000, staleness: 1, evalTasks: 1 } as const;
    assert.throws(() => parseRunConfig(at), /is 2001;/);
    assert.equal(parseRunConfig({ ...at, episodesPerWorkflow: 8 }).episodesPerWorkflow, 8);
    assert.throws(
      () => parseRunConfig({ team: 'math', episodesPerWorkflow: 8 }),
      (e: RunConfigError) => {
        assert.deepEqual(
          e.issues.map((i) => i.path),
          ['episodesPerWorkflow'],
        );
        assert.match(e.message, /episodesPerWorkflow: needs rollout: 'durable'/);
        return true;
      },
    );
    assert.throws(() => parseRunConfig({ team: 'math', rollout: 'durable', episodesPerWorkflow: 65 }), /episodesPerWorkflow: must be <= 64/);
    assert.throws(() => parseRunConfig({ team: 'math', rollout: 'durable', episodesPerWorkflow: 0 }), /episodesPerWorkflow: must be >= 1/);
  });

  it('bounds what a step may plan, naming the field (a 4096 x 1024 step would wedge the control worker)', () => {
    assert.throws(
      () => parseRunConfig({ team: 'math', groupsPerStep: 4096, groupSize: 1024 }),
      (e: RunConfigError) => {
        assert.deepEqual(
          e.issues.map((i) => i.path),
          ['groupSize'],
        );
        assert.match(e.message, /groupSize: a step may run at most 16384 episodes: groupsPerStep x groupSize must be <= 16384, got 4096 x 1024 = 4194304/);
        return true;
      },
    );
    assert.equal(parseRunConfig({ team: 'math', groupsPerStep: 2048, groupSize: 8 }).groupSize, 8, '16,384 exactly is allowed');
    assert.throws(() => parseRunConfig({ team: 'math', groupsPerStep: 2049, groupSize: 8 }), /groupSize: a step may run at most 16384/);
  });
});

describe('run config: frozen, init and fork', () => {
  const team = mathTeam({ models: 'separate' });
  const issues = (input: Record<string, unknown>) => {
    try {
      checkAgainstTeam(parseRunConfig({ team: 'math', ...input }), team);
      return [];
    } catch (e) {
      return (e as RunConfigError).issues.map((i) => `${i.path}: ${i.message}`);
    }
  };

  it('refuses unknown frozen and init models, freezing every model, and init with fork, naming the field', () => {
    assert.deepEqual(issues({ frozen: ['verifier'] }), []);
    assert.deepEqual(issues({ frozen: ['ghost'] }), ['frozen[0]: unknown model ghost (team math has: solver, verifier)']);
    assert.deepEqual(issues({ frozen: ['solver', 'verifier'] }), ['frozen: every model of team math is frozen: at least one must train']);
    assert.deepEqual(issues({ init: { ghost: { run: 'r', step: 1 } } }), ['init.ghost: unknown model (team math has: solver, verifier)']);
    assert.deepEqual(issues({ init: { solver: { run: 'r', step: 1 } }, fork: { run: 'r', step: 1 } }), [
      'init: a fork starts every model from the run it forks: give init or fork, not both',
    ]);
  });

  it('takes one of step and version for an init source', () => {
    assert.throws(
      () => parseRunConfig({ team: 'math', init: { solver: { run: 'r' } } }),
      /init\.solver: give one of step \(the version served after that step\) or version/,
    );
    assert.throws(() => parseRunConfig({ team: 'math', init: { solver: { run: 'r', step: 1, version: 2 } } }), /init\.solver: give one of step/);
    assert.throws(() => parseRunConfig({ team: 'math', fork: { run: 'r', step: -1 } }), /fork\.step: must be >= 0/);
  });

  it('gives each model its source: its own init, else the fork; and the trained models', () => {
    const fork = parseRunConfig({ team: 'math', fork: { run: 'p', step: 3 }, frozen: ['verifier'] });
    assert.deepEqual(initSourceOf(fork, 'solver'), { run: 'p', step: 3 });
    assert.equal(initFieldOf(fork, 'solver'), 'fork');
    assert.deepEqual(trainedModels(fork, ['solver', 'verifier']), ['solver']);
    const init = parseRunConfig({ team: 'math', init: { solver: { run: 'p', version: 2, model: 'policy' } } });
    assert.deepEqual(initSourceOf(init, 'solver'), { run: 'p', version: 2, model: 'policy' });
    assert.equal(initSourceOf(init, 'verifier'), undefined);
    assert.equal(initFieldOf(init, 'solver'), 'init.solver');
    assert.deepEqual(lineageLines(lineageOf({ ...fork, ...init })), [
      'forked from p at step 3',
      'model solver starts from run p model policy version 2',
      'frozen: verifier',
    ]);
  });
});
