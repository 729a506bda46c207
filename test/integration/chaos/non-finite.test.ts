/**
 * The non-finite guard, end to end: a NaN is injected into one step's Update
 * (TROUPE_ENGINE_FAULTS=nan-update:<request id>, engines/onnx/faults.ts),
 * the real update graph turns it into a NaN loss and NaN gradients, the engine
 * refuses the update, nothing is committed for that attempt, the incident is a
 * run event, and the run follows its `nonFinite` policy: `skip` keeps the
 * previous version, `reduce-lr` retries once at lr x 0.1 (and skips if that is
 * non-finite too), `fail` fails the run at once, non-retryably, naming the step
 * and the model.
 */
import { getVersion } from '../../../activities/store/versions';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import { decodeWeights } from '../../../engines/protocol/version-bytes';
import { cpuEngine } from '../../unit/engine/helpers';
import { parseEngineFaults } from '../../../engines/onnx/faults';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';
import { TroupeStatus } from '../../../infra/search-attributes';
import { resumeRun } from '../../../control/runs';

const config = (runId: string, nonFinite: 'skip' | 'reduce-lr' | 'fail') => ({
  team: 'math',
  runId,
  steps: nonFinite === 'fail' ? 4 : 3,
  groupsPerStep: 2,
  groupSize: 4,
  evalEvery: 0,
  evalTasks: 4,
  seed: 3,
  nonFinite,
});

describe('fault hook', () => {
  it('is off unless armed, matches request ids by substring or suffix ($), and rejects unknown faults', () => {
    assert.equal(parseEngineFaults(undefined).nanUpdate('r/policy/step1'), false);
    assert.equal(parseEngineFaults('').nanUpdate('r/policy/step1'), false);
    const f = parseEngineFaults('nan-update:a/policy/step1$, nan-update:b/policy/step2');
    assert.equal(f.nanUpdate('a/policy/step1'), true);
    assert.equal(f.nanUpdate('a/policy/step1/lr0.1'), false, '$ anchors at the end');
    assert.equal(f.nanUpdate('a/policy/step11'), false);
    assert.equal(f.nanUpdate('b/policy/step2/lr0.1'), true, 'without $, a substring');
    assert.throws(() => parseEngineFaults('nan-updat:x'), /TROUPE_ENGINE_FAULTS: unknown fault "nan-updat:x"/);
  });

  it('a poisoned Update is refused by the engine as non-finite (NaN loss from the real graph); the same request unpoisoned succeeds', async () => {
    const spec = { vocabSize: 16, contextWindow: 4, embedDim: 8, hiddenDim: 16 };
    const sample = { context: [1, 2], tokens: [3, 4], lossMask: [1, 1], advantages: [1, -1], oldLogprobs: [-2.7, -2.7], lossWeights: [0.5, 0.5] };
    const poisoned = cpuEngine({ faults: 'nan-update:req-1$' });
    await poisoned.initModel({ modelKey: 'm', spec, seed: 1 });
    await assert.rejects(poisoned.update({ modelKey: 'm', baseVersion: 0, requestId: 'req-1', samples: [sample] }), (e: Error & { reason?: string }) => {
      assert.equal(e.reason, 'NON_FINITE_UPDATE');
      assert.match(e.message, /loss=NaN/);
      return true;
    });
    assert.deepEqual((await poisoned.stats()).models[0]!.versions, [0], 'nothing committed');
    const ok = await poisoned.update({ modelKey: 'm', baseVersion: 0, requestId: 'req-1/lr0.1', samples: [sample] });
    assert.equal(ok.info.version, 1);
  });
});

