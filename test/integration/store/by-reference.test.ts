/**
 * Weights by reference: a run whose model is above the inline limit (set to 0
 * here) keeps every version in the checkpoint store's files; the engine loads
 * them by file:// reference after a restart, the run resumes after a crash and
 * ends bit-identical to an uninterrupted one; an engine that cannot read the
 * reference (another host) is sent the bytes instead.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { defaultSampling } from '../../../agents/agent';
import { createTrainingPoolActivities } from '../../../activities/training/pool';
import { getVersion, listVersions, locateVersion } from '../../../activities/store/versions';
import { resumeRun } from '../../../control/runs';
import { ReferenceUnreadableError } from '../../../engines/protocol/client';
import { CheckpointStore, type BlobRef } from '../../../infra/checkpoint-store';
import type { GenerateReply } from '../../../agents/episode';
import { statusQuery } from '../../../workflows/definitions';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('weights by reference', () => {
  let h: Harness;
  const previous = process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES;
  before(async () => {
    process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES = '0';
    h = await startHarness();
  });
  after(async () => {
    if (previous === undefined) delete process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES;
    else process.env.TROUPE_CHECKPOINT_INLINE_MAX_BYTES = previous;
    await h?.shutdown();
  });

  it('a model too big for inline storage trains, survives an engine restart and a crash, and resumes bit-identical', async () => {
    assert.equal(h.db.checkpoints.inlineMaxBytes, 0);
    const config = { team: 'math', steps: 4, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 4, seed: 21 };
    const first = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: 'by-ref', args: [config] });
    for (;;) {
      if ((await first.query(statusQuery)).step >= 2) break;
      await sleep(200);
    }
    await first.terminate('test: simulated crash');
    // A fresh engine holds nothing: every version the run needs now comes from the files.
    await h.restartPool();
    const summary = await (await resumeRun(h.env.client, h.db.sql, h.taskQueue, 'by-ref')).result();
    assert.equal(summary.status, 'completed');
    const clean = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
      taskQueue: h.taskQueue,
      workflowId: 'by-ref-clean',
      args: [config],
    });
    assert.equal(clean.steps, 4);
    const versions = await listVersions(h.db.sql, 'by-ref');
    assert.equal(versions.length, 5);
    for (const v of versions) {
      const [resumed, twin] = await Promise.all(
        ['by-ref', 'by-ref-clean'].map(async (run) => {
          assert.equal((await locateVersion(h.db.sql, run, 'policy', v.version))!.bytes.kind, 'files', `${run} v${v.version} stored by reference`);
          return (await getVersion(h.db.sql, h.db.checkpoints, run, 'policy', v.version))!;
        }),
      );
      assert.deepEqual(resumed!.weights, twin!.weights, `v${v.version}: weights bit-identical`);
      assert.deepEqual(resumed!.optimizerState, twin!.optimizerState, `v${v.version}: optimizer state bit-identical`);
    }
  });

  it('the engine checks a reference; an engine that cannot read it is sent the bytes', async () => {
    const stored = (await locateVersion(h.db.sql, 'by-ref', 'policy', 4))!;
    const bytes = stored.bytes;
    if (bytes.kind !== 'files') assert.fail(`v4 is ${bytes.kind}, not in files`);
    const store = h.db.checkpoints;
    const engine = h.pool.getClient();
    const ref = (b: BlobRef) => ({ uri: store.uri(b.file), size: b.size, sha256: b.sha256 });
    const info = await engine.loadVersion({
      modelKey: 'by-ref-check',
      version: 4,
      spec: stored.spec as never,
      weightsRef: ref(bytes.weights),
      optimizerStateRef: ref(bytes.optimizer),
    });
    assert.equal(info.weightsSha256, stored.sha256);
    await assert.rejects(
      engine.loadVersion({ modelKey: 'by-ref-check', version: 5, spec: stored.spec as never, weightsRef: { ...ref(bytes.weights), sha256: '0'.repeat(64) } }),
      (e: Error) => e instanceof ReferenceUnreadableError && e.message.includes(store.absolute(bytes.weights.file)),
    );

    // A pool whose engine does not share the path (its URIs lead nowhere there): the bytes go over gRPC.
    class ElsewhereStore extends CheckpointStore {
      override uri(file: string) {
        return `file:///nonexistent-host-path/${file}`;
      }
    }
    await h.restartPool();
    const elsewhere = new ElsewhereStore({ dir: store.dir, inlineMaxBytes: 0 });
    const pool = createTrainingPoolActivities({ sql: h.db.sql, engine: () => h.pool.getClient(), checkpoints: elsewhere });
    const call = { model: 'policy', version: 4, context: [1, 2, 3], maxTokens: 4, stopTokens: [], sampling: defaultSampling, seed: 5 };
    const reply: GenerateReply = await new MockActivityEnvironment().run(pool.generateTurn, { team: 'math', teamOptions: {}, runId: 'by-ref', call });
    assert.equal(reply.tokens.length > 0, true);
    // The same call on an engine that loaded by reference gives the same tokens.
    await h.restartPool();
    const direct = createTrainingPoolActivities({ sql: h.db.sql, engine: () => h.pool.getClient(), checkpoints: store });
    assert.deepEqual(await new MockActivityEnvironment().run(direct.generateTurn, { team: 'math', teamOptions: {}, runId: 'by-ref', call }), reply);
  });
});
