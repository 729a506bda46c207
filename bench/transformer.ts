/**
 * Transformer benchmark (CPU EP, in-process runtime, no gRPC). Prints numbers; not a test.
 *
 *   node --import tsx bench/transformer.ts [--threads N] [--quick]
 *
 * For a ~1M and a ~10M parameter config:
 *   - Generate tokens/s at batch 1, 8, 32, 128 (context 16, 16 new tokens, temperature 1)
 *   - decode ms/token at positions 16 and 512 (batch 8): (run of 33 tokens − run of 1 token) / 32,
 *     so prefill is excluded; flat across positions is the goal (preallocated KV cache)
 *   - Update trained tokens/s (16 sequences of 16 context + 48 trained tokens, one AdamW step)
 */
import { parseArgs } from 'node:util';
import { sessionFactory } from '../gpu-workers/engine/device';
import type { GenerateRow, UpdateSample } from '../gpu-workers/model-runtime';
import { seedKey } from '../gpu-workers/philox';
import { initTransformerWeights } from '../gpu-workers/transformer/init';
import { TransformerRuntime } from '../gpu-workers/transformer/runtime';
import { normalizeTransformerSpec, paramLayout } from '../gpu-workers/transformer/spec';
import { DEFAULT_UPDATE_SETTINGS } from '../gpu-workers/types';
import { updateSettings } from '../gpu-workers/engine/validate';

const { values } = parseArgs({ options: { threads: { type: 'string' }, quick: { type: 'boolean' } } });
const threads = Number(values.threads ?? 1);
const quick = !!values.quick;
const V = 1024;
const CONFIGS = {
  '~1M': normalizeTransformerSpec({ vocabSize: V, width: 128, layers: 4, heads: 4, maxSeq: 560 }),
  '~10M': normalizeTransformerSpec({ vocabSize: V, width: 320, layers: 8, heads: 8, maxSeq: 560 }),
};

async function time(reps: number, fn: () => Promise<unknown>): Promise<number> {
  await fn();
  const xs: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    await fn();
    xs.push(performance.now() - t0);
  }
  xs.sort((a, b) => a - b);
  return xs[Math.floor(xs.length / 2)]!;
}

const rows = (n: number, context: number, maxTokens: number): GenerateRow[] =>
  Array.from({ length: n }, (_, i) => ({
    context: Array.from({ length: context }, (_, j) => (i * 31 + j * 7) % V),
    seedKey: seedKey(i + 1),
    temperature: 1,
    topK: 0,
    topP: 0,
    maxTokens,
    stopTokens: [],
  }));

async function main() {
  console.log(`# node --import tsx bench/transformer.ts --threads ${threads}${quick ? ' --quick' : ''}; CPU EP, ${require('node:os').cpus().length} cores (${require('node:os').cpus()[0]?.model ?? '?'})`);
  const reps = quick ? 1 : 3;
  for (const [name, spec] of Object.entries(CONFIGS)) {
    const P = paramLayout(spec).total;
    const rt = new TransformerRuntime(spec, sessionFactory('cpu', { intraOpThreads: threads }));
    await rt.warm();
    const theta = initTransformerWeights(spec, 1);
    console.log(`\n## ${name}: ${P.toLocaleString('en-US')} parameters (width ${spec.width}, layers ${spec.layers}, heads ${spec.heads}, vocab ${V})`);
    for (const B of [1, 8, 32, 128]) {
      const ms = await time(reps, () => rt.generate(theta, rows(B, 16, 16)));
      console.log(`generate batch ${String(B).padStart(3)}: ${((B * 16) / (ms / 1000)).toFixed(0).padStart(7)} tokens/s (${ms.toFixed(0)} ms per run)`);
    }
    for (const C of [16, 512]) {
      const one = await time(reps, () => rt.generate(theta, rows(8, C, 1)));
      const many = await time(reps, () => rt.generate(theta, rows(8, C, 33)));
      console.log(`decode at position ${String(C).padStart(3)}: ${((many - one) / 32).toFixed(2)} ms/token (batch 8)`);
    }
    const samples: UpdateSample[] = Array.from({ length: 16 }, (_, i) => {
      const n = 48;
      return {
        context: Array.from({ length: 16 }, (_, j) => (i + j) % V),
        tokens: Array.from({ length: n }, (_, j) => (i * 5 + j) % V),
        lossMask: new Array(n).fill(1),
        advantages: Array.from({ length: n }, (_, j) => ((i + j) % 3) - 1),
        oldLogprobs: new Array(n).fill(-Math.log(V)),
        lossWeights: new Array(n).fill(1 / (16 * n)),
        refLogprobs: [],
      };
    });
    const settings = updateSettings({ ...DEFAULT_UPDATE_SETTINGS });
    const state = { theta, m: new Float32Array(P), v: new Float32Array(P), step: 0 };
    const ms = await time(reps, () => rt.update(state, samples, settings));
    console.log(`update: ${((16 * 48) / (ms / 1000)).toFixed(0)} trained tokens/s (${ms.toFixed(0)} ms per step, 16 × 64 tokens)`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
