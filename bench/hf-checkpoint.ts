/**
 * Pretrained-checkpoint benchmark (CPU EP, in-process runtime). Prints numbers; not a test.
 *
 *   node --import tsx bench/hf-checkpoint.ts [--dir HF_DIR] [--threads N] [--max-seq N]
 *
 * Without --dir it first writes a random GPT-2-small-shaped checkpoint (vocab 50257, width 768,
 * 12 layers, 12 heads, 1024 positions: 124M parameters, F32 safetensors) to
 * $TMPDIR/troupe-gpt2-small-random, so load and speed can be measured without downloading
 * weights; with --dir it measures a real one (gpt2, SmolLM, Qwen2.5-0.5B, ...). Reports: load
 * (config.json + safetensors → θ), engine session build, generate tokens/s at batch 1 and 8
 * (context 16, 32 new tokens), and an update step's trained tokens/s (the second step: the
 * first builds the update session).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { exportHfCheckpoint, loadHfCheckpoint } from '../engines/checkpoints/hf-layout';
import { sessionFactory } from '../engines/onnx/device';
import { updateSettings } from '../engines/onnx/validate';
import type { GenerateRow, UpdateSample } from '../engines/onnx/model-runtime';
import { seedKey } from '../engines/families/philox';
import { initTransformerWeights } from '../engines/families/transformer/init';
import { TransformerRuntime } from '../engines/onnx/transformer/runtime';
import { normalizeTransformerSpec } from '../engines/families/transformer/spec';
import { DEFAULT_UPDATE_SETTINGS } from '../engines/protocol/types';

const { values } = parseArgs({
  options: { dir: { type: 'string' }, threads: { type: 'string' }, 'max-seq': { type: 'string' }, 'no-update': { type: 'boolean' } },
});
const threads = Number(values.threads ?? os.cpus().length);

function randomGpt2Small(): string {
  const dir = path.join(os.tmpdir(), 'troupe-gpt2-small-random');
  if (fs.existsSync(path.join(dir, 'model.safetensors'))) return dir;
  const spec = normalizeTransformerSpec({ vocabSize: 50257, width: 768, layers: 12, heads: 12, maxSeq: 1024 });
  const t0 = performance.now();
  exportHfCheckpoint(dir, spec, initTransformerWeights(spec, 1), {
    dir: '/nonexistent',
    config: { model_type: 'gpt2', torch_dtype: 'float32', bos_token_id: 50256, eos_token_id: 50256 },
  });
  console.log(`wrote ${dir} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return dir;
}

const ms = async (fn: () => unknown) => {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
};

async function main() {
  const dir = values.dir ?? randomGpt2Small();
  console.log(
    `# node --import tsx bench/hf-checkpoint.ts ${values.dir ? `--dir ${dir} ` : ''}--threads ${threads}; CPU EP, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? '?'})`,
  );
  const bytes = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors'))
    .reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
  let ckpt!: ReturnType<typeof loadHfCheckpoint>;
  const load = await ms(() => (ckpt = loadHfCheckpoint(dir, { maxSeq: values['max-seq'] ? Number(values['max-seq']) : 1024 })));
  const { spec, theta } = ckpt;
  console.log(`${ckpt.model.modelType}: ${theta.length.toLocaleString('en-US')} parameters, ${(bytes / 2 ** 20).toFixed(0)} MiB ${ckpt.dtype} safetensors`);
  console.log(`load (config.json + safetensors → θ): ${(load / 1000).toFixed(2)} s`);
  const rt = new TransformerRuntime(spec, sessionFactory('cpu', { intraOpThreads: threads }));
  console.log(`engine sessions built: ${((await ms(() => rt.warm())) / 1000).toFixed(1)} s`);
  const V = spec.vocabSize;
  const rows = (n: number, maxTokens: number): GenerateRow[] =>
    Array.from({ length: n }, (_, i) => ({
      context: Array.from({ length: 16 }, (_, j) => (i * 31 + j * 7) % V),
      seedKey: seedKey(i + 1),
      temperature: 1,
      topK: 0,
      topP: 1,
      maxTokens,
      stopTokens: [],
    }));
  for (const B of [1, 8]) {
    await rt.generate(theta, rows(B, 2));
    const t = await ms(() => rt.generate(theta, rows(B, 32)));
    console.log(`generate batch ${B}: ${((B * 32) / (t / 1000)).toFixed(1)} tokens/s (${(t / 1000).toFixed(2)} s for 32 tokens, context 16)`);
  }
  if (values['no-update']) return;
  const n = 32;
  const samples: UpdateSample[] = Array.from({ length: 4 }, (_, i) => ({
    context: Array.from({ length: 16 }, (_, j) => (i + j) % V),
    tokens: Array.from({ length: n }, (_, j) => (i * 5 + j) % V),
    lossMask: new Array(n).fill(1),
    advantages: Array.from({ length: n }, (_, j) => ((i + j) % 3) - 1),
    oldLogprobs: new Array(n).fill(-Math.log(V)),
    lossWeights: new Array(n).fill(1 / (4 * n)),
    refLogprobs: [],
  }));
  const state = { theta, m: new Float32Array(theta.length), v: new Float32Array(theta.length), step: 0 };
  const settings = updateSettings({ ...DEFAULT_UPDATE_SETTINGS });
  const first = await ms(() => rt.update(state, samples, settings));
  const t = await ms(() => rt.update(state, samples, settings));
  console.log(
    `update: ${((4 * n) / (t / 1000)).toFixed(1)} trained tokens/s (${(t / 1000).toFixed(1)} s per step of 4 sequences × (16 context + ${n} trained) tokens; the first step, building the session, ${(first / 1000).toFixed(1)} s)`,
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
