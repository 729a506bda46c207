/**
 * Batched episodes run with a seeded Math.random and a logical Date.now, so an
 * episode function that uses them (against the rules, but unnoticed) still
 * gives the same episodes for the same seed, however turns interleave.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { agent, charTokenizer, defineTeam, generatedTasks, tinyLM } from '../../../agents';
import type { EpisodeIO } from '../../../agents/episode';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';

const tokenizer = charTokenizer('ab');
const team = defineTeam({
  name: 'impure',
  tokenizer,
  models: { policy: tinyLM({ tokenizer }) },
  agents: { solver: agent({ model: 'policy', maxTokens: 1, maxTurns: 3 }) },
  tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: {} }) }),
  async episode({ agents }) {
    const draws: number[] = [];
    const clock: number[] = [];
    for (let i = 0; i < 3; i++) {
      draws.push(Math.random());
      clock.push(Date.now());
      await agents.solver.act(Math.random() < 0.5 ? 'a' : 'b');
    }
    clock.push(Date.now());
    return { draws, clock };
  },
  rewards: { solver: () => ({ r: 0 }) },
  success: () => false,
});

/** An engine stand-in whose replies arrive after real, random delays: the episodes' turns interleave differently each time. */
function io(): EpisodeIO {
  return {
    generate: async () => {
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 5)));
      return { tokens: [tokenizer.eosId], logprobs: [-1], stopReason: 'stop_token' };
    },
    callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
    now: () => Date.now(),
  };
}

async function batch(seeds: number[]) {
  const trajectories = await Promise.all(
    seeds.map((seed, i) => runBatchedEpisode(team, { episodeId: `e${i}`, seed, task: {}, versions: { policy: 0 } }, io())),
  );
  return trajectories.map((t) => ({ status: t.status, outcome: t.outcome, messages: t.turns.map((u) => tokenizer.decode(u.contextTokens.slice(1))) }));
}

it('two batches with the same seeds make the same episodes; other seeds other draws', async () => {
  const seeds = [1, 2, 3, 4, 5, 6, 7, 8];
  const first = await batch(seeds);
  const second = await batch(seeds);
  assert.deepEqual(second, first);
  for (const e of first) assert.equal(e.status, 'completed');
  // A logical clock: 0 at the start, one tick per generation awaited (one per turn here: no tools).
  assert.deepEqual((first[0]!.outcome as { clock: number[] }).clock, [0, 1, 2, 3]);
  const draws = first.map((e) => (e.outcome as { draws: number[] }).draws[0]);
  assert.equal(new Set(draws).size, seeds.length, 'each episode has its own stream');
  // Same seed in another batch position: same episode.
  const shifted = await batch([9, 1]);
  assert.deepEqual(shifted[1], first[0]);
});

it('outside an episode the real Math.random and Date.now are untouched', async () => {
  await batch([1]);
  const t = Date.now();
  assert.ok(Math.abs(t - new Date().getTime()) < 1000 && t > 1_700_000_000_000);
  assert.notEqual(Math.random(), Math.random());
});
