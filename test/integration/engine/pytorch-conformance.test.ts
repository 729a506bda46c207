/**
 * The reference PyTorch engine (engines/pytorch) against the engine protocol v2
 * conformance suite, as a pool worker spawns it (`--engine pytorch`): every check
 * passes or is skipped for a reason the engine's capabilities give (it hosts only
 * the transformer family), and `troupe engine-check` says so too.
 *
 * Skips, naming the Debian packages, where the PyTorch engine cannot run.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { formatResult, runConformance } from '../../../engines/conformance';
import { engineCommand } from '../../../processes/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { troupe } from '../../helpers/cli';

const torch = pytorchEngine();
const skip = 'missing' in torch ? torch.missing : false;

/** What the PyTorch engine does not do, by design: each check skips, saying why. */
const EXPECTED_SKIPS = ['health.unlisted-unimplemented', 'init.v1-spec', 'lora.refused'];

describe('the PyTorch engine passes the conformance suite', { skip }, () => {
  let engine: SpawnedEngine;
  before(async () => {
    engine = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: engineCommand('pytorch') });
  });
  after(() => {
    engine?.child.kill('SIGTERM');
  });

  it('every check passes; the skips are the ones its capabilities explain', async () => {
    const rep = await runConformance(engine.listening.address);
    const show = rep.results.map(formatResult).join('\n');
    assert.deepEqual(rep.results.filter((r) => r.status === 'fail').map(formatResult), [], show);
    assert.deepEqual(
      rep.results
        .filter((r) => r.status === 'skip')
        .map((r) => r.id)
        .sort(),
      [...EXPECTED_SKIPS].sort(),
      show,
    );
    assert.match(rep.capabilities?.engine ?? '', /^troupe-pytorch 2/);
    console.log(`pytorch conformance: ${rep.counts.pass} passed, ${rep.counts.fail} failed, ${rep.counts.skip} skipped`);
  });

  it('troupe engine-check reports it and exits 0', async () => {
    const r = await troupe(['engine-check', engine.listening.address], process.env);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout + r.stderr, /engine-check .*: \d+ passed, 0 failed, 3 skipped/);
  });
});
