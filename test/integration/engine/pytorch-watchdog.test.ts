/**
 * The PyTorch engine watches its own resident memory with the built-in
 * engine's contract (stack/watchdog.ts, engines/pytorch/watchdog.py): past
 * --rss-limit-bytes it writes one "memory-exceeded" JSON line to stderr and
 * dies by SIGKILL; under a pool worker's EngineSupervisor the call in flight
 * fails as retryable (UNAVAILABLE) and a fresh engine is started.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import { EngineError } from '../../../engines/protocol/client';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { engineCommand } from '../../../processes/engine-kinds';
import { EngineSupervisor } from '../../../gpu-workers/engine-process';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;
const run = promisify(execFile);
const MiB = 2 ** 20;

describe('the PyTorch engine over its --rss-limit-bytes', { skip }, () => {
  it('exits at once with one memory-exceeded line', async () => {
    const [cmd, ...args] = engineCommand('pytorch');
    // 64 MiB: below what a started engine (Python, torch, gRPC) holds, so the watchdog fires as it starts.
    await assert.rejects(
      run(cmd!, [...args, '--device', 'cpu', '--port', '0', '--rss-limit-bytes', String(64 * MiB)], { timeout: 60_000 }),
      (e: { signal: string; stderr: string }) => {
        assert.equal(e.signal, 'SIGKILL', e.stderr);
        const lines = e.stderr.split('\n').filter((l) => l.includes('"event": "memory-exceeded"'));
        assert.equal(lines.length, 1, e.stderr);
        const line = JSON.parse(lines[0]!) as { limitBytes: number; rssBytes: number; message: string };
        assert.equal(line.limitBytes, 64 * MiB);
        assert.ok(line.rssBytes > 64 * MiB);
        assert.match(
          line.message,
          /^engine: resident memory \d+ MiB is over the limit of 64 MiB; .*--rss-limit-bytes \/ TROUPE_ENGINE_RSS_LIMIT_BYTES raises the limit\)$/,
        );
        return true;
      },
    );
    await assert.rejects(run(cmd!, [...args, '--rss-limit-bytes', 'lots'], { timeout: 60_000 }), (e: { code: number; stderr: string }) => {
      assert.equal(e.code, 1);
      assert.match(e.stderr, /bad flag: --rss-limit-bytes must be a positive integer, got 'lots'/);
      return true;
    });
  });

  it('a call that grows it past the limit fails as retryable and the supervisor starts a fresh engine', { timeout: 180_000 }, async () => {
    const events: Record<string, unknown>[] = [];
    // An idle engine holds ~620 MiB (PyPI's torch loads its CUDA libraries even on CPU); a model of 51M parameters (vocabulary 200,000 × width 256)
    // allocates θ, m and v (3 × 205 MiB) at InitModel.
    const supervisor = new EngineSupervisor({
      device: 'cpu',
      command: engineCommand('pytorch'),
      extraArgs: ['--rss-limit-bytes', String(1000 * MiB)],
      quiet: true,
      log: (e) => events.push(e),
    });
    try {
      await supervisor.start();
      const pid = supervisor.pid;
      const small = {
        family: 'transformer',
        vocabSize: 64,
        width: 16,
        layers: 1,
        heads: 4,
        kvHeads: 1,
        mlpWidth: 32,
        maxSeq: 16,
        positions: 'rope',
        norm: 'rmsnorm',
        mlp: 'swiglu',
      };
      await supervisor.client().initModel({ modelKey: 'small', spec: small, seed: 1 }); // under the limit: fine
      await assert.rejects(
        supervisor.client().initModel({ modelKey: 'big', spec: { ...small, vocabSize: 200_000, width: 256, heads: 4, mlpWidth: 64 }, seed: 1 }),
        (e: unknown) => e instanceof EngineError && e.transient,
      );
      const fresh = await supervisor.waitForRestart(pid);
      assert.notEqual(supervisor.pid, pid);
      assert.equal(supervisor.restartCount, 1);
      const exited = events.find((e) => e.event === 'engine_exited');
      assert.equal(exited?.signal, 'SIGKILL', JSON.stringify(events));
      // the fresh engine is empty and works
      assert.equal((await fresh.initModel({ modelKey: 'small', spec: small, seed: 1 })).version, 0);
    } finally {
      await supervisor.stop();
    }
  });
});
