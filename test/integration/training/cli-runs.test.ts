/**
 * `troupe train | status | export | pause | set | resume | stop` as a user runs them, on a
 * stack of their own with the embedded PostgreSQL (the path a fresh machine takes):
 * - a failed run exits 1 both when `train` brought the stack up itself (cold) and when it
 *   was up (warm); a run that completed without training exits 1 and says why;
 * - a completed run's id is refused before anything says "started", and the run is unchanged;
 * - unknown run ids are named, with a `troupe list` hint, and leave no file behind;
 * - pause, set (every problem of a change at once), resume and stop act on a live run.
 * Tiny runs: one step, one group; group size 1 makes every update skip (no trainable tokens).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { cliStack, troupe } from '../../helpers/cli';
import { freePort } from '../../helpers';

let cleanup: (() => Promise<void>) | undefined;
after(async () => cleanup?.());

const lastJson = (stdout: string) => JSON.parse(stdout.trim().split('\n').at(-1)!);

test('exit status, untrained runs, reused ids, unknown ids and the run controls, through the CLI', async () => {
  const stack = await cliStack({ DATABASE_URL: '', TROUPE_POSTGRES_PORT: String(await freePort()) });
  cleanup = stack.cleanup;
  const config = (name: string, maxStepsWithoutSignal: number) => {
    const file = path.join(stack.stateDir, `${name}.json`);
    fs.writeFileSync(file, JSON.stringify({ evalTasks: 1, maxStepsWithoutSignal }));
    return file;
  };
  const tiny = (runId: string, file: string) => ['train', 'math', '--config', file, '--run-id', runId, '--steps', '1', '--groups', '1', '--group-size', '1', '--eval-every', '0', '--no-plot', '--json'];
  const failing = config('fail', 1);

  // Cold: `train` starts Temporal, the embedded PostgreSQL and the workers itself.
  const cold = await troupe(tiny('cold-fail', failing), stack.env);
  assert.equal(cold.code, 1, cold.stderr + cold.stdout);
  assert.equal(lastJson(cold.stdout).status, 'failed');
  assert.match(cold.stderr, /no trainable signal/);
  assert.match(cold.stderr, /update skipped: policy: no trainable tokens \(1 step\)/);

  // Warm: the same failure with the stack already up.
  const warm = await troupe(tiny('warm-fail', failing), stack.env);
  assert.equal(warm.code, 1, warm.stderr + warm.stdout);
  assert.equal(lastJson(warm.stdout).status, 'failed');

  // Completed, but nothing trained: non-zero, and the summary says why.
  const untrained = await troupe(tiny('untrained', config('untrained', 0)), stack.env);
  assert.equal(untrained.code, 1, untrained.stderr + untrained.stdout);
  const summary = lastJson(untrained.stdout);
  assert.deepEqual([summary.status, summary.trained, summary.versions], ['completed', false, { policy: 0 }]);
  assert.match(untrained.stdout, /update skipped: policy: no trainable tokens \(1 step\)\n {2}never trained: every model is still at version 0/);
  assert.ok(summary.runSeconds > 0 && summary.setupSeconds >= 0 && summary.wallSeconds >= summary.runSeconds);

  // A completed run's id: refused before "started"; the stored run is unchanged.
  const again = await troupe(tiny('untrained', config('untrained', 0)), stack.env);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /run untrained already exists \(completed, team math\)/);
  assert.doesNotMatch(again.stderr, /started run/);
  const status = await troupe(['status', 'untrained', '--json'], stack.env);
  const s = JSON.parse(status.stdout);
  assert.deepEqual([s.stored, s.workflow, s.refusedStart], ['completed', 'COMPLETED', undefined]);
  assert.deepEqual(s.problems.skippedUpdates, [{ model: 'policy', reason: 'no trainable tokens', steps: 1 }]);

  // Unknown ids: named, with the hint, and no file left behind.
  const out = path.join(stack.stateDir, 'nope.jsonl');
  for (const args of [['export', 'nope', '--out', out], ['export-model', 'nope', '--model', 'policy', '--version', '1', '--out', path.join(stack.stateDir, 'nope-model')], ['pause', 'nope'], ['stop', 'nope'], ['set', 'nope', '--lr', '0.01'], ['resume', 'nope']]) {
    const r = await troupe(args, stack.env);
    assert.equal(r.code, 1, args.join(' '));
    assert.match(r.stderr, /troupe: no run nope\n {2}→ list runs with `npx troupe list`/, `${args.join(' ')}: ${r.stderr}`);
  }
  assert.equal(fs.existsSync(out), false, 'export of an unknown run writes no file');

  // The controls on a live run (eval every step keeps it busy long enough).
  const live = await troupe(['train', 'math', '--config', config('live', 0), '--run-id', 'live', '--steps', '200', '--groups', '1', '--group-size', '1', '--detach'], stack.env);
  assert.equal(live.code, 0, live.stderr);
  const pause = await troupe(['pause', 'live'], stack.env);
  assert.equal(pause.code, 0, pause.stderr);
  assert.match(pause.stdout, /run live: pause sent|run live is already paused/);
  const bad = await troupe(['set', 'live', '--json', '{"all": {"lr": -1}, "agents": {"ghost": {}}}'], stack.env);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /invalid optimizer change: all\.lr: must be > 0; agents\.ghost: unknown agent \(team math has: solver, verifier\)/);
  const set = await troupe(['set', 'live', '--lr', '0.0005', '--model', 'policy'], stack.env);
  assert.equal(set.code, 0, set.stderr);
  assert.match(set.stdout, /run live: optimizer change accepted; it takes effect at step \d+/);
  const resume = await troupe(['resume', 'live', '--detach'], stack.env);
  assert.equal(resume.code, 0, resume.stderr);
  assert.match(resume.stderr, /troupe: resumed paused run live at step \d+\/200|troupe: run live is \w+, not paused; sent resume/);
  const stop = await troupe(['stop', 'live'], stack.env);
  assert.equal(stop.code, 0, stop.stderr);
  await troupe(['status', 'live', '--watch'], stack.env);
  const stopped = JSON.parse((await troupe(['status', 'live', '--json'], stack.env)).stdout);
  assert.equal(stopped.stored, 'stopped');
  assert.ok(stopped.events.some((e: { kind: string; detail: { changes?: unknown } }) => e.kind === 'optimizer-changed' && JSON.stringify(e.detail.changes) === '[{"models":{"policy":{"lr":0.0005}}}]'), JSON.stringify(stopped.events));
  const late = await troupe(['pause', 'live'], stack.env);
  assert.equal(late.code, 1);
  assert.match(late.stderr, /pause: run live is stopped/);
});
