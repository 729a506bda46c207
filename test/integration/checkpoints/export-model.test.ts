/**
 * troupe export-model against a real PostgreSQL store: a pretrained
 * checkpoint stored as a run's version 0 (as the engine exports it: float32
 * weights bytes) and a changed version 1 are written as HF directories that
 * load back bit-identical; bad requests get messages naming what is wrong.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { saveInitialVersion } from '../../../activities/store/versions';
import { exportModelVersion } from '../../../activities/store/model-export';
import { loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { encodeWeights } from '../../../engines/protocol/version-bytes';
import { type TroupeError } from '../../../infra/errors';
import { createTestDatabase, type TestDatabase } from '../../helpers';
import { sameBits } from '../../unit/engine/helpers';

const FIXTURE = path.join(__dirname, '../../fixtures/hf/qwen2-tiny');
const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-export-'));

describe('troupe export-model', () => {
  let db: TestDatabase;
  const ckpt = loadHfCheckpoint(FIXTURE);
  const trained = ckpt.theta.map((x, i) => x + (i % 7) * 1e-3);

  before(async () => {
    db = await createTestDatabase();
    await db.sql`INSERT INTO runs (run_id, team, config) VALUES ('r1', 'chat', '{}')`;
    for (const [version, theta] of [
      [0, ckpt.theta],
      [1, trained],
    ] as const) {
      const weights = encodeWeights(theta);
      const sha256 = createHash('sha256').update(weights).digest('hex');
      if (version === 0)
        await saveInitialVersion(db.sql, db.checkpoints, { runId: 'r1', model: 'policy', spec: ckpt.spec, weights, optimizerState: new Uint8Array(0), sha256 });
      else
        await db.sql`INSERT INTO versions (run_id, model, version, step, spec, weights, optimizer_state, sha256) VALUES ('r1', 'policy', 1, 0, ${db.sql.json(ckpt.spec as never)}, ${weights}, ${new Uint8Array(0)}, ${sha256})`;
    }
  });
  after(async () => db?.drop());

  it('version 0 of a pretrained model exports back to the checkpoint: same config, same θ, same dtype', async () => {
    const out = path.join(tmp(), 'v0');
    const r = await exportModelVersion(db.sql, db.checkpoints, { runId: 'r1', model: 'policy', version: 0, out, from: FIXTURE });
    assert.equal(r.dtype, 'F16');
    const back = loadHfCheckpoint(out);
    assert.deepEqual(back.spec, ckpt.spec);
    assert.ok(sameBits(back.theta, ckpt.theta));
    assert.deepEqual(back.config, ckpt.config);
  });

  it('a trained version exports as F32 and reloads bit-identical, also without the source directory', async () => {
    const out = path.join(tmp(), 'v1');
    assert.equal((await exportModelVersion(db.sql, db.checkpoints, { runId: 'r1', model: 'policy', version: 1, out })).dtype, 'F32');
    const back = loadHfCheckpoint(out);
    assert.ok(sameBits(back.theta, trained));
    assert.equal(back.model.modelType, 'llama', 'without the source config a rope model is written as llama');
  });

  it('names what is wrong', async () => {
    await assert.rejects(
      exportModelVersion(db.sql, db.checkpoints, { runId: 'r1', model: 'policy', version: 5, out: tmp() }),
      (e: TroupeError) => /run r1 has no version 5 of model policy/.test(e.message) && e.hint === 'the run has: policy (versions 0..1)',
    );
    await assert.rejects(exportModelVersion(db.sql, db.checkpoints, { runId: 'r1', model: 'critic', version: 0, out: tmp() }), /no version 0 of model critic/);
    const full = tmp();
    fs.writeFileSync(path.join(full, 'x'), '');
    await assert.rejects(exportModelVersion(db.sql, db.checkpoints, { runId: 'r1', model: 'policy', version: 0, out: full }), /--out .*: not empty/);
  });
});
