/**
 * Infrastructure versus user failure is decided by where an error comes from,
 * not by its name: whatever the episode's IO (engine, activities, store) throws
 * propagates so Temporal retries it; whatever the team's own code throws
 * becomes a failed episode.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InfrastructureFailure, runEpisode, type EpisodeIO } from '../../../agents/episode';
import { mathTeam } from '../../../examples/teams/math';

const team = mathTeam();
const input = { episodeId: 'e1', seed: 1, task: { a: 1, b: 2 }, versions: { policy: 0 } };
const lostConnection = new Error('read ECONNRESET');
const failingIO: EpisodeIO = {
  generate: async () => Promise.reject(lostConnection),
  callTool: async () => Promise.reject(new Error('not called')),
  now: () => 0,
};

test('an IO failure propagates as itself, whatever its name', async () => {
  await assert.rejects(runEpisode(team, input, failingIO), (e) => e === lostConnection);
});

test('an IO failure propagates even when the episode function catches it', async () => {
  let seen: unknown;
  const swallowing = {
    ...team,
    async episode({ agents }: { agents: Record<string, { act(m: string): Promise<unknown> }> }) {
      try {
        await agents.solver!.act('1+2');
      } catch (e) {
        seen = e;
      }
      return { answer: 3, verdict: 'Y' };
    },
  };
  await assert.rejects(runEpisode(swallowing, input, failingIO), (e) => e === lostConnection);
  assert.ok(seen instanceof InfrastructureFailure, 'the episode function sees an InfrastructureFailure');
  assert.equal((seen as Error).cause, lostConnection);
});

test("an error the team's code throws is a failed episode, even when named like a Temporal failure", async () => {
  const lookalike = Object.assign(new Error('my bug'), { name: 'ApplicationFailure' });
  const buggy = {
    ...team,
    async episode() {
      throw lookalike;
    },
  };
  const t = await runEpisode(buggy, input, failingIO);
  assert.equal(t.status, 'failed');
  assert.equal(t.error, 'episode: my bug');
});
