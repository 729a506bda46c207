/**
 * scores-ahead.ts: the next update's proximal Score started when both the
 * version it needs and the batch are there. Its engine is a recorder of Score calls (what is tested is
 * which calls are made and which answer is used, not the engine: the bits of
 * a Score ahead are checked end to end by the staleness chaos tests).
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { StepBatch, UpdateSequence } from '../../../activities/training/batch';
import { scoresAhead } from '../../../activities/training/scores-ahead';

const seq = (t: number): UpdateSequence => ({
  agent: 'solver',
  version: 0,
  context: [1],
  tokens: [t],
  mask: [1],
  advantages: [1],
  oldLogprobs: [-1],
  weights: [1],
});
const batchOf = (models: Record<string, UpdateSequence[]>) => Promise.resolve({ models } as unknown as StepBatch);

/** A Score per call: log-prob −(version + first token), and the calls made. */
function recorder(fail = new Set<number>()) {
  const calls: string[] = [];
  return {
    calls,
    async score(runId: string, model: string, version: number, sequences: UpdateSequence[]) {
      calls.push(`${runId}/${model}@${version}`);
      if (fail.has(version)) throw new Error('engine lost');
      return sequences.map((s) => [-(version + s.tokens[0]!)]);
    },
  };
}

it('the next update takes the Score started ahead for its very sequences and version, and scores nothing again', async () => {
  const engine = recorder();
  const ahead = scoresAhead(engine);
  const next = [seq(3), seq(4)];
  ahead.made('r', 1, 'policy', 5, batchOf({ policy: next }));
  assert.deepEqual(await ahead.score('r', 'policy', 5, next), [[-8], [-9]]);
  assert.deepEqual(engine.calls, ['r/policy@5']);
  // used once: the same ask again is a Score of its own
  assert.deepEqual(await ahead.score('r', 'policy', 5, next), [[-8], [-9]]);
  assert.deepEqual(engine.calls, ['r/policy@5', 'r/policy@5']);
});

it('another version, other sequences, another run or model, or a failed Score ahead: a Score of its own', async () => {
  const engine = recorder(new Set([9]));
  const ahead = scoresAhead(engine);
  const next = [seq(3)];
  ahead.made('r', 1, 'policy', 5, batchOf({ policy: next }));
  // the update's base is another version (the update before it was skipped, say)
  assert.deepEqual(await ahead.score('r', 'policy', 4, next), [[-7]]);
  // equal tokens in another batch (other settings built another): not taken
  ahead.made('r', 1, 'policy', 5, batchOf({ policy: next }));
  assert.deepEqual(await ahead.score('r', 'policy', 5, [seq(3)]), [[-8]]);
  // another run's, another model's
  ahead.made('r', 1, 'policy', 5, batchOf({ policy: next }));
  assert.deepEqual(await ahead.score('q', 'policy', 5, next), [[-8]]);
  assert.deepEqual(await ahead.score('r', 'critic', 5, next), [[-8]]);
  // (a Score ahead starts once its batch is there: the order of the calls is not the point, their count is)
  assert.deepEqual([...engine.calls].sort(), ['q/policy@5', 'r/critic@5', 'r/policy@4', 'r/policy@5', 'r/policy@5', 'r/policy@5', 'r/policy@5']);
  // a Score ahead that fails is not an answer: the update scores again (and its error, if any, is its own)
  engine.calls.length = 0;
  ahead.made('r', 1, 'policy', 9, batchOf({ policy: next }));
  await assert.rejects(ahead.score('r', 'policy', 9, next), /engine lost/);
  assert.deepEqual(engine.calls, ['r/policy@9', 'r/policy@9']);
});

it('a batch without the model, or that failed to build, starts no Score', async () => {
  const engine = recorder();
  const ahead = scoresAhead(engine);
  ahead.made('r', 1, 'policy', 5, batchOf({ other: [seq(1)] }));
  ahead.made('r', 1, 'critic', 5, Promise.reject(new Error('read failed')));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(engine.calls, []);
  const mine = [seq(2)];
  assert.deepEqual(await ahead.score('r', 'critic', 5, mine), [[-7]]);
  assert.deepEqual(engine.calls, ['r/critic@5']);
});

it('a Score ahead waits until every update of the step is past its engine work, so it queues behind none of them', async () => {
  const engine = recorder();
  const ahead = scoresAhead(engine);
  const [policyOver, criticOver] = [ahead.updating('r', 1), ahead.updating('r', 1)];
  const other = ahead.updating('r', 2); // another step's update does not hold it
  const next = [seq(3)];
  policyOver();
  ahead.made('r', 1, 'policy', 5, batchOf({ policy: next }));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(engine.calls, [], "the critic's update is still at the engine");
  criticOver();
  criticOver(); // said twice (after its export and when it returns): counted once
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(engine.calls, ['r/policy@5']);
  assert.deepEqual(await ahead.score('r', 'policy', 5, next), [[-8]]);
  assert.deepEqual(engine.calls, ['r/policy@5']);
  other();
});

it('a batch read ahead after the version was made starts the Score then; both ways start one Score', async () => {
  const engine = recorder();
  const ahead = scoresAhead(engine);
  // a rollout longer than the update: the updates of step 1 made their versions, step 2's batch is not there yet
  ahead.made('r', 1, 'policy', 5, undefined);
  ahead.made('r', 1, 'critic', 7, undefined);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(engine.calls, []);
  // a batch of another step (3) is not the one these versions score next
  ahead.readAhead('r', 3, batchOf({ policy: [seq(9)] }));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(engine.calls, []);
  const [policy, critic] = [[seq(3)], [seq(4)]];
  const batch = batchOf({ policy, critic });
  ahead.readAhead('r', 2, batch);
  // the update that made a version, finding the batch already there (peek), does not score it again
  ahead.made('r', 1, 'policy', 5, batch);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual([...engine.calls].sort(), ['r/critic@7', 'r/policy@5']);
  assert.deepEqual(await ahead.score('r', 'policy', 5, policy), [[-8]]);
  assert.deepEqual(await ahead.score('r', 'critic', 7, critic), [[-11]]);
  assert.equal(engine.calls.length, 2);
});
