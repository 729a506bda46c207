/**
 * The supervised stage (run config sft, issue #48) on a real Temporal server, PostgreSQL and the built-in
 * engine: a math teacher trains briefly; an SFT run of a fresh model on the teacher's rewarded turns
 * (minReward 1: the solver's right answers, the verifier's right verdicts) lowers its cross-entropy on them
 * step after step and answers more held-out tasks right than at its step 0, and troupe status names its source; a source that is not in the
 * store is refused naming sft.from.run, and no run is stored. An SFT run on a JSONL file of conversations
 * trains the agents the file names.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { innermostCause } from '../../../control/runs';
import { errorMessage } from '../../../infra/errors';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';
import { troupe } from '../../helpers/cli';

describe('sft', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });
  const run = (config: Record<string, unknown>) =>
    h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: String(config.runId), args: [config] });

  it("trains a fresh model on a teacher's rewarded turns: its cross-entropy falls and its eval improves", async (t) => {
    await run({ team: 'math', runId: 'teacher', steps: 2, groupsPerStep: 8, groupSize: 8, evalEvery: 0, evalTasks: 1 });
    const steps = 6;
    const sft = await run({
      team: 'math',
      runId: 'student',
      steps,
      seed: 1,
      evalEvery: 0,
      evalTasks: 40,
      sft: { from: { run: 'teacher', minReward: 1 }, batch: 64 },
    }).catch((e: unknown) => assert.fail(`the SFT run failed: ${errorMessage(innermostCause(e))}`));
    assert.equal(sft.status, 'completed');
    assert.deepEqual(sft.versions, { policy: steps });
    assert.equal(sft.failedEpisodes, 0);

    const ce = async (scope: string, kind = 'train') =>
      (await h.db.sql`SELECT step, value FROM metrics WHERE run_id = 'student' AND kind = ${kind} AND scope = ${scope} AND name = 'sft.ce' ORDER BY step`).map(
        (r) => Number(r.value),
      );
    for (const [scope, kind] of [
      ['solver', 'train'],
      ['verifier', 'train'],
      ['policy', 'update'],
    ] as const) {
      const curve = await ce(scope, kind);
      t.diagnostic(`${kind} ${scope} sft.ce: ${curve.map((x) => x.toFixed(3)).join(' ')}`);
      assert.equal(curve.length, steps, `${kind} ${scope} sft.ce at every step`);
      assert.ok(curve[steps - 1]! < curve[0]! * 0.8, `${scope}'s cross-entropy falls: ${curve.map((x) => x.toFixed(3)).join(' ')}`);
    }
    // no episode of its own: the steps train on the teacher's turns
    const [own] = await h.db.sql`SELECT count(*)::int AS n FROM episodes WHERE run_id = 'student' AND split = 'train'`;
    assert.equal(own?.n, 0);

    // troupe status says what the run trains on
    const state = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-sft-status-'));
    try {
      const env = { ...process.env, TROUPE_STATE_DIR: state, TEMPORAL_ADDRESS: h.env.address, DATABASE_URL: h.db.url, TROUPE_DEBUG: '' };
      const status = await troupe(['status', 'student'], env);
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, /^ {2}SFT from run teacher \(train episodes, completed, turn reward >= 1\), 64 turns a step$/m);
    } finally {
      fs.rmSync(state, { recursive: true, force: true });
    }

    const correct = (e: typeof sft.initialEval) => e?.rewards.solver?.correct ?? 0;
    t.diagnostic(
      `eval: solver correct ${correct(sft.initialEval)} -> ${correct(sft.finalEval)}, success ${sft.initialEval?.success} -> ${sft.finalEval?.success}`,
    );
    assert.equal(sft.initialEval?.episodes, 40);
    assert.ok(
      correct(sft.finalEval) > correct(sft.initialEval),
      `the solver answers more held-out tasks right: ${correct(sft.initialEval)} -> ${correct(sft.finalEval)}`,
    );
  });

  it('trains on a JSONL file of conversations', async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-sft-'));
    try {
      const file = path.join(dir, 'calculator.jsonl');
      // the solver types '=' (the calculator shows the sum): what the teacher's rewarded solver turns teach
      const lines = [...Array(20).keys()].map((i) =>
        JSON.stringify({
          agent: 'solver',
          messages: [
            { role: 'user', content: `${i}+${2 * i}` },
            { role: 'assistant', content: '=' },
          ],
        }),
      );
      fs.writeFileSync(file, lines.join('\n'));
      const res = await run({ team: 'math', runId: 'from-jsonl', steps: 3, evalEvery: 0, evalTasks: 1, sft: { jsonl: file, batch: 8 } }).catch((e: unknown) =>
        assert.fail(`the SFT run failed: ${errorMessage(innermostCause(e))}`),
      );
      assert.deepEqual([res.status, res.versions], ['completed', { policy: 3 }]);
      const curve = (
        await h.db.sql`SELECT value FROM metrics WHERE run_id = 'from-jsonl' AND kind = 'train' AND scope = 'solver' AND name = 'sft.ce' ORDER BY step`
      ).map((r) => Number(r.value));
      t.diagnostic(`solver sft.ce: ${curve.map((x) => x.toFixed(3)).join(' ')}`);
      assert.equal(curve.length, 3);
      assert.ok(curve[2]! < curve[0]!, 'the cross-entropy falls');
      const [verifier] = await h.db.sql`SELECT count(*)::int AS n FROM metrics WHERE run_id = 'from-jsonl' AND scope = 'verifier' AND name = 'sft.ce'`;
      assert.equal(verifier?.n, 0, 'no verifier turn in the file: none trained');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a source that is not in the store, naming sft.from.run, and stores no run', async () => {
    await assert.rejects(run({ team: 'math', runId: 'orphan', steps: 1, sft: { from: { run: 'nope' } } }), (e: unknown) => {
      assert.ok(e instanceof WorkflowFailedError);
      assert.equal(errorMessage(innermostCause(e)), 'sft.from.run: no run nope in the store');
      return true;
    });
    assert.equal((await h.db.sql`SELECT 1 FROM runs WHERE run_id = 'orphan'`).length, 0);
  });
});
