// What `troupe train`/`resume` say at the end of a run and the exit status they give it.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { failureHint } from '../../../control/runs';
import { evalText, problemLines, rewardNumber, runExitCode, summaryLines } from '../../../cli/summary';
import type { RunSummary } from '../../../workflows/training-run';

const summary = (over: Partial<RunSummary>): RunSummary => ({
  runId: 'r1',
  workflowId: 'r1',
  team: 'math',
  steps: 2,
  status: 'completed',
  versions: { policy: 2 },
  initialEval: null,
  finalEval: null,
  failedEpisodes: 0,
  ...over,
});

it('exit status: 0 only for a run that completed and trained (or had steps 0); stopped or untrained runs are non-zero', () => {
  assert.equal(runExitCode(summary({})), 0);
  assert.equal(runExitCode(summary({ versions: { solver: 0, verifier: 1 } })), 0);
  assert.equal(runExitCode(summary({ versions: { policy: 0 } })), 1, 'completed at version 0: learned nothing');
  assert.equal(runExitCode(summary({ status: 'stopped' })), 1);
  // steps 0: an eval of the initial models, which is all it was asked to do
  const evalRun = summary({ steps: 0, versions: { policy: 0 } });
  assert.equal(runExitCode(evalRun), 0);
  assert.ok(!summaryLines(evalRun, { runSeconds: 3, setupSeconds: 0 }).some((l) => l.includes('never trained')));
  assert.equal(runExitCode(summary({ steps: 0, versions: { policy: 0 }, status: 'stopped' })), 1);
});

it('a run that learned nothing says why: failed and empty episodes with their most common errors, skipped updates', () => {
  const problems = {
    episodes: 8,
    failed: 6,
    empty: 2,
    errors: [{ error: 'rewards.solver.correct: must be a finite number, got NaN', count: 6 }],
    skippedUpdates: [{ model: 'policy', reason: 'no trainable tokens', steps: 2 }],
    stalledAgents: [],
  };
  assert.deepEqual(summaryLines(summary({ versions: { policy: 0 }, failedEpisodes: 6 }), { runSeconds: 34.2, setupSeconds: 267 }, problems), [
    'run r1 (math) completed after 2 steps in 34s (setting up the stack took 4m27s more)',
    '  eval success: -',
    '             -> -',
    '  versions: policy v0',
    '  episodes: 6 failed (excluded from updates), 2 empty (no agent turn) of 8; most common errors:',
    '    6x rewards.solver.correct: must be a finite number, got NaN',
    '  update skipped: policy: no trainable tokens (2 steps)',
    '  never trained: every model is still at version 0',
  ]);
  assert.deepEqual(problemLines({ episodes: 8, failed: 0, empty: 0, errors: [], skippedUpdates: [], stalledAgents: [] }), [], 'a healthy run adds nothing');
});

it('a stalled agent is named with its model, the streak and the rewards', () => {
  const stalled = { agent: 'verifier', model: 'policy', since: 10, steps: 30, reward: 0, firstReward: 0.9453125 };
  assert.deepEqual(problemLines({ episodes: 5120, failed: 0, empty: 0, errors: [], skippedUpdates: [], stalledAgents: [stalled] }), [
    "  no learning signal: verifier (model policy) for its last 30 steps (from step 10): every group's rewards were equal, at 0 " +
      'against 0.945 at its first step; it cannot recover by itself (a role that judges a fast learner stalls so more often with ' +
      '--staleness: docs/performance.md#asynchronous-rl)',
  ]);
});

it("the run's own time is reported apart from setting up the stack (none when the stack was up)", () => {
  assert.equal(summaryLines(summary({}), { runSeconds: 40, setupSeconds: 0.4 })[0], 'run r1 (math) completed after 2 steps in 40s');
});

it('eval rewards read as mean rewards in their own units, apart from the success rate: a scaled 10 is not 10.000 beside rates', () => {
  const lines = summaryLines(
    summary({
      initialEval: { step: 0, success: 0.25, episodes: 21, rewards: { solver: { correct: 0.25 }, verifier: { judged: 2.5, format: 1 } } },
      finalEval: { step: 2, success: 0.9047619, episodes: 21, rewards: { solver: { correct: 0.9047619 }, verifier: { judged: 10, format: -0.5 } } },
    }),
    { runSeconds: 40, setupSeconds: 0 },
  );
  assert.deepEqual(lines.slice(1, 3), [
    '  eval success: 0.250 (21 held-out tasks); mean reward: solver correct 0.25; verifier judged 2.5, format 1',
    '             -> 0.905 (21 held-out tasks); mean reward: solver correct 0.905; verifier judged 10, format -0.5',
  ]);
  assert.deepEqual([0, 10, 0.1234567, 12345.6789, 0.00001234, -0.0001].map(rewardNumber), ['0', '10', '0.123', '12345.679', '0.000012', '-0.0001']);
  // An eval without rewards (e.g. every episode failed) is its rate alone.
  assert.equal(evalText({ step: 0, success: 0, episodes: 3, rewards: {} }), '0.000 (3 held-out tasks)');
});

it('a failed run whose engine refused the request is not pointed at troupe resume, which would repeat it', () => {
  const refused = new Error('workflow failed', {
    cause: new Error('activity failed', {
      cause: ApplicationFailure.create({ type: 'INVALID_REQUEST', message: 'engine Generate: sequences[0]: …', nonRetryable: true }),
    }),
  });
  assert.equal(failureHint(refused, 'r1'), 'the engine refused a request the team or run config makes (the field is named above): fix it and start a new run');
  const checkpoint = new Error('workflow failed', { cause: ApplicationFailure.nonRetryable('model policy: checkpoint /d: …', 'BadCheckpoint') });
  assert.equal(failureHint(checkpoint, 'r1'), 'after fixing the cause: npx troupe resume r1');
});
