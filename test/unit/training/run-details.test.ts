/** A run's Current Details (workflows/training-run/details.ts), against hand-written Markdown. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderDetails, type DetailsInput } from '../../../workflows/training-run/details';

const base: DetailsInput = {
  team: 'math',
  runId: 'r1',
  step: 0,
  steps: 10,
  phase: 'starting',
  rewards: {},
  lastEval: null,
  initialEval: null,
  failedEpisodes: 0,
  pendingChanges: 0,
  dashboardPage: null,
};

test('a run with nothing to list is its heading alone', () => {
  assert.equal(renderDetails(base), '**math** run `r1`: step 0/10 (starting)');
});

test('the first line is the whole state, eval and dashboard link included; then rewards, failures and pending changes, one list item each', () => {
  const d = renderDetails({
    ...base,
    step: 3,
    phase: 'running',
    rewards: { solver: { correct: 0.5, format: 1 }, verifier: { judged: 0.25 } },
    lastEval: { step: 2, success: 0.625 },
    initialEval: { step: 0, success: 0.1 },
    failedEpisodes: 2,
    pendingChanges: 1,
    dashboardPage: 'http://localhost:8233/#/runs/r1',
  });
  assert.equal(
    d,
    [
      '**math** run `r1`: step 3/10 (running) · eval 0.625 at step 2 (from 0.100) · [dashboard](http://localhost:8233/#/runs/r1)',
      '',
      '- solver: correct 0.500, format 1.000',
      '- verifier: judged 0.250',
      '- failed episodes: 2',
      '- optimizer changes pending: 1 (apply at step 4)',
    ].join('\n'),
  );
  // short: the Web UI cuts Current Details off at the end, so nothing that matters is last
  const shown = d
    .split('\n')[0]!
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[*`]/g, ''); // as the UI renders the Markdown
  assert.equal(shown, 'math run r1: step 3/10 (running) · eval 0.625 at step 2 (from 0.100) · dashboard');
  assert.ok(d.length <= 300, `${d.length} characters`);
});

test('changes accepted while not running apply at the current step', () => {
  assert.equal(
    renderDetails({ ...base, step: 3, phase: 'paused', pendingChanges: 2 }),
    '**math** run `r1`: step 3/10 (paused)\n\n- optimizer changes pending: 2 (apply at step 3)',
  );
});

test('an asynchronous run lists its staleness, the rollouts started ahead and each model off-policy metrics', () => {
  const offPolicy = {
    policy: {
      staleness: 1,
      'isWeight.mean': 0.98765,
      'isWeight.max': 1.5,
      'isWeight.truncated': 0.0625,
      'isWeight.masked': 0.25,
      mismatch_kl: 0.000123,
      clipFraction: 0.125,
    },
    judge: { loss: 1 },
    // an update an older worker returned: behaviourKl was mismatch_kl's name, no masked share
    critic: { staleness: 2, 'isWeight.mean': 1, 'isWeight.max': 1, 'isWeight.truncated': 0, behaviourKl: 0.5, clipFraction: 0 },
  };
  const d = renderDetails({ ...base, step: 5, phase: 'running', staleness: { lags: { policy: 1, judge: 0 }, ahead: [5, 6], offPolicy } });
  assert.equal(
    d,
    [
      '**math** run `r1`: step 5/10 (running)',
      '',
      '- staleness policy k=1, judge k=0; ahead: steps 5, 6',
      '- policy: staleness 1.00, IS mean 0.988 max 1.500 cut 0.063 masked 0.250, mismatch KL 1.23e-4, clip 0.125',
      '- critic: staleness 2.00, IS mean 1.000 max 1.000 cut 0.000 masked -, mismatch KL 5.00e-1, clip 0.000',
    ].join('\n'),
  );
  assert.match(renderDetails({ ...base, staleness: { lags: { policy: 2 }, ahead: [], offPolicy: {} } }), /- staleness policy k=2; ahead: none$/);
});
