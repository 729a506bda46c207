// A killed `npm test` leaves its stacks behind; the next run sweeps them (tools/test-runs.ts).
// Owners are real processes that claim a run folder and start a stack with the run's
// environment (a real Temporal dev server, a temp folder); one owner is SIGKILLed, as a killed
// `npm test` is, the other lives on, as a concurrent run does.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createInterface } from 'node:readline';
import { after, test } from 'node:test';
import { markedProcesses, pidAlive as pidExists } from '../../../stack/processes';
import { sweepStaleTestRuns } from '../../../tools/test-runs';

/** Alive and not a zombie (an ended process whose parent has not reaped it yet). */
function pidAlive(pid: number): boolean {
  try {
    return pidExists(pid) && !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

const repo = path.resolve(__dirname, '../../..');
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-sweep-'));
const owners: ChildProcess[] = [];
after(async () => {
  for (const o of owners) if (o.exitCode === null) o.kill('SIGKILL');
  await new Promise((r) => setTimeout(r, 200));
  await sweepStaleTestRuns(root).catch(() => undefined);
  fs.rmSync(root, { recursive: true, force: true });
});

// The stack: with `temporal`, a real dev server (testing/temporal.ts) as the tests start them.
const stackScript = (temporal: boolean) => `
  const fs = require('node:fs'), os = require('node:os'), path = require('node:path');
  (async () => {
    ${temporal ? `await require(${JSON.stringify(path.join(repo, 'testing/temporal.ts'))}).startTemporal();` : ''}
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-stack-'));
    console.log(JSON.stringify({ stack: process.pid, tmp }));
    setInterval(() => undefined, 1000);
  })();`;

// The owner: claims a run folder under the test's root and starts the stack in the run's environment.
const ownerScript = (temporal: boolean) => `
  const { claimTestRun, testRunEnv } = require(${JSON.stringify(path.join(repo, 'tools/test-runs.ts'))});
  const dir = claimTestRun(${JSON.stringify(root)});
  console.log(JSON.stringify({ dir }));
  require('node:child_process').spawn(process.execPath, ['--import', 'tsx', '-e', ${JSON.stringify(stackScript(temporal))}], {
    cwd: ${JSON.stringify(repo)}, env: testRunEnv(dir), stdio: ['ignore', 'inherit', 'inherit'],
  });
  setInterval(() => undefined, 1000);`;

async function startOwner(temporal: boolean): Promise<{ owner: ChildProcess; dir: string; stack: number; tmp: string }> {
  const owner = spawn(process.execPath, ['--import', 'tsx', '-e', ownerScript(temporal)], { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] });
  owners.push(owner);
  const seen: Record<string, unknown> = {};
  for await (const line of createInterface({ input: owner.stdout! })) {
    if (line.startsWith('{')) Object.assign(seen, JSON.parse(line));
    if (seen.stack) break;
  }
  return { owner, dir: seen.dir as string, stack: seen.stack as number, tmp: seen.tmp as string };
}

test('a killed run’s stack is ended and its folder removed; a live run’s stack is untouched', async () => {
  const dead = await startOwner(true);
  const live = await startOwner(false);
  assert.ok(dead.tmp.startsWith(dead.dir + path.sep), `the stack's temp folder ${dead.tmp} is inside its run's ${dead.dir}`);

  const deadProcs = markedProcesses(dead.dir, undefined, { nested: true });
  const pids = deadProcs.map((p) => p.pid);
  assert.ok(pids.includes(dead.stack), `the stack process is marked as the run's: ${JSON.stringify(deadProcs)}`);
  assert.ok(
    deadProcs.some((p) => p.argv.some((a) => a === 'start-dev')),
    `the Temporal dev server is marked as the run's: ${JSON.stringify(deadProcs.map((p) => p.argv.slice(0, 3)))}`,
  );
  const liveProcs = markedProcesses(live.dir, undefined, { nested: true }).map((p) => p.pid);
  assert.ok(liveProcs.includes(live.stack));

  dead.owner.kill('SIGKILL');
  await new Promise((r) => dead.owner.once('exit', r));
  assert.ok(pidAlive(dead.stack), 'the stack outlives its killed owner (what the sweep is for)');

  const swept = await sweepStaleTestRuns(root);
  assert.deepEqual(
    swept.map((s) => s.dir),
    [dead.dir],
  );
  const ended = swept[0]!.ended.map((p) => p.pid);
  for (const pid of pids) assert.ok(ended.includes(pid), `pid ${pid} was ended by the sweep: ${JSON.stringify(ended)}`);
  for (const pid of pids) assert.equal(pidAlive(pid), false, `pid ${pid} of the killed run is gone`);
  assert.equal(fs.existsSync(dead.dir), false, 'the killed run’s folder is removed');

  for (const pid of [live.owner.pid!, ...liveProcs]) assert.ok(pidAlive(pid), `pid ${pid} of the live run still runs`);
  assert.ok(fs.existsSync(live.tmp), 'the live run’s folder is kept');

  // once its owner is gone too, the next sweep takes it
  live.owner.kill('SIGKILL');
  await new Promise((r) => live.owner.once('exit', r));
  assert.deepEqual(
    (await sweepStaleTestRuns(root)).map((s) => s.dir),
    [live.dir],
  );
  for (const pid of liveProcs) assert.equal(pidAlive(pid), false);
});
