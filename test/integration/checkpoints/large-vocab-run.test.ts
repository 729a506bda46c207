/**
 * A real vocabulary trains with default settings (issue #50): a qwen2-layout checkpoint with Qwen3's
 * 151,669-token tokenizer (512 positions), `math` with a transformer policy and the checkpoint's own
 * tokenizer — what `troupe train math --model DIR --team-options '{"policy":"transformer","checkpointTokenizer":true}'`
 * runs — against the real stack (Temporal dev server, PostgreSQL, a pool worker spawning the built-in engine)
 * at the default hang limit (TROUPE_ENGINE_HANG_S, 20 s). The spec's first use builds its sessions and probes
 * batch invariance: dozens of vocabulary-wide device runs in one queue task (~25 s on a loaded 2-core host),
 * which used to count as no progress, so the watchdog killed the engine as hung, and each restart again.
 * Now each run is progress, and a single long run (the update of a default-sized step) that keeps the engine
 * busy on the CPU is work, not a hang: the run completes and the engine is never found hung.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import { writeQwen3VocabCheckpoint } from '../../../bench/train-memory';
import { QWEN3_VOCAB } from '../../../bench/memory';
import { getVersion, listVersions } from '../../../activities/store/versions';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';

const events: Array<Record<string, unknown>> = [];
/** Rejects at the first `engine_hung`: the run would only loop in restarts after it. */
let onHung: (e: Record<string, unknown>) => void = () => undefined;
const hung = new Promise<never>((_, reject) => (onHung = (e) => reject(new Error(`the engine was killed as hung: ${JSON.stringify(e)}`))));
hung.catch(() => undefined);
let h: Harness;
const dir = writeQwen3VocabCheckpoint(path.join(os.tmpdir(), 'troupe-qwen2-qwen3-vocab-512'), 512);

before(async () => {
  // no engineHangMs: the default
  h = await startHarness({
    pool: {
      log: (e) => {
        events.push(e);
        if (e.event === 'engine_hung') onHung(e);
      },
    },
  });
});
after(async () => {
  await h?.shutdown();
});

/** VmHWM of a process, in bytes. */
const peakRss = (pid: number) => Number(/^VmHWM:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

it('a 151,669-token checkpoint trains to completion at the default hang limit, its engine never found hung', async () => {
  const t0 = performance.now();
  const run = h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
    taskQueue: h.taskQueue,
    workflowId: 'large-vocab',
    args: [
      {
        team: 'math',
        teamOptions: { policy: 'transformer', checkpoint: dir, checkpointTokenizer: true },
        // one step of the default 16 groups x 8: its update over 128 episodes' turns at this vocabulary is one
        // device run longer than the limit on a loaded 2-core host, at work on the CPU (gpu-workers/hang-watch.ts)
        steps: 1,
        evalTasks: 2,
        seed: 5,
      },
    ],
  });
  const summary = await Promise.race([run, hung]);
  const seconds = (performance.now() - t0) / 1000;
  const engine = h.pool.supervisor!.pid!;
  console.log(
    `V ${QWEN3_VOCAB}: 1 step of 16 x 8 in ${seconds.toFixed(1)} s, engine peak RSS ${(peakRss(engine) / 2 ** 20).toFixed(0)} MiB, ` +
      `engine restarts ${h.pool.supervisor!.restartCount}`,
  );
  assert.equal(summary.status, 'completed');
  assert.deepEqual(
    events.filter((e) => e.event === 'engine_hung'),
    [],
    'the engine was never killed as hung',
  );
  assert.equal(h.pool.supervisor!.restartCount, 0);
  const versions = await listVersions(h.db.sql, 'large-vocab');
  assert.deepEqual(
    versions.map((v) => v.version),
    [0, 1],
  );
  const v0 = await getVersion(h.db.sql, h.db.checkpoints, 'large-vocab', 'policy', 0);
  assert.equal((v0!.spec as { vocabSize: number }).vocabSize, QWEN3_VOCAB);
});
