/**
 * The PyTorch engine (engines/pytorch) against the built-in ONNX engine, both as
 * processes over gRPC on this machine (CPU, 1 intra-op thread each). Prints
 * numbers; not a test.
 *
 *   node --import tsx bench/pytorch-engine.ts [--reps N (3)] [--baseline PATH/server.py] [--configs ~1M,~10M]
 *     [--engines pytorch,baseline,onnx] [--context N (16)] [--group-size G (1)]
 *
 * For a ~1M and a ~10M parameter transformer (GPT-2 layout, vocab 1024, maxSeq 64):
 *   - Generate tokens/s at batch 1, 8, 32, 64 (context 16, 16 new tokens, temperature 1), one call each;
 *     with --group-size G, each G sequences in a row share their context (a GRPO group: one prompt, G seeds)
 *   - Update trained tokens/s (16 sequences of 16 context + 48 trained tokens, one AdamW step)
 *   - peak RSS of each engine process (VmHWM) after its runs
 * Rates are "wall-clock (per second of the engine process's CPU time)": on a loaded machine the
 * second is the steadier.
 * `--baseline` adds a column for another PyTorch engine's server.py (e.g. an older checkout's
 * engines/pytorch/server.py, the batch-1 engine). Medians of `reps` warm calls.
 */
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { normalizeTransformerSpec, paramLayout } from '../engines/families/transformer/spec';
import { pytorchEngine } from '../stack/pytorch-engine';
import { engineCommand, BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../gpu-workers/engine-process';
import { UPDATE, updateRequest } from './lib/update-request';
import { procStatusBytes, timeProcess } from './lib/timing';

const { values } = parseArgs({
  options: {
    reps: { type: 'string' },
    baseline: { type: 'string' },
    configs: { type: 'string' },
    engines: { type: 'string' },
    context: { type: 'string' },
    'group-size': { type: 'string' },
  },
});
const reps = Number(values.reps ?? 3);
const V = 1024;
const CONFIGS = {
  '~1M': normalizeTransformerSpec({ family: 'transformer', vocabSize: V, width: 128, layers: 4, heads: 4, maxSeq: 64 }),
  '~10M': normalizeTransformerSpec({ family: 'transformer', vocabSize: V, width: 320, layers: 8, heads: 8, maxSeq: 64 }),
};
const wanted = (values.configs ?? '~1M,~10M').split(',');
const engines = (values.engines ?? 'pytorch,baseline,onnx').split(',');
const BATCHES = [1, 8, 32, 64];
const CONTEXT = Number(values.context ?? 16);
const NEW_TOKENS = 16;
const GROUP = Number(values['group-size'] ?? 1);
if (!(Number.isInteger(CONTEXT) && CONTEXT >= 1 && CONTEXT + NEW_TOKENS <= 64))
  throw new Error(`--context: a whole number from 1 to ${64 - NEW_TOKENS} (maxSeq 64)`);
if (!(Number.isInteger(GROUP) && GROUP >= 1)) throw new Error('--group-size: a whole number >= 1');

/** Median wall ms and median engine CPU ms of `reps` warm calls. */
const timed = (pid: number, fn: () => Promise<unknown>) => timeProcess(pid, reps, fn);

/** "wall-clock rate (per engine CPU second)" */
const rate = (n: number, t: { wall: number; cpu: number }) => `${(n / (t.wall / 1000)).toFixed(0)} (${(n / (Math.max(t.cpu, 10) / 1000)).toFixed(0)})`;

/** One engine's column: label → value, per config. */
async function column(name: string, engine: SpawnedEngine): Promise<Map<string, string>> {
  const c = await EngineClient.connect(engine.listening.address);
  const out = new Map<string, string>();
  const pid = engine.child.pid!;
  let n = 0;
  try {
    for (const cfg of wanted) {
      const spec = CONFIGS[cfg as keyof typeof CONFIGS];
      const key = `bench-${cfg}`;
      await c.initModel({ modelKey: key, spec, seed: 1 });
      for (const B of BATCHES) {
        const req = {
          modelKey: key,
          version: 0,
          sampling: { temperature: 1, maxTokens: NEW_TOKENS },
          sequences: Array.from({ length: B }, (_, i) => ({
            context: Array.from({ length: CONTEXT }, (_, j) => (Math.floor(i / GROUP) * 31 + j * 7) % V),
            seed: i + 1,
          })),
        };
        const t = await timed(pid, () => c.generate(req));
        out.set(`${cfg} generate batch ${B} (tokens/s)`, rate(B * NEW_TOKENS, t));
        process.stderr.write(`${name} ${cfg} generate ${B}: ${t.wall.toFixed(0)} ms (engine CPU ${t.cpu.toFixed(0)} ms)\n`);
      }
      const t = await timed(pid, () => c.update(updateRequest(key, `u${n++}`, V)));
      out.set(`${cfg} update (trained tokens/s)`, rate(UPDATE.sequences * UPDATE.tokens, t));
      process.stderr.write(`${name} ${cfg} update: ${t.wall.toFixed(0)} ms (engine CPU ${t.cpu.toFixed(0)} ms)\n`);
    }
    out.set('peak RSS (MiB)', (procStatusBytes(engine.child.pid!, 'VmHWM') / 2 ** 20).toFixed(0));
  } finally {
    c.close();
    engine.child.kill('SIGTERM');
  }
  return out;
}

async function main() {
  const torch = pytorchEngine();
  if ('missing' in torch) throw new Error(torch.missing);
  const args = ['--device', 'cpu', '--port', '0', '--threads', '1'];
  const columns: Array<[string, Map<string, string>]> = [];
  if (engines.includes('pytorch'))
    columns.push([
      'pytorch (this)',
      // no prefix cache: the reps send the same contexts, and each should run them (bench/prefix-cache.ts measures it)
      await column('pytorch', await spawnEngine([...args, '--prefix-cache-bytes', '0'], { quiet: true, command: engineCommand('pytorch') })),
    ]);
  if (values.baseline && engines.includes('baseline'))
    columns.push([
      `pytorch (${values.baseline})`,
      await column('baseline', await spawnEngine(args, { quiet: true, command: [torch.command[0]!, values.baseline] })),
    ]);
  if (engines.includes('onnx'))
    columns.push([
      'built-in (onnx)',
      await column('onnx', await spawnEngine([...args, '--max-batch', '64'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND })),
    ]);
  for (const cfg of wanted) console.log(`${cfg}: ${paramLayout(CONFIGS[cfg as keyof typeof CONFIGS]).total} parameters`);
  console.log(
    `context ${CONTEXT} tokens, ${NEW_TOKENS} new; ${GROUP === 1 ? 'every sequence its own context' : `groups of ${GROUP} sequences share a context`}`,
  );
  const labels = [...columns[0]![1].keys()];
  console.log(['', ...columns.map(([n]) => n)].join(' | '));
  for (const l of labels) console.log([l, ...columns.map(([, m]) => m.get(l) ?? '')].join(' | '));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
