/**
 * Sampler and trainer on different pools (issue 14): the bundled `recall` team
 * with its rollouts on the built-in ONNX engine and its version 0 and updates on
 * the PyTorch engine (engines/pytorch), and with PyTorch for both. After each
 * update the sampling engine loads the new version from the store by
 * reference. Each engine is killed mid-run; both claim determinism, so each
 * killed run must end bit for bit where its uninterrupted twin ends, with one
 * version per step (nothing lost or repeated).
 *
 * Skips, naming the Debian packages, where the PyTorch engine cannot run.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { listVersions } from '../../../activities/store/versions';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import type { PoolWorker } from '../../../processes/pool-worker';
import type { trainingRun } from '../../../workflows';
import { checkRunBookkeeping, startHarness, startPool, type Harness } from '../../../testing/stack';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;

/** The two engines compute the same model in float32 by different kernels: the rollout–update log-prob gap is rounding, not a different policy. */
const CROSS_ENGINE_GAP = 1e-4;

describe('sampler and trainer on different pools', { skip }, () => {
  let h: Harness;
  let torchPool: PoolWorker;
  const TORCH = `torch-${process.pid}`;
  before(async () => {
    h = await startHarness();
    torchPool = await startPool(h.env, h.db, { poolTaskQueue: TORCH, pool: { engine: 'pytorch' } });
  });
  after(async () => {
    await torchPool?.shutdown();
    await h?.shutdown();
  });

  const steps = 3;
  const run = (id: string, pools: Record<string, { sample?: string; train?: string }>) =>
    h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: id,
      args: [{ team: 'recall', steps, groupsPerStep: 3, groupSize: 4, evalEvery: 0, evalTasks: 4, seed: 5, pools }],
    });

  /**
   * Kills `pool`'s engine once the run has committed version `afterVersion`, as soon as the
   * engine has work within `busyWithinMs` (0: at once).
   */
  async function killEngineMidRun(runId: string, pool: PoolWorker, afterVersion: number, busyWithinMs: number): Promise<number> {
    for (;;) {
      const v = await listVersions(h.db.sql, runId);
      if (v.some((x) => x.version >= afterVersion)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const deadline = Date.now() + busyWithinMs;
    while (Date.now() < deadline) {
      const busy = await pool
        .getClient()
        .health({ timeoutMs: 500 })
        .then(
          (x) => x.queueDepth > 0,
          () => false,
        );
      if (busy) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const pid = pool.supervisor!.pid!;
    process.kill(pid, 'SIGKILL');
    await pool.supervisor!.waitForRestart(pid);
    return pid;
  }

  /** Whether `pool`'s engine (a restarted one: its cache starts empty) holds a version of the run: it reloaded it from the store. */
  async function reloaded(pool: PoolWorker, runId: string) {
    return (await pool.getClient().stats()).models.some((m) => m.modelKey.includes(runId) && m.versions.length > 0);
  }

  async function shas(runId: string) {
    return (await listVersions(h.db.sql, runId)).map((v) => `${v.version}:${v.sha256}`);
  }

  async function gapMax(runId: string) {
    const rows = await h.db.sql`SELECT value FROM metrics WHERE run_id = ${runId} AND kind = 'update' AND scope = 'policy' AND name = 'logprobGapMax'`;
    assert.equal(rows.length, steps);
    return Math.max(...rows.map((r) => r.value as number));
  }

  it('ONNX sampler + PyTorch trainer: trains, survives a kill of each engine, ends bit-identical to the uninterrupted run', async () => {
    const pools = { policy: { train: TORCH } };
    const clean = await run('split-clean', pools);
    assert.equal(clean.status, 'completed');
    assert.deepEqual(clean.versions, { policy: steps });
    await checkRunBookkeeping(h, 'split-clean', steps, ['reader'], ['policy']);
    // version 0 and the updates came from the trainer: the sampler's engine loaded each of them
    const onnxStats = await h.pool.getClient().stats();
    const torchStats = await torchPool.getClient().stats();
    const keyOf = (s: typeof onnxStats) => s.models.find((m) => m.modelKey.includes('split-clean'));
    assert.ok(keyOf(torchStats)!.versions.includes(steps), 'the trainer made the last version');
    assert.ok(keyOf(onnxStats)!.versions.includes(steps - 1), 'the sampler loaded a version the trainer made');
    assert.ok(
      (torchStats.updateRuns ?? 0) >= steps && onnxStats.updateRuns === 0,
      `updates ran on the trainer only (torch ${torchStats.updateRuns}, onnx ${onnxStats.updateRuns})`,
    );
    const gap = await gapMax('split-clean');
    assert.ok(gap <= CROSS_ENGINE_GAP, `rollout (ONNX) vs update (PyTorch) log-prob gap ${gap}`);
    console.log(`split ONNX->PyTorch: logprobGapMax over ${steps} steps = ${gap.toExponential(2)}`);

    const killed = run('split-killed', pools);
    // the trainer in its update of step 1 (~0.3 s of work); the sampler as version 2 appears, before it rolls out with it
    await killEngineMidRun('split-killed', torchPool, 1, 3000);
    await killEngineMidRun('split-killed', h.pool, 2, 0);
    const s = await killed;
    assert.equal(s.status, 'completed');
    assert.ok(await reloaded(torchPool, 'split-killed'), 'the restarted trainer reloaded a version from the store');
    assert.ok(await reloaded(h.pool, 'split-killed'), 'the restarted sampler reloaded a version from the store');
    await checkRunBookkeeping(h, 'split-killed', steps, ['reader'], ['policy']);
    assert.deepEqual(await shas('split-killed'), await shas('split-clean'), 'killed run ends where the clean one does');
  });

  it('PyTorch for both: trains, survives an engine kill, ends bit-identical to the uninterrupted run', async () => {
    const pools = { policy: { sample: TORCH, train: TORCH } };
    const clean = await run('torch-clean', pools);
    assert.equal(clean.status, 'completed');
    await checkRunBookkeeping(h, 'torch-clean', steps, ['reader'], ['policy']);
    const gap = await gapMax('torch-clean');
    assert.ok(gap <= CROSS_ENGINE_GAP, `PyTorch Generate vs Score gap ${gap}`);
    console.log(`PyTorch both: logprobGapMax over ${steps} steps = ${gap.toExponential(2)}`);

    const killed = run('torch-killed', pools);
    await killEngineMidRun('torch-killed', torchPool, 1, 3000);
    const s = await killed;
    assert.equal(s.status, 'completed');
    assert.ok(await reloaded(torchPool, 'torch-killed'), 'the restarted engine reloaded a version from the store');
    await checkRunBookkeeping(h, 'torch-killed', steps, ['reader'], ['policy']);
    assert.deepEqual(await shas('torch-killed'), await shas('torch-clean'), 'killed run ends where the clean one does');
  });
});
