/**
 * Memory of a built-in engine that serves run after run: its RSS while it takes N models (one
 * per run), each with K versions, with no cap on models and with --max-models, side by side.
 * Each configuration runs in its own process: an in-process Engine whose models count as idle
 * at once (modelIdleMs 0; the engine's default is 10 minutes), so what the cap keeps is what a
 * pool worker keeps after the runs of those models have ended. Not a test; prints a table.
 *
 *   node --import tsx bench/engine-models.ts [--models 24] [--versions 16] [--max-models 4]
 */
import { execFileSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { resolveDevice } from '../engines/onnx/device';
import { Engine } from '../engines/onnx/engine';

const { values } = parseArgs({
  options: {
    models: { type: 'string' },
    versions: { type: 'string' },
    'max-models': { type: 'string' },
    child: { type: 'string' },
  },
});
const MODELS = Number(values.models ?? 24);
const VERSIONS = Number(values.versions ?? 16);
const CAP = Number(values['max-models'] ?? 4);
/** A tiny-lm of ~0.6 M parameters: each version holds θ, m and v (~7 MB). */
const SPEC = { vocabSize: 256, contextWindow: 16, embedDim: 64, hiddenDim: 512, layers: 2 };
const mb = (b: number) => (b / 2 ** 20).toFixed(0);

/** One configuration: models and versions loaded one after another; prints one JSON line. */
async function child(maxModels: number) {
  const engine = new Engine({ device: await resolveDevice('cpu'), maxModels, modelIdleMs: 0 });
  let peak = 0;
  for (let i = 0; i < MODELS; i++) {
    const modelKey = `run${i}:policy`;
    await engine.initModel({ modelKey, spec: SPEC, seed: i });
    const v0 = await engine.exportVersion({ modelKey, version: 0 });
    // the versions its updates would make: the same bytes, each decoded into its own arrays
    for (let v = 1; v < VERSIONS; v++) await engine.loadVersion({ modelKey, version: v, spec: SPEC, weights: v0.weights, optimizerState: v0.optimizerState });
    peak = Math.max(peak, process.memoryUsage().rss);
  }
  global.gc?.();
  const held = (await engine.stats()).models.length;
  console.log(JSON.stringify({ maxModels, held, peak, final: process.memoryUsage().rss }));
  await engine.close();
}

function main() {
  console.log(`# node --import tsx bench/engine-models.ts --models ${MODELS} --versions ${VERSIONS} --max-models ${CAP}`);
  console.log(`# ${MODELS} models of tiny-lm ${JSON.stringify(SPEC)}, ${VERSIONS} versions each, one after another; models idle at once`);
  console.log('| --max-models | models held at the end | peak RSS MB | final RSS MB |');
  console.log('|---|---|---|---|');
  for (const maxModels of [1_000_000, CAP]) {
    const out = execFileSync(
      process.execPath,
      ['--import', 'tsx', '--expose-gc', __filename, '--child', String(maxModels), '--models', String(MODELS), '--versions', String(VERSIONS)],
      {
        encoding: 'utf8',
      },
    );
    const r = JSON.parse(out.trim().split('\n').at(-1)!) as { maxModels: number; held: number; peak: number; final: number };
    console.log(`| ${maxModels >= 1_000_000 ? 'none' : maxModels} | ${r.held} | ${mb(r.peak)} | ${mb(r.final)} |`);
  }
}

if (values.child) void child(Number(values.child));
else main();
