/** A run's rollout progress (workflows/training-run/progress.ts) and its line (details.ts progressText), against hand-computed values. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { progressText, renderDetails } from '../../../workflows/training-run/details';
import { RolloutProgress } from '../../../workflows/training-run/progress';

test('parts add up; a later report of a part replaces its earlier one; rates are as of the latest report', () => {
  const p = new RolloutProgress();
  assert.equal(p.view(), null, 'nothing in flight');
  p.begin(3, 'train', 512, 10_000);
  p.report({ step: 3, split: 'train', from: 0, done: 10, failed: 1, turns: 30, errors: { 'boom #': 1 } }, 12_000);
  p.report({ step: 3, split: 'train', from: 256, done: 20, failed: 3, turns: 50, errors: { 'boom #': 1, 'tool x timed out': 2 } }, 14_000);
  p.report({ step: 3, split: 'train', from: 0, done: 30, failed: 1, turns: 90, errors: { 'boom #': 1 } }, 20_000);
  // 50 done in 10 s: 5 episodes/s, 462 left: 92.4 s; 140 turns in 10 s
  assert.deepEqual(p.view(), {
    step: 3,
    split: 'train',
    done: 50,
    planned: 512,
    failed: 4,
    reason: { error: 'boom #', count: 2 },
    turnsPerSecond: 14,
    etaSeconds: 92.4,
  });
  assert.equal(p.report({ step: 2, split: 'train', from: 0, done: 99, failed: 0, turns: 0, errors: {} }, 21_000), false, "another step's report is ignored");
  p.partFinished(3, 'train', 256, 256, 3, 30_000);
  assert.equal(p.view()!.done, 286, "a finished part counts its whole slice, keeping the other part's report");
  p.end(3, 'train');
  assert.equal(p.view(), null);
});

test('an eval in flight shows before a step; durable episodes count one by one; ties of errors go alphabetically', () => {
  const p = new RolloutProgress();
  p.begin(4, 'train', 8, 0);
  p.begin(5, 'train', 8, 0);
  assert.equal(p.view()!.step, 4, 'the earliest step: the one the run waits on');
  p.begin(4, 'eval', 2, 1000);
  p.episodeDone(4, 'eval', 0, { status: 'failed', turns: 2, error: 'b 12' }, 2000);
  p.episodeDone(4, 'eval', 0, { status: 'failed', turns: 1, error: 'a 7.5' }, 3000);
  const v = p.view()!;
  assert.deepEqual(v, { step: 4, split: 'eval', done: 2, planned: 2, failed: 2, reason: { error: 'a #', count: 1 }, turnsPerSecond: 1.5, etaSeconds: 0 });
  assert.equal(progressText(v), 'eval at step 4: 2/2 episodes, 2 failed (most: a # ×1), 1.5 turns/s, ETA 0s');
});

test('the line before any episode finished, and in Current Details', () => {
  const p = new RolloutProgress();
  p.begin(0, 'train', 2560, 0);
  assert.equal(progressText(p.view()!), 'step 1 rollout: 0/2560 episodes');
  p.report({ step: 0, split: 'train', from: 0, done: 256, failed: 0, turns: 768, errors: {} }, 60_000);
  const details = renderDetails({
    team: 'math',
    runId: 'r1',
    step: 0,
    steps: 1,
    phase: 'running',
    rewards: {},
    lastEval: null,
    initialEval: null,
    failedEpisodes: 0,
    pendingChanges: 0,
    dashboardPage: null,
    progress: p.view(),
  });
  // 256 in 60 s; 2304 left at 256/60 a second: 540 s
  assert.equal(details, '**math** run `r1`: step 0/1 (running)\n\n- step 1 rollout: 256/2560 episodes, 12.8 turns/s, ETA 9m00s');
});
