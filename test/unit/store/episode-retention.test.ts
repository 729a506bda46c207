import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TroupeError } from '../../../infra/errors';
import {
  describeEpisodePolicy,
  inSample,
  prunable,
  validateEpisodePolicy,
  type EpisodeFacts,
  type EpisodeRetentionPolicy,
  type RunFacts,
} from '../../../activities/store/episode-retention';

// sha256("a") = ca978112..., sha256("b") = 3e23e816..., sha256("d") = 18ac3e73...:
// as fractions of 2^32, 0xca978112 = 0.7914, 0x3e23e816 = 0.2427, 0x18ac3e73 = 0.0964.
test('the sample is the first 32 bits of sha256(episode id) below the fraction', () => {
  assert.equal(inSample('a', 0.79), false);
  assert.equal(inSample('a', 0.7915), true);
  assert.equal(inSample('b', 0.25), true);
  assert.equal(inSample('b', 0.24), false);
  assert.equal(inSample('d', 0.1), true);
  assert.equal(inSample('d', 0.09), false);
  assert.equal(inSample('a', 0), false, 'fraction 0: nothing');
  assert.equal(inSample('a', 1), true, 'fraction 1: everything');
});

const DAY = 86_400_000;
const now = new Date('2026-12-01T00:00:00Z');
// A run whose resume point is step 8 (steps 0..7 committed by every model), newest train step 8.
const run: RunFacts = { safeBefore: 8, newestStep: 8, now };
const ep = (episodeId: string, step: number, ageDays: number, split: 'train' | 'eval' = 'train'): EpisodeFacts => ({
  episodeId,
  step,
  split,
  createdAt: new Date(now.getTime() - ageDays * DAY),
});
const none: EpisodeRetentionPolicy = { sample: 0 };

test('evals and episodes at or after the resume point are never pruned', () => {
  assert.equal(prunable(ep('a', 0, 100, 'eval'), run, none), false);
  assert.equal(prunable(ep('a', 8, 100), run, none), false, 'step 8 = the resume point: a resumed run redoes it');
  assert.equal(prunable(ep('a', 9, 100), run, none), false);
  assert.equal(prunable(ep('a', 7, 100), run, none), true, 'step 7 is committed: with no window and no sample it goes');
});

test('the step window keeps the newest keepSteps steps, counted from the newest train step', () => {
  const p: EpisodeRetentionPolicy = { keepSteps: 3, sample: 0 };
  // newest 8, keep 3: steps 6, 7, 8 stay (8 by the resume point as well); 5 and older go
  assert.deepEqual(
    [4, 5, 6, 7].map((s) => prunable(ep('a', s, 0), run, p)),
    [true, true, false, false],
  );
});

test('the age window keeps episodes younger than keepDays', () => {
  const p: EpisodeRetentionPolicy = { keepDays: 2, sample: 0 };
  assert.equal(prunable(ep('a', 1, 1.9), run, p), false);
  assert.equal(prunable(ep('a', 1, 2), run, p), true, 'exactly 2 days old is outside the window');
  assert.equal(prunable(ep('a', 1, 30), run, p), true);
});

test('with both windows either keeps an episode; the sample keeps some of the rest', () => {
  const both: EpisodeRetentionPolicy = { keepDays: 2, keepSteps: 1, sample: 0 };
  assert.equal(prunable(ep('a', 1, 1), run, both), false, 'young, old step: the age window keeps it');
  assert.equal(prunable(ep('a', 8, 30), { ...run, safeBefore: 9 }, both), false, 'old, newest step: the step window keeps it');
  assert.equal(prunable(ep('a', 1, 30), run, both), true);
  const sampled: EpisodeRetentionPolicy = { keepSteps: 1, sample: 0.25 };
  assert.equal(prunable(ep('b', 1, 30), run, sampled), false, 'b (0.2427) is in a 25% sample');
  assert.equal(prunable(ep('a', 1, 30), run, sampled), true, 'a (0.7914) is not');
});

test('a bad policy is refused naming the field as the caller calls it', () => {
  const names = { keepDays: '--episodes-keep-days', keepSteps: '--episodes-keep-steps', sample: '--episodes-sample' };
  const refused = (p: EpisodeRetentionPolicy, field: RegExp) =>
    assert.throws(
      () => validateEpisodePolicy(p, names),
      (e: unknown) => e instanceof TroupeError && field.test(e.message),
    );
  refused({ keepDays: 0, sample: 0 }, /^--episodes-keep-days: must be a number of days > 0 \(got 0\)/);
  refused({ keepDays: Number.NaN, sample: 0 }, /^--episodes-keep-days/);
  refused({ keepSteps: 1.5, sample: 0 }, /^--episodes-keep-steps: must be a whole number/);
  refused({ keepSteps: 0, sample: 0 }, /^--episodes-keep-steps/);
  refused({ sample: 1.5 }, /^--episodes-sample: must be a fraction from 0 to 1 \(got 1.5\)/);
  refused({ sample: -0.1 }, /^--episodes-sample/);
  assert.deepEqual(validateEpisodePolicy({ keepDays: 0.5, keepSteps: 2, sample: 1 }), { keepDays: 0.5, keepSteps: 2, sample: 1 });
});

test('the policy in words', () => {
  assert.equal(describeEpisodePolicy({ sample: 0 }), 'keep evals');
  assert.equal(describeEpisodePolicy({ keepSteps: 3, sample: 0.05 }), 'keep evals, the last 3 step(s), a 5% sample by episode id');
  assert.equal(describeEpisodePolicy({ keepDays: 7, keepSteps: 10, sample: 0 }), 'keep evals, the last 7 day(s) or the last 10 step(s)');
});
