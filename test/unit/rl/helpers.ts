/** Small builders shared by the RL unit tests (not a test file itself). */

import assert from 'node:assert/strict';
import type { Sample } from '../../../rl/samples';

let counter = 0;

/** A sample with sensible defaults; ids are unique unless given. */
export function sample(over: Partial<Sample> & { reward?: number } = {}): Sample {
  counter++;
  const { reward, ...rest } = over;
  return {
    sampleId: `s${counter}`,
    groupId: 'g',
    episodeId: `e${counter}`,
    agentId: 'solver',
    modelId: 'policy',
    rewards: { r: reward ?? 0 },
    trainableTokens: 1,
    ...rest,
  };
}

/** One sample per reward, all in one group, one episode each. */
export function group(rewards: number[], over: Partial<Sample> = {}): Sample[] {
  return rewards.map((reward) => sample({ reward, ...over }));
}

export function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol = 1e-9, what = 'value'): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    const ok = Math.abs(actual[i]! - expected[i]!) <= tol * Math.max(1, Math.abs(expected[i]!));
    assert.ok(ok, `${what}[${i}]: expected ${expected[i]}, got ${actual[i]}`);
  }
}

export function meanOf(xs: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < xs.length; i++) s += xs[i]!;
  return s / xs.length;
}

export function unbiasedStdOf(xs: ArrayLike<number>): number {
  const m = meanOf(xs);
  let s = 0;
  for (let i = 0; i < xs.length; i++) s += (xs[i]! - m) ** 2;
  return Math.sqrt(s / (xs.length - 1));
}

/** A turn sample of agent `solver` in group g (rewards: episode `ok`, per-turn `step`). */
export function turnSample(episodeId: string, turn: number, after: number[], step: number, ok: number, over: Partial<Sample> = {}): Sample {
  return {
    sampleId: `${episodeId}#${turn}`,
    groupId: 'g',
    episodeId,
    agentId: 'solver',
    modelId: 'policy',
    rewards: { ok },
    turnRewards: { step },
    trainableTokens: 1,
    turn,
    after,
    ...over,
  };
}
