// The episode watch's reading of an episode's history and its reason (processes/episode-watch.ts);
// stopping a real runaway episode is test/integration/training/runaway-durable.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EpisodeWatch, stoppedReason, turnsDone } from '../../../processes/episode-watch';

const scheduled = (eventId: number, name: string) => ({ eventId, activityTaskScheduledEventAttributes: { activityType: { name } } });
const completed = (eventId: number, scheduledEventId: number) => ({ eventId, activityTaskCompletedEventAttributes: { scheduledEventId } });

test('turnsDone counts completed turn activities, not tool calls or turns still in flight', () => {
  const events = [
    { eventId: 1, workflowExecutionStartedEventAttributes: {} },
    scheduled(5, 'episodeSpec'),
    completed(7, 5),
    scheduled(9, 'generateTurn'),
    completed(11, 9),
    scheduled(13, 'callTool'),
    completed(15, 13),
    scheduled(17, 'generateTurn'),
    completed(19, 17),
    scheduled(21, 'generateTurn'), // in flight when the code looped
  ];
  assert.equal(turnsDone(events as never), 2);
  assert.equal(turnsDone([]), 0);
});

test('stoppedReason names the limit and where the episode was', () => {
  assert.equal(
    stoppedReason(1, 5000),
    'episode: its code ran 5 s without yielding after 1 agent turn (a synchronous loop? durable episode code may not block for more than 5 s); it was stopped',
  );
  assert.match(stoppedReason(0, 5000), /without yielding before its first agent turn /);
  assert.match(stoppedReason(3, 5000), /after 3 agent turns /);
  // a workflow of several episodes: the turns are all of its episodes'
  assert.match(stoppedReason(3, 5000, true), /after 3 agent turns of the episodes in its workflow /);
  assert.match(stoppedReason(0, 5000, true), /before their first agent turns /);
});

test('the watch follows an execution from its first sandbox timeout, and acts on nothing else', async () => {
  const lines: string[] = [];
  const watch = new EpisodeWatch({ limitMs: 5000, log: (l) => lines.push(l) });
  const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
  const logger = watch.logger(quiet);
  // what the SDK core forwards for a workflow task the sandbox interrupted
  const timedOut = (runId: string) => ({
    runId,
    sdkComponent: 'core',
    failure: 'Failure { failure: Some(Failure { message: "Script execution timed out after 5000ms", source: "TypeScriptSDK" }) }',
  });
  const settle = () => new Promise((r) => setTimeout(r, 10));

  logger.warn('Failing workflow task', { ...timedOut('r1'), failure: 'Failure { message: "boom" }' });
  logger.warn('Activity not found on completion', timedOut('r1'));
  logger.error('Failing workflow task', timedOut('r1'));
  await settle();
  assert.deepEqual(lines, []);

  // a timeout: the watch follows the execution on the server (here it has no client yet, so it says so)
  logger.log('WARN', 'Failing workflow task', timedOut('r1'));
  logger.warn('Failing workflow task', timedOut('r2')); // another execution
  await settle();
  assert.deepEqual(lines, [
    'troupe control worker: could not stop the execution r1 that keeps timing out: the watch has no client yet',
    'troupe control worker: could not stop the execution r2 that keeps timing out: the watch has no client yet',
  ]);
});
