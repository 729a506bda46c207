/**
 * trainingRun end to end against the real stack: short runs of both bundled
 * teams in both rollout modes, invalid configs, and the run's bookkeeping
 * (contiguous versions, one per step, metrics per step and agent).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type WorkflowFailedError } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { workflowBundle } from '../../helpers';
import type { trainingRun } from '../../../workflows';
import { loadStepEpisodes } from '../../../activities/store/trajectories';
import { checkRunBookkeeping, startHarness, type Harness } from '../../../testing/stack';

describe('trainingRun', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.shutdown();
  });

  const cases = [
    { team: 'math', rollout: 'batched', agents: ['solver', 'verifier'], models: ['policy'], teamOptions: {} },
    { team: 'math', rollout: 'durable', agents: ['solver', 'verifier'], models: ['solver', 'verifier'], teamOptions: { models: 'separate' } },
    { team: 'research', rollout: 'batched', agents: ['planner', 'searcher', 'answerer'], models: ['policy'], teamOptions: { models: 'shared' } },
    { team: 'research', rollout: 'durable', agents: ['planner', 'searcher', 'answerer'], models: ['planner', 'searcher', 'answerer'], teamOptions: {} },
  ] as const;
  for (const c of cases) {
    it(`${c.team} with ${c.rollout} rollouts and ${c.models.length} model(s) completes with one version per step and metrics per agent`, async () => {
      const runId = `${c.team}-${c.rollout}-${c.models.length}`;
      const steps = 2;
      const summary = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: runId,
        args: [{ team: c.team, teamOptions: c.teamOptions, steps, groupsPerStep: 3, groupSize: 4, rollout: c.rollout, evalEvery: 1, evalTasks: 6, seed: 5 }],
      });
      assert.equal(summary.status, 'completed');
      assert.equal(summary.steps, steps);
      assert.deepEqual(Object.keys(summary.versions).sort(), [...c.models].sort());
      for (const m of c.models) assert.equal(summary.versions[m], steps);
      assert.equal(summary.initialEval?.episodes, 6);
      assert.equal(summary.finalEval?.step, steps);
      assert.ok(summary.finalEval!.success >= 0 && summary.finalEval!.success <= 1);
      await checkRunBookkeeping(h, runId, steps, [...c.agents], [...c.models]);
      // Each agent's entropy is its own (mean −log p of its sampled tokens in the stored episodes), also when agents share a model.
      const stored = await loadStepEpisodes(h.db.sql, runId, 0, 'train');
      const entropyRows = await h.db.sql`SELECT scope, value FROM metrics WHERE run_id = ${runId} AND step = 0 AND kind = 'train' AND name = 'entropy'`;
      for (const a of c.agents) {
        const nll = stored.flatMap((e) =>
          e.trajectory.turns.filter((t) => t.agent === a).flatMap((t) => t.logprobs.filter((_, k) => t.lossMask[k] === 1).map((lp) => -lp)),
        );
        const recorded = entropyRows.find((r) => r.scope === a)?.value as number;
        assert.ok(Math.abs(recorded - nll.reduce((x, y) => x + y, 0) / nll.length) < 1e-9, `step 0 ${a}: entropy ${recorded}`);
      }
      const [run] = await h.db.sql`SELECT status FROM runs WHERE run_id = ${runId}`;
      assert.equal(run!.status, 'completed');
      // What the Web UI's list and the run's page show.
      const d = await h.env.client.workflow.getHandle(runId).describe();
      const sa = Object.fromEntries(
        d.typedSearchAttributes
          .getAll()
          .filter((p) => p.key.name.startsWith('Troupe'))
          .map((p) => [p.key.name, p.value]),
      );
      assert.deepEqual(sa, {
        TroupeRunId: runId,
        TroupeTeam: c.team,
        TroupeStep: steps,
        TroupeStatus: 'completed',
        TroupeEvalSuccess: summary.finalEval!.success,
      });
      const details =
        (await h.env.client.workflow.getHandle(runId).fetchHistory()).events!.length > 0
          ? await h.env.client.workflow.getHandle(runId).query('__temporal_workflow_metadata')
          : undefined;
      assert.match(String((details as { currentDetails?: string } | undefined)?.currentDetails), new RegExp(`step ${steps}/${steps} \\(completed\\)`));
      // The history replays against the current code, its local activities (planStep, finishStep) included.
      const history = await h.env.client.workflow.getHandle(runId).fetchHistory();
      assert.ok(
        history.events!.some((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity'),
        'step bookkeeping ran as local activities',
      );
      await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, runId);
    });
  }

  it('fails at once, naming each bad field, and starts nothing for an invalid config', async () => {
    await assert.rejects(
      h.env.client.workflow.execute('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: 'bad-config',
        args: [{ team: 'math', steps: -1, rollout: 'warp', optimizer: { agents: { judge: {} } } }],
      }),
      (e: WorkflowFailedError) => {
        const cause = e.cause as Error & { type?: string; nonRetryable?: boolean };
        assert.equal(cause.type, 'InvalidRunConfig');
        assert.equal(cause.nonRetryable, true);
        assert.match(cause.message, /steps: must be >= 0/);
        assert.match(cause.message, /rollout: /);
        return true;
      },
    );
    await assert.rejects(
      h.env.client.workflow.execute('trainingRun', { taskQueue: h.taskQueue, workflowId: 'bad-team', args: [{ team: 'chess' }] }),
      (e: WorkflowFailedError) => /team: unknown team "chess"/.test((e.cause as Error).message),
    );
    const history = await h.env.client.workflow.getHandle('bad-config').fetchHistory();
    assert.equal(history.events!.filter((ev) => ev.activityTaskScheduledEventAttributes || ev.startChildWorkflowExecutionInitiatedEventAttributes).length, 0);
    const [n] = await h.db.sql`SELECT count(*)::int AS n FROM runs WHERE run_id IN ('bad-config', 'bad-team')`;
    assert.equal(n!.n, 0);
  });
});
