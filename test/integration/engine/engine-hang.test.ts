/**
 * The engine supervisor's hang watchdog against a real engine process: Health reports
 * progress (device runs, queue depth); a SIGSTOPped engine (alive, silent) is killed
 * within the hang limit + one Health period, a call waiting on it fails with a retryable
 * UNAVAILABLE, and a new engine serves. (The whole-run version, bit-identical to an
 * uninterrupted run, is test/integration/chaos/engine-hang.test.ts.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EngineError } from '../../../engines/protocol/client';
import { EngineSupervisor, HEALTH_EVERY_MS } from '../../../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';

const HANG_MS = 6000;
const spec = { vocabSize: 16, contextWindow: 4, embedDim: 8, hiddenDim: 16 };
const generate = { modelKey: 'm', version: 0, sequences: [{ context: [1, 2], seed: 3 }], sampling: { temperature: 1, maxTokens: 4 } };

test('a SIGSTOPped engine is found hung, killed and replaced; the call waiting on it fails retryably', async () => {
  const events: Array<Record<string, unknown> & { at: number }> = [];
  const supervisor = new EngineSupervisor({
    device: 'cpu',
    command: BUILT_IN_ENGINE_COMMAND,
    quiet: true,
    hangMs: HANG_MS,
    log: (e) => events.push({ ...e, at: Date.now() }),
  });
  const client = await supervisor.start();
  try {
    await client.initModel({ modelKey: 'm', spec, seed: 1 });
    const before = await client.health();
    await client.generate(generate);
    const afterRun = await client.health();
    assert.ok(afterRun.deviceRuns > before.deviceRuns, `a generation is device progress (${before.deviceRuns} -> ${afterRun.deviceRuns})`);
    assert.equal(afterRun.queueDepth, 0);

    // An idle engine that answers is never hung, however long it idles.
    await new Promise((r) => setTimeout(r, HANG_MS + 2 * HEALTH_EVERY_MS));
    assert.ok(!events.some((e) => e.event === 'engine_hung'), 'an idle engine is not hung');

    const pid = supervisor.pid!;
    process.kill(pid, 'SIGSTOP');
    const stoppedAt = Date.now();
    await assert.rejects(client.generate({ ...generate, sequences: [{ context: [2, 1], seed: 4 }] }), (e: unknown) => {
      assert.ok(e instanceof EngineError && e.transient, `retryable engine error, got ${String(e)}`);
      return true;
    });
    const hung = events.find((e) => e.event === 'engine_hung');
    assert.ok(hung && hung.pid === pid, JSON.stringify(events));
    const detectedMs = hung.at - stoppedAt;
    console.log(`SIGSTOPped engine found hung after ${(detectedMs / 1000).toFixed(1)} s (limit ${HANG_MS / 1000} s, Health every ${HEALTH_EVERY_MS / 1000} s)`);
    assert.ok(detectedMs >= HANG_MS - HEALTH_EVERY_MS && detectedMs <= HANG_MS + 2 * HEALTH_EVERY_MS + 1000, `detected after ${detectedMs} ms`);

    const next = await supervisor.waitForRestart(pid);
    assert.notEqual(supervisor.pid, pid);
    assert.equal((await next.health()).status, 'SERVING');
  } finally {
    await supervisor.stop();
  }
});
