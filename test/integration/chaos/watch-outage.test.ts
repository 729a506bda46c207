/**
 * The CLI's watcher rides out a Temporal outage longer than the client's own retries
 * (issue 18 item 2). The watcher's client reaches Temporal through a TCP gate that is closed
 * for 25 s while the run is paused; the workers keep their own connections. Before the fix
 * watchRun threw "Failed to get Workflow execution history" after ~10 s and the CLI called
 * that a bug in Troupe.
 */
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { watchRun } from '../../../control/runs';
import { pauseSignal, resumeSignal, statusQuery } from '../../../workflows/definitions';
import type { trainingRun } from '../../../workflows/training-run';
import { hostPort, tcpGate, type TcpGate } from '../../helpers/tcp-gate';
import { startHarness, type Harness } from '../../../testing/stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let h: Harness;
let gate: TcpGate;
let connection: Connection | undefined;

before(async () => {
  h = await startHarness();
  gate = await tcpGate(hostPort(h.env.address));
  await gate.open();
});
after(async () => {
  await connection?.close().catch(() => undefined);
  await gate?.close();
  await h?.shutdown();
});

it('watchRun keeps watching through a 25 s Temporal outage, says it waits, and returns the run summary', { timeout: 240_000 }, async () => {
  connection = await Connection.connect({ address: gate.address });
  const client = new Client({ connection, namespace: 'default' });
  const runId = 'watched-through-outage';
  // Paused from the start, so the run cannot end before the outage does, on any machine.
  const direct = await h.env.client.workflow.start<typeof trainingRun>('trainingRun', {
    taskQueue: h.taskQueue,
    workflowId: runId,
    args: [{ team: 'math', steps: 2, groupsPerStep: 2, groupSize: 2, evalEvery: 0, seed: 3 }],
  });
  await direct.signal(pauseSignal);

  const written: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    written.push(String(chunk));
    return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stderr.write;
  try {
    const watching = watchRun(client.workflow.getHandle<typeof trainingRun>(runId));
    let settled: 'resolved' | 'rejected' | undefined;
    watching.then(
      () => (settled = 'resolved'),
      () => (settled = 'rejected'),
    );
    for (let i = 0; i < 600 && (await direct.query(statusQuery)).status !== 'paused'; i++) await sleep(100);
    assert.equal((await direct.query(statusQuery)).status, 'paused');
    // the watcher has drawn the paused run's line (it polls each second; a loaded host answers late)
    for (let i = 0; i < 300 && !/step \d+\/2 paused/.test(written.join('')); i++) await sleep(100);
    await gate.close();
    await sleep(25_000);
    assert.equal(settled, undefined, 'the watcher is still watching after 25 s without Temporal');
    await gate.open();
    await direct.signal(resumeSignal);
    const summary = await watching;
    assert.equal(summary.status, 'completed');
    assert.equal(summary.steps, 2);
  } finally {
    process.stderr.write = write;
  }
  const text = written.join('');
  assert.match(text, /waiting for Temporal \(unreachable for \d+ s: .*\); the run goes on without this watcher/);
  assert.match(text, /Temporal answers again; watching run watched-through-outage/);
  assert.match(text, /step \d+\/2 paused/, 'the progress line is kept');
});
