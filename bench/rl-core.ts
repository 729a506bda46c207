/**
 * Throughput of the pure RL core: advantage estimators on a 64k-sample step,
 * aggregation weights, and the PPO loss over 1M tokens. Not a test.
 *
 * Run: node --import tsx bench/rl-core.ts
 *
 * The data is synthetic and seeded (4096 task groups × 8 episodes × 2 agents,
 * two reward components, 1–64 trainable tokens per sample). Each number is the
 * median of several timed runs after warm-up.
 */

import os from 'node:os';
import { seededRandom } from '../agents/seed';
import { computeAdvantages, computeAdvantagesByAgent, ESTIMATOR_NAMES, ESTIMATORS, resolveOptions } from '../rl/advantages/registry';
import type { Scope } from '../rl/advantages/types';
import { policyLoss } from '../rl/loss-reference';
import type { Sample } from '../rl/samples';
import { aggregationWeights } from '../rl/tokens';

const GROUPS = 4096;
const EPISODES = 8;
const AGENTS = ['solver', 'verifier'];
const TOKENS = 1 << 20;

function makeSamples(rand: () => number): Sample[] {
  const out: Sample[] = [];
  for (let g = 0; g < GROUPS; g++)
    for (let e = 0; e < EPISODES; e++)
      for (const agentId of AGENTS)
        out.push({
          sampleId: `g${g}-e${e}-${agentId}`,
          groupId: `g${g}`,
          episodeId: `g${g}-e${e}`,
          agentId,
          modelId: 'policy',
          rewards: { correct: rand() < 0.4 ? 1 : 0, format: rand() },
          trainableTokens: 1 + Math.floor(rand() * 64),
        });
  return out;
}

function time(fn: () => void, runs = 7): number {
  for (let i = 0; i < 2; i++) fn();
  const ms: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    fn();
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return ms.sort((a, b) => a - b)[runs >> 1]!;
}

const fmt = (x: number) => x.toLocaleString('en-US', { maximumFractionDigits: 0 });

function main(): void {
  console.log('$ node --import tsx bench/rl-core.ts');
  console.log(`node ${process.version}, ${os.cpus()[0]?.model ?? 'unknown cpu'}, ${os.platform()}-${os.arch()}`);
  const rand = seededRandom(42);
  const samples = makeSamples(rand);
  console.log(`\nadvantages: ${fmt(samples.length)} samples (${GROUPS} groups × ${EPISODES} episodes × ${AGENTS.length} agents)`);
  console.log('estimator              scope         registry (validate+estimate)    estimate only');
  for (const name of ESTIMATOR_NAMES)
    for (const scope of ['group-agent', 'group'] as Scope[]) {
      const spec = { estimator: name, options: { scope, weights: { format: 0.5 } } };
      const full = time(() => computeAdvantages(samples, spec));
      const options = resolveOptions(ESTIMATORS[name], spec.options);
      const bare = time(() => ESTIMATORS[name].estimate(samples, options));
      console.log(
        `${name.padEnd(22)} ${scope.padEnd(13)} ${full.toFixed(1).padStart(7)} ms ${fmt(samples.length / (full / 1000)).padStart(12)} samples/s ` +
          `${bare.toFixed(1).padStart(7)} ms ${fmt(samples.length / (bare / 1000)).padStart(12)} samples/s`,
      );
    }
  const byAgent = time(() => computeAdvantagesByAgent(samples, { solver: { estimator: 'grpo' }, verifier: { estimator: 'mc-grpo' } }));
  console.log(
    `per-role (solver grpo, verifier mc-grpo)   ${byAgent.toFixed(1).padStart(7)} ms ${fmt(samples.length / (byAgent / 1000)).padStart(12)} samples/s`,
  );

  // Token side: masks for the same samples (prompt 16 tokens + trainable tokens), then the loss on 1M tokens.
  const masks = samples.map((s) => {
    const m = new Uint8Array(16 + s.trainableTokens);
    m.fill(1, 16);
    return m;
  });
  const maskTokens = masks.reduce((a, m) => a + m.length, 0);
  const agg = time(() => aggregationWeights(masks, 'seq-mean-token-mean'));
  console.log(`\naggregation weights (seq-mean-token-mean): ${fmt(maskTokens)} tokens in ${agg.toFixed(1)} ms → ${fmt(maskTokens / (agg / 1000))} tokens/s`);

  const n = TOKENS;
  const logpOld = Float64Array.from({ length: n }, () => -3 * rand());
  const logp = Float64Array.from(logpOld, (x) => x + 0.4 * (rand() - 0.5));
  const refLogp = Float64Array.from(logpOld, (x) => x + 0.2 * (rand() - 0.5));
  const advantages = Float64Array.from({ length: n }, () => 2 * rand() - 1);
  const weights = new Float64Array(n).fill(1 / n);
  const entropy = Float64Array.from({ length: n }, () => 2 * rand());
  const input = { logp, logpOld, advantages, weights, refLogp, entropy };
  for (const [label, settings] of [
    ['PPO clip only', {}],
    ['+ low_var_kl + entropy', { kl: { type: 'low_var_kl' as const, coef: 0.001 }, entropyCoef: 0.01 }],
  ] as const) {
    const ms = time(() => policyLoss(input, settings), 5);
    console.log(`policy loss, ${fmt(n)} tokens, ${label.padEnd(24)} ${ms.toFixed(1).padStart(6)} ms → ${fmt(n / (ms / 1000))} tokens/s`);
  }
}

main();
