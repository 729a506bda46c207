/**
 * The engine hang rule (gpu-workers/hang-watch.ts) on hand-made timelines, in seconds:
 * a busy, CPU-starved engine that answers Health late but keeps finishing device runs is
 * not hung (the load test's 16,384-episode step, where the old 2 s ask saw no answer and
 * killed every new engine with its queue); a device run stuck for the limit, a silent
 * engine and a new engine whose first run never ends are.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HEALTH_EVERY_MS } from '../../../gpu-workers/engine-process';
import { BUSY_LIMIT_FACTOR, HangWatch } from '../../../gpu-workers/hang-watch';

const s = (x: number) => x * 1000;
const HANG = s(20);
const EVERY = HEALTH_EVERY_MS; // 2 s

/**
 * The watchdog loop against an engine model: an ask at `t` is answered at `answerAt(t)`
 * (undefined: never) with `progress(answer time)`, and counts if it comes within the ask's
 * timeout. Asks start on 2 s ticks when none is out. Returns when it was found hung, if ever
 * before `until`.
 */
function play(
  watch: HangWatch,
  engine: { answerAt: (t: number) => number | undefined; progress: (t: number) => { deviceRuns: number; queueDepth: number } },
  until: number,
  askTimeout: (t: number) => number = (t) => watch.askTimeoutMs(t, EVERY),
): { hungAt?: number; late: number } {
  let free = 0; // when the last ask settled
  let late = 0; // answers that took longer than 2 s and still counted
  for (let tick = EVERY; tick <= until; tick += EVERY) {
    if (tick < free) continue; // an ask is still out
    const answer = engine.answerAt(tick);
    const deadline = tick + askTimeout(tick);
    if (answer !== undefined && answer <= deadline) {
      if (answer - tick > EVERY) late++;
      watch.answered(answer, engine.progress(answer));
      free = answer;
    } else free = deadline;
    if (watch.hung(free)) return { hungAt: free, late };
  }
  return { late };
}

/**
 * A starved engine with 64 calls queued from 0.5 s: back-to-back device runs of 6 s
 * (ending at 6.5, 12.5, ...), its thread blocked during each; an ask is answered 2.5 s
 * after the end of the run it arrived in (the Health request waits behind other requests).
 */
const RUN = s(6);
const START = s(0.5);
const busy = {
  answerAt: (t: number) => START + Math.ceil((t - START) / RUN) * RUN + s(2.5),
  progress: (t: number) => {
    const done = Math.min(64, Math.floor((t - START) / RUN));
    return { deviceRuns: done, queueDepth: 64 - done };
  },
};

test('a busy engine answering late, its runs finishing, is not hung; the old 2 s ask killed it', () => {
  // ask at 2 → run ends 6.5 → answered 9.0 (7 s late): first answer, progress at 9; runs 1.
  const watch = new HangWatch(HANG, 0);
  assert.equal(watch.askTimeoutMs(s(2), EVERY), s(18), 'the first ask waits until 20 s after serving began');
  const now = play(watch, busy, s(300));
  assert.equal(now.hungAt, undefined, 'never hung while runs finish every 6 s');
  assert.ok(now.late > 10, `answers that came more than 2 s after the ask counted (${now.late})`);

  // Before: each ask waited HEALTH_EVERY_MS; every answer here comes ≥ 2.5 s after its ask,
  // so none counted and the engine was "hung" 20 s after it started serving, deviceRuns -1.
  const old = new HangWatch(HANG, 0);
  const before = play(old, busy, s(300), () => EVERY);
  assert.equal(before.hungAt, s(20));
  assert.equal(old.deviceRuns, -1);
});

