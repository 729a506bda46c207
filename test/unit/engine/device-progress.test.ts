/**
 * The engine's progress (Health's device_runs, what the pool worker's hang watchdog counts) moves with each
 * session built and each device run, also inside one device-queue task: a spec's first use builds its sessions
 * and probes batch invariance in one task of dozens of runs (at Qwen3's vocabulary ~25 s on a loaded host,
 * which the watchdog used to see as a hang: issue #50).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HangWatch } from '../../../gpu-workers/hang-watch';
import { cpuEngine } from './helpers';

const SPEC = { family: 'transformer', vocabSize: 64, width: 16, layers: 1, heads: 2, maxSeq: 16 };

test("a spec's first use reports each session built and each probe run as progress", async () => {
  const engine = cpuEngine();
  const answers: Array<{ at: number; deviceRuns: number; queueDepth: number }> = [];
  let done = false;
  const init = engine.initModel({ modelKey: 'm', spec: SPEC, seed: 1 }).finally(() => (done = true));
  // Health as the gRPC server answers it: between device runs, whenever the event loop turns
  while (!done) {
    const h = engine.health();
    answers.push({ at: performance.now(), deviceRuns: h.deviceRuns, queueDepth: h.queueDepth });
    await new Promise((r) => setImmediate(r));
  }
  await init;
  const busy = answers.filter((a) => a.queueDepth >= 1);
  const counts = busy.map((a) => a.deviceRuns);
  assert.ok(
    counts.every((c, i) => i === 0 || c >= counts[i - 1]!),
    'progress never goes back',
  );
  // 3 sessions and 4 + 4 reference runs and a score and a generate run per probed size and position
  const distinct = new Set(counts).size;
  console.log(`first use of a spec: ${busy.length} Health answers while busy, device_runs took ${distinct} values (0 -> ${counts.at(-1)})`);
  assert.ok(distinct >= 20, `device_runs moved within the one probe task (${distinct} values: ${[...new Set(counts)].join(',')})`);

  // The watchdog's rule over these answers: a limit just above the longest gap between two values is never reached.
  let longest = 0;
  let changedAt = busy[0]!.at;
  for (let i = 1; i < busy.length; i++) {
    if (busy[i]!.deviceRuns === busy[i - 1]!.deviceRuns) continue;
    longest = Math.max(longest, busy[i]!.at - changedAt);
    changedAt = busy[i]!.at;
  }
  const limit = longest + 1;
  const watch = new HangWatch(limit, busy[0]!.at);
  for (const a of busy) {
    watch.answered(a.at, a);
    assert.ok(!watch.hung(a.at), `found hung at ${(a.at - busy[0]!.at).toFixed(0)} ms with a ${limit.toFixed(0)} ms limit`);
  }
  assert.ok(limit < busy.at(-1)!.at - busy[0]!.at, 'the limit is shorter than the whole first use, which once counted as one run');
});
