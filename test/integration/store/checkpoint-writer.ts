/**
 * A child process for the durability test: commits versions 1, 2, ... of one
 * model through the real store path (files above the inline limit, then the
 * row), continuing after the newest committed one, until it is killed.
 * Prints "writing N" before each commit and "committed N" after it.
 *   env: DATABASE_URL, CKPT_DIR, RUN_ID, WEIGHT_BYTES
 */
import { createRun } from '../../../activities/store/runs';
import { commitUpdate, latestVersions, saveInitialVersion } from '../../../activities/store/versions';
import { CheckpointStore, sha256Hex } from '../../../infra/checkpoint-store';
import { connect } from '../../../infra/db';
import { versionBytes } from './version-bytes';

async function main() {
  const sql = connect(process.env.DATABASE_URL!, { max: 1 });
  const store = new CheckpointStore({ dir: process.env.CKPT_DIR!, inlineMaxBytes: 0 });
  const runId = process.env.RUN_ID!;
  const size = Number(process.env.WEIGHT_BYTES);
  await createRun(sql, { runId, team: 'durability', config: {} });
  const bytesOf = (version: number) => {
    const b = versionBytes(version, size);
    return { weights: b.weights, optimizerState: b.optimizer, sha256: sha256Hex(b.weights) };
  };
  await saveInitialVersion(sql, store, { runId, model: 'policy', spec: {}, ...bytesOf(0) });
  for (let version = ((await latestVersions(sql, runId)).policy?.version ?? 0) + 1; ; version++) {
    const bytes = bytesOf(version);
    process.stdout.write(`writing ${version}\n`);
    await commitUpdate(sql, store, {
      version: { runId, model: 'policy', version, step: version - 1, spec: {}, metrics: {}, ...bytes },
      metrics: [],
      stepMetrics: {},
      settings: {},
    });
    process.stdout.write(`committed ${version}\n`);
  }
}

main().catch((e) => {
  process.stderr.write(`${(e as Error).stack}\n`);
  process.exit(1);
});