test('a device run stuck for the limit is a hang, measured from the last finished run', () => {
  const watch = new HangWatch(HANG, 0);
  watch.answered(s(2), { deviceRuns: 0, queueDepth: 0 }); // idle
  watch.answered(s(4), { deviceRuns: 3, queueDepth: 5 }); // busy, runs finished: progress at 4
  for (let t = 6; t <= 22; t += 2) watch.answered(s(t), { deviceRuns: 3, queueDepth: 5 }); // answers, no run ends
  assert.equal(watch.hung(s(23.9)), false);
  assert.equal(watch.stalledMs(s(24)), s(20));
  assert.equal(watch.hung(s(24)), true);
  assert.equal(watch.deviceRuns, 3);
});

test('a silent engine (stopped) is hung at its last progress + the limit; its ask waits exactly that long', () => {
  const watch = new HangWatch(HANG, 0);
  watch.answered(s(10), { deviceRuns: 7, queueDepth: 0 });
  assert.equal(watch.askTimeoutMs(s(12), EVERY), s(18)); // until 30 s
  assert.equal(watch.askTimeoutMs(s(29.5), EVERY), EVERY); // never shorter than one period
  const r = play(watch, { answerAt: () => undefined, progress: () => ({ deviceRuns: 7, queueDepth: 1 }) }, s(60));
  assert.equal(r.hungAt, s(30));
});

test('a new engine is measured from when it started serving: a first run that never ends is a hang', () => {
  const watch = new HangWatch(HANG, s(100));
  watch.answered(s(101), { deviceRuns: 0, queueDepth: 64 }); // its first answer: progress at 101
  for (let t = 103; t <= 121; t += 2) watch.answered(s(t), { deviceRuns: 0, queueDepth: 64 });
  assert.equal(watch.hung(s(120.9)), false);
  assert.equal(watch.hung(s(121)), true);
  // never answering at all: hung 20 s after serving began
  assert.equal(new HangWatch(HANG, s(100)).hung(s(120)), true);
});

test('an idle engine that answers is never hung; an answer never moves progress back', () => {
  const watch = new HangWatch(HANG, 0);
  for (let t = 2; t <= 200; t += 2) watch.answered(s(t), { deviceRuns: 5, queueDepth: 0 });
  assert.equal(watch.hung(s(201)), false);
  watch.answered(s(150), { deviceRuns: 6, queueDepth: 1 }); // out of order: progress stays at 200
  assert.equal(watch.stalledMs(s(201)), s(1));
});

test('a run that keeps the engine busy on the CPU is at work, not hung, for at most BUSY_LIMIT_FACTOR limits', () => {
  const w = new HangWatch(20_000, 0);
  w.answered(1000, { deviceRuns: 5, queueDepth: 1 }); // progress at 1 s, then one long run
  // samples every 2 s: 1.0 s of CPU in 2 s is busy (≥ 0.2 of a core)
  for (let t = 3000; t <= 60_000; t += 2000) w.cpu(t, 1.0, 2);
  assert.equal(w.hung(61_000), false, 'busy until 59 s: not hung at 61 s');
  assert.equal(w.stalledMs(61_000), 2000);
  assert.equal(w.sinceProgressMs(61_000), 60_000);
  // idle from here (0.1 s of CPU in 2 s: a stopped or waiting engine)
  for (let t = 63_000; t <= 79_000; t += 2000) w.cpu(t, 0.1, 2);
  assert.equal(w.hung(78_999), false);
  assert.equal(w.hung(79_000), true, 'hung one limit after its last sign of work (59 s + 20 s)');

  // busy forever: counts until 15 limits (300 s) after the last progress, then the limit runs out
  const b = new HangWatch(20_000, 0);
  b.answered(0, { deviceRuns: 1, queueDepth: 1 });
  for (let t = 2000; t <= 400_000; t += 2000) b.cpu(t, 2.0, 2);
  assert.equal(b.stalledMs(400_000), 400_000 - 298_000, 'the last busy sign that counts: 298 s, under 15 × 20 s');
  assert.equal(b.hung(317_999), false);
  assert.equal(b.hung(318_000), true);
  assert.equal(BUSY_LIMIT_FACTOR, 15);
});