describe('nonFinite policies in a training run', () => {
  let h: Harness;
  before(async () => {
    // The pool worker's engine child inherits this: step 1 of each run below (step 2 of nf-fail) gets a NaN.
    process.env.TROUPE_ENGINE_FAULTS = ['nf-skip/policy/step1$', 'nf-reduce/policy/step1$', 'nf-reduce-twice/policy/step1', 'nf-fail/policy/step2$']
      .map((p) => `nan-update:${p}`)
      .join(',');
    h = await startHarness();
  });
  after(async () => {
    delete process.env.TROUPE_ENGINE_FAULTS;
    await h?.shutdown();
  });

  const versions = async (runId: string) =>
    Promise.all(
      (await h.db.sql`SELECT version FROM versions WHERE run_id = ${runId} AND model = 'policy' ORDER BY version`).map(async (row) => {
        const r = (await getVersion(h.db.sql, h.db.checkpoints, runId, 'policy', row.version))!;
        return {
          version: r.version,
          step: r.step,
          sha256: r.sha256,
          theta: decodeWeights(r.weights, r.weights.length / 4), // throws on a non-finite weight
          optimizerStep: Buffer.from(r.optimizerState).readUInt32LE(8),
        };
      }),
    );
  const events = async (runId: string) =>
    (await h.db.sql`SELECT step, kind, detail FROM run_events WHERE run_id = ${runId} AND kind IN ('non-finite-update', 'update-skipped') ORDER BY id`).map(
      (e) => ({ step: e.step as number, kind: e.kind as string, detail: e.detail as Record<string, string> }),
    );
  const maxDelta = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i]!)), 0);
  const run = (id: string, policy: 'skip' | 'reduce-lr' | 'fail') =>
    h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: id, args: [config(id, policy)] });

  it('skip: step 1 commits nothing, the run keeps version 1 and trains step 2 from it; the incident is recorded', async () => {
    const summary = await run('nf-skip', 'skip');
    assert.equal(summary.status, 'completed');
    assert.equal(summary.steps, 3);
    assert.equal(summary.versions.policy, 2, 'three steps, one skipped: versions 0, 1, 2');
    const vs = await versions('nf-skip');
    assert.deepEqual(
      vs.map((v) => `${v.version}@${v.step}`),
      ['0@-1', '1@0', '2@2'],
      'no version for step 1',
    );
    assert.equal(vs[2]!.optimizerStep, 2, 'version 2 is the second update applied: the skipped one left no trace in the optimizer state');
    const ev = await events('nf-skip');
    assert.deepEqual(
      ev.map((e) => `${e.kind}@${e.step}`),
      ['non-finite-update@1', 'update-skipped@1'],
    );
    assert.equal(ev[0]!.detail.model, 'policy');
    assert.equal(ev[0]!.detail.policy, 'skip');
    assert.match(ev[0]!.detail.message!, /non-finite.*loss=NaN.*nothing was committed/);
    assert.equal(ev[1]!.detail.reason, 'non-finite');
    // Step 2 rolled out with the kept version 1.
    const used = await h.db
      .sql`SELECT DISTINCT t.version FROM turns t JOIN episodes e USING (episode_id) WHERE e.run_id = 'nf-skip' AND e.step = 2 AND e.split = 'train'`;
    assert.deepEqual(
      used.map((r) => r.version),
      [1],
    );
  });

  it('reduce-lr: step 1 is retried once at lr x 0.1 and committed; a second non-finite result skips the step', async () => {
    const summary = await run('nf-reduce', 'reduce-lr');
    assert.equal(summary.status, 'completed');
    assert.equal(summary.versions.policy, 3);
    const vs = await versions('nf-reduce');
    assert.deepEqual(
      vs.map((v) => `${v.version}@${v.step}`),
      ['0@-1', '1@0', '2@1', '3@2'],
    );
    // AdamW moves each weight by about lr per step early on: step 1 moved ~10x less than steps 0 and 2.
    const d0 = maxDelta(vs[1]!.theta, vs[0]!.theta);
    const d1 = maxDelta(vs[2]!.theta, vs[1]!.theta);
    const d2 = maxDelta(vs[3]!.theta, vs[2]!.theta);
    assert.ok(d1 < 0.3 * d0 && d1 < 0.3 * d2, `step 1 at reduced lr: max |dθ| ${d1} vs ${d0} (step 0) and ${d2} (step 2)`);
    const ev = await events('nf-reduce');
    assert.deepEqual(
      ev.map((e) => `${e.kind}@${e.step}`),
      ['non-finite-update@1'],
    );
    assert.equal(ev[0]!.detail.policy, 'reduce-lr');
    // Before the incident both runs are the same run: the poisoned attempt leaked nothing.
    assert.equal(vs[1]!.sha256, (await versions('nf-skip'))[1]!.sha256);

    const twice = await run('nf-reduce-twice', 'reduce-lr');
    assert.equal(twice.versions.policy, 2);
    assert.deepEqual(
      (await versions('nf-reduce-twice')).map((v) => `${v.version}@${v.step}`),
      ['0@-1', '1@0', '2@2'],
    );
    const ev2 = await events('nf-reduce-twice');
    assert.deepEqual(
      ev2.map((e) => `${e.kind}@${e.step}`),
      ['non-finite-update@1', 'update-skipped@1'],
    );
    assert.equal(ev2[1]!.detail.reason, 'non-finite after reducing lr');
  });

  it('fail: the run fails at once with a non-retryable NonFiniteUpdate naming the step and the model; fixed, `troupe resume` continues it from its last committed step', async () => {
    let failure: unknown;
    await assert.rejects(run('nf-fail', 'fail'), (e) => ((failure = e), e instanceof WorkflowFailedError));
    const activity = (failure as WorkflowFailedError).cause;
    assert.ok(activity instanceof ActivityFailure, `caused by the update activity (${String(activity)})`);
    assert.equal(activity.activityType, 'updateModel');
    const app = activity.cause;
    assert.ok(app instanceof ApplicationFailure);
    assert.equal(app.type, 'NonFiniteUpdate');
    assert.equal(app.nonRetryable, true);
    assert.match(app.message, /^step 2, model policy: non-finite update .*loss=NaN.*nonFinite policy is 'fail'/);
    // Not retried: the one attempt failed.
    const history = await h.env.client.workflow.getHandle('nf-fail').fetchHistory();
    const started = history.events!.filter((e) => e.activityTaskStartedEventAttributes && e.activityTaskStartedEventAttributes.attempt! > 1);
    assert.deepEqual(started, [], 'no activity needed a second attempt');
    assert.deepEqual(
      (await versions('nf-fail')).map((v) => `${v.version}@${v.step}`),
      ['0@-1', '1@0', '2@1'],
    );
    const ev = await events('nf-fail');
    assert.deepEqual(
      ev.map((e) => `${e.kind}@${e.step}`),
      ['non-finite-update@2'],
    );
    assert.equal(ev[0]!.detail.policy, 'fail');
    // The failed run says so: in the store (status and a run-failed event naming the cause) and on the workflow.
    const [row] = await h.db.sql`SELECT status FROM runs WHERE run_id = 'nf-fail'`;
    assert.equal(row!.status, 'failed');
    const [failedEvent] = await h.db.sql`SELECT step, detail FROM run_events WHERE run_id = 'nf-fail' AND kind = 'run-failed'`;
    assert.equal(failedEvent!.step, 2);
    assert.match(String(failedEvent!.detail.cause), /non-finite update/);
    const described = await h.env.client.workflow.getHandle('nf-fail').describe();
    assert.equal(described.typedSearchAttributes.get(TroupeStatus), 'failed');

    // The fix (here: the fault disarmed, the pool worker and its engine restarted), then what
    // `troupe resume nf-fail` does: a new execution that continues from step 2.
    process.env.TROUPE_ENGINE_FAULTS = '';
    await h.restartPool();
    const summary = await (await resumeRun(h.env.client, h.db.sql, h.taskQueue, 'nf-fail')).result();
    assert.equal(summary.status, 'completed');
    assert.equal(summary.steps, 4);
    assert.deepEqual(
      (await versions('nf-fail')).map((v) => `${v.version}@${v.step}`),
      ['0@-1', '1@0', '2@1', '3@2', '4@3'],
      'one version per step, none lost or repeated',
    );
    const executions = await h.db.sql`SELECT start_step FROM run_executions WHERE run_id = 'nf-fail' ORDER BY started_at`;
    assert.deepEqual(
      executions.map((e) => e.start_step),
      [0, 2],
    );
    const [after] = await h.db.sql`SELECT status FROM runs WHERE run_id = 'nf-fail'`;
    assert.equal(after!.status, 'completed');
    // A completed run is not resumed again.
    await assert.rejects(resumeRun(h.env.client, h.db.sql, h.taskQueue, 'nf-fail'), /run nf-fail completed/);
    await assert.rejects(resumeRun(h.env.client, h.db.sql, h.taskQueue, 'no-such-run'), /no run no-such-run in the store/);
  });
});
