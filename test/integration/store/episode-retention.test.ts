/**
 * Episode retention (issue #49) on a real run, real Temporal and real PostgreSQL: a short math
 * run trains, then a rollout of a next step is stored and not committed, and the run is marked
 * failed (what a run that failed in that step's update leaves: its resume point is that step). `troupe gc --dry-run` with an episode window
 * prints what would go and deletes nothing; a bad flag value is refused naming the flag;
 * `troupe gc` deletes exactly the training episodes outside the window and the sample, with their
 * turns, tool calls, rewards and journal, and the partial rollouts' working state of committed
 * steps, and keeps every eval episode and the unfinished step;
 * the dashboard's run API and run page report the counts; a second pass prunes nothing; the background loop
 * prunes what a wider policy would and reports it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { gatewayJournal } from '../../../activities/store/gateway-journal';
import { inSample } from '../../../activities/store/episode-retention';
import { EpisodeRetentionLoop } from '../../../activities/store/retention-loop';
import { loadStepEpisodes, saveEpisodes } from '../../../activities/store/trajectories';
import { resumePoint } from '../../../activities/training/resume';
import { getRunDetail } from '../../../dashboard/api';
import { startDashboard } from '../../../dashboard/server';
import type { trainingRun } from '../../../workflows';
import { startHarness, type Harness } from '../../../testing/stack';
import { freePort } from '../../helpers';
import { troupe } from '../../helpers/cli';
import { browserSkipReason, launchBrowser } from '../dashboard/browser';

const RUN = 'retention';
const STEPS = 4;

interface Row {
  episode_id: string;
  step: number;
  split: string;
  turns: number;
  calls: number;
  rewards: number;
}

describe('episode retention', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.shutdown());

  /** Every episode of the run with its child rows, by id. */
  const stored = async (): Promise<Map<string, Row>> => {
    const rows = await h.db.sql<Row[]>`
      SELECT e.episode_id, e.step, e.split,
        (SELECT count(*)::int FROM turns t WHERE t.episode_id = e.episode_id) AS turns,
        (SELECT count(*)::int FROM tool_calls c WHERE c.episode_id = e.episode_id) AS calls,
        (SELECT count(*)::int FROM rewards r WHERE r.episode_id = e.episode_id) AS rewards
      FROM episodes e WHERE e.run_id = ${RUN}`;
    return new Map(rows.map((r) => [r.episode_id, { ...r }]));
  };
  /** The steps of the run's carried episodes (into) and stored partial rollout results. */
  const workingState = async () => ({
    carried: (await h.db.sql`SELECT into_step FROM carried_episodes WHERE run_id = ${RUN} ORDER BY into_step`).map((r) => r.into_step as number),
    partial: (await h.db.sql`SELECT step FROM partial_rollouts WHERE run_id = ${RUN} ORDER BY step`).map((r) => r.step as number),
  });
  const journalRows = async () =>
    (await h.db.sql`SELECT episode_id FROM gateway_calls WHERE run_id = ${RUN} ORDER BY episode_id`).map((r) => r.episode_id as string);
  const orphans = async () =>
    (
      await h.db.sql`
      SELECT (SELECT count(*) FROM turns t WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = t.episode_id))::int
           + (SELECT count(*) FROM tool_calls t WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = t.episode_id))::int
           + (SELECT count(*) FROM rewards t WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.episode_id = t.episode_id))::int AS n`
    )[0]?.n as number;

  const gc = async (...args: string[]) => {
    const r = await troupe(['gc', ...args], { ...process.env, DATABASE_URL: h.db.url, TROUPE_CHECKPOINT_DIR: h.db.checkpoints.dir });
    return { code: r.code, out: r.stdout, err: r.stderr };
  };

  let initial: Map<string, Row>;
  let expectedKept: Set<string>;

  it('a trained run, plus an uncommitted rollout of its next step and a journal', async () => {
    const config = { team: 'math', steps: STEPS, groupsPerStep: 2, groupSize: 4, evalEvery: 2, evalTasks: 2, seed: 49 };
    const summary = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', { taskQueue: h.taskQueue, workflowId: RUN, args: [config] });
    assert.equal(summary.steps, STEPS);
    // The rollout of step 4 stored, its update not committed: the resume point is step 4.
    const last = await loadStepEpisodes(h.db.sql, RUN, STEPS - 1, 'train');
    await saveEpisodes(
      h.db.sql,
      last.map((e) => ({
        ...e,
        meta: { ...e.meta, step: STEPS, episodeId: `${e.meta.episodeId}-next` },
        trajectory: { ...e.trajectory, episodeId: `${e.meta.episodeId}-next` },
      })),
    );
    assert.equal((await resumePoint(h.db.sql, RUN, ['policy'])).startStep, STEPS);
    // as a run that failed in that step's update is marked: it can resume, so gc keeps its journal
    await h.db.sql`UPDATE runs SET status = 'failed' WHERE run_id = ${RUN}`;
    // Partial rollouts' working state, as such a run leaves it (math trains without them; the
    // rule looks at steps only): an episode carried into each step 1..4, a result per step 0..4.
    for (let step = 0; step <= STEPS; step++) {
      await h.db.sql`INSERT INTO partial_rollouts (run_id, step, result) VALUES (${RUN}, ${step}, ${h.db.sql.json({ episodes: 8 })})`;
      if (step > 0)
        await h.db.sql`INSERT INTO carried_episodes (run_id, into_step, episode_id, from_step, carries, spec, generations)
          VALUES (${RUN}, ${step}, ${`carried-${step}`}, ${step - 1}, 1, ${h.db.sql.json({ step: step - 1 })}, ${h.db.sql.json([])})`;
    }
    initial = await stored();
    // a journaled gateway call of an episode of step 0 and of one of the uncommitted step
    const byStep = (s: number) => [...initial.values()].filter((r) => r.step === s && r.split === 'train').map((r) => r.episode_id);
    const journal = gatewayJournal(h.db.sql, RUN);
    for (const id of [byStep(0)[0], byStep(STEPS)[0]])
      if (id) await journal.record(id, { index: 0, agent: 'solver', requestHash: 'h', tokens: [1], logprobs: [-0.5], stopReason: 'eos', durationMs: 1 });
    // keep the last 2 steps (3 and 4; newest train step is 4) and a 25% sample of the rest; evals always
    expectedKept = new Set(
      [...initial.values()].filter((r) => r.split === 'eval' || r.step >= STEPS - 1 || inSample(r.episode_id, 0.25)).map((r) => r.episode_id),
    );
    const evals = [...initial.values()].filter((r) => r.split === 'eval').length;
    const sampled = [...initial.values()].filter((r) => r.split === 'train' && r.step < STEPS - 1 && inSample(r.episode_id, 0.25)).length;
    assert.ok(evals > 0, 'the run has eval episodes');
    assert.ok(sampled > 0 && sampled < 24, `the sample keeps some of the 24 old training episodes, not all (${sampled})`);
    assert.ok([...initial.values()].every((r) => r.turns > 0));
  });

  it('troupe gc refuses a bad episode flag value, naming the flag, and deletes nothing', async () => {
    for (const [args, flag] of [
      [['--episodes-sample', '1.5'], /--episodes-sample: must be a fraction from 0 to 1 \(got 1\.5\)/],
      [['--episodes-keep-steps', '0'], /--episodes-keep-steps: must be a whole number of steps >= 1/],
      [['--episodes-keep-days', 'soon'], /--episodes-keep-days/],
    ] as const) {
      const r = await gc(...args);
      assert.notEqual(r.code, 0, r.out);
      assert.match(r.err, flag);
    }
    assert.deepEqual(await stored(), initial);
  });

  it('troupe gc --dry-run prints what would go and deletes nothing', async () => {
    const r = await gc('--dry-run', '--episodes-keep-steps', '2', '--episodes-sample', '0.25');
    assert.equal(r.code, 0, r.err);
    const going = [...initial.values()].filter((e) => !expectedKept.has(e.episode_id));
    const turns = going.reduce((n, e) => n + e.turns, 0);
    assert.match(
      r.out,
      new RegExp(
        `would prune ${going.length} training episode\\(s\\) of ${RUN} \\(${turns} turn\\(s\\), steps 0-${STEPS - 2}\\); ` +
          `would delete ${STEPS - 1} carried episode\\(s\\) and ${STEPS} partial rollout result\\(s\\) of committed steps`,
      ),
    );
    assert.deepEqual(await stored(), initial);
    assert.deepEqual(await workingState(), { carried: [1, 2, 3, 4], partial: [0, 1, 2, 3, 4] });
    assert.equal((await journalRows()).length, 2);
    assert.equal((await getRunDetail(h.db.sql, RUN, new URLSearchParams())).retention, null);
  });

  it('troupe gc deletes exactly the episodes outside the window and sample, with their rows; the run API says so', async () => {
    const r = await gc('--episodes-keep-steps', '2', '--episodes-sample', '0.25');
    assert.equal(r.code, 0, r.err);
    const remaining = await stored();
    assert.deepEqual([...remaining.keys()].sort(), [...expectedKept].sort());
    for (const [id, row] of remaining) assert.deepEqual(row, initial.get(id), `${id} kept whole`);
    assert.equal(await orphans(), 0, 'no turn, tool call or reward of a pruned episode is left');
    const going = [...initial.values()].filter((e) => !expectedKept.has(e.episode_id));
    const turns = going.reduce((n, e) => n + e.turns, 0);
    // the journal of the step-0 episode went with it (unless the sample kept it); the uncommitted step's stays
    const journaledStep0 = [...initial.values()].find((e) => e.step === 0 && e.split === 'train');
    const journalGone = journaledStep0 && !expectedKept.has(journaledStep0.episode_id) ? 1 : 0;
    assert.match(r.out, new RegExp(`pruned ${going.length} training episode\\(s\\) of ${RUN} \\(${turns} turn\\(s\\), ${journalGone} journaled call\\(s\\)`));
    // the working state of the committed steps 0..3 went; the resume step's (carried into 4, result of 4) stays
    assert.match(r.out, new RegExp(`; deleted ${STEPS - 1} carried episode\\(s\\) and ${STEPS} partial rollout result\\(s\\) of committed steps`));
    assert.deepEqual(await workingState(), { carried: [STEPS], partial: [STEPS] });
    const detail = await getRunDetail(h.db.sql, RUN, new URLSearchParams());
    assert.ok(detail.retention);
    assert.equal(detail.retention.trainEpisodes, going.length);
    assert.equal(detail.retention.turns, turns);
    assert.equal(detail.retention.gatewayCalls, journalGone);
    assert.equal(detail.retention.policy, 'keep evals, the last 2 step(s), a 25% sample by episode id');
  });

  it("the run's dashboard page says how many training episodes were pruned, by which policy", { skip: browserSkipReason() }, async () => {
    const r = (await getRunDetail(h.db.sql, RUN, new URLSearchParams())).retention;
    assert.ok(r);
    const dash = await startDashboard({ sql: h.db.sql, port: await freePort(), temporalAddress: h.env.address, namespace: h.env.namespace ?? 'default' });
    const browser = await launchBrowser();
    try {
      const page = await browser.context.newPage();
      await page.goto(`${dash.url}/#/runs/${RUN}`);
      await page.waitForSelector('#retention');
      const text = await page.locator('#retention').innerText();
      assert.ok(
        text.startsWith(
          `${r.trainEpisodes} training episode(s) pruned (${r.turns} turn(s); policy: keep evals, the last 2 step(s), a 25% sample by episode id;`,
        ),
        text,
      );
    } finally {
      await browser.close();
      await dash.close();
    }
  });

  it('a second pass prunes nothing; the background loop applies a narrower policy and never touches evals or the resume step', async () => {
    const again = await gc('--episodes-keep-steps', '2', '--episodes-sample', '0.25');
    assert.equal(again.code, 0, again.err);
    assert.doesNotMatch(again.out, /pruned \d+ training episode/);
    const kept = await stored();
    const counted = (await getRunDetail(h.db.sql, RUN, new URLSearchParams())).retention?.trainEpisodes ?? 0;

    const lines: string[] = [];
    const passed = new Promise<unknown[]>((resolve, reject) => {
      const loop = new EpisodeRetentionLoop(
        h.db.sql,
        { sample: 0 },
        {
          intervalMs: 3_600_000,
          batchSize: 3,
          log: (l) => lines.push(l),
          onPass: (pruned, error) => void loop.stop().then(() => (error ? reject(error as Error) : resolve(pruned))),
        },
      );
      loop.start();
    });
    await passed;
    const left = await stored();
    // only evals and the uncommitted step remain; everything else of steps 0..3 went, in batches of 3
    assert.deepEqual(
      [...left.keys()].sort(),
      [...kept.values()]
        .filter((r) => r.split === 'eval' || r.step >= STEPS)
        .map((r) => r.episode_id)
        .sort(),
    );
    const second = [...kept.values()].filter((r) => r.split === 'train' && r.step < STEPS).length;
    assert.ok(
      lines.some((l) => l.includes(`troupe retention: pruned ${second} training episode(s) of ${RUN}`)),
      lines.join('\n'),
    );
    const detail = await getRunDetail(h.db.sql, RUN, new URLSearchParams());
    assert.equal(detail.retention?.trainEpisodes, counted + second);
    assert.equal(detail.retention?.policy, 'keep evals');
    assert.deepEqual(await journalRows(), [[...initial.values()].find((e) => e.step === STEPS && e.split === 'train')?.episode_id]);
    assert.equal(await orphans(), 0);
  });
});
