/**
 * LoRA on both engines (the built-in ONNX engine and engines/pytorch), each one process over gRPC on this
 * machine (CPU, 1 intra-op thread). Prints numbers; not a test.
 *
 *   node --import tsx bench/lora.ts [--engines onnx,pytorch] [--reps N (3)] [--rank R (8)]
 *
 * For the ~10M transformer of bench/pytorch-engine.ts (GPT-2 layout, vocab 1024, maxSeq 64), adapters of
 * rank R on q, k, v, o, 1, 2:
 *   - the engine's resident memory (VmRSS) after InitModel of the base model, then of two adapters over it and
 *     a third over another base seed (a second base in memory)
 *   - version bytes (weights + AdamW state) of the base and of an adapter
 *   - Generate (32 sequences, context 16, 16 new tokens): the full model, one adapter, and two adapters with
 *     16 sequences each, as two concurrent calls (one mixed run: Stats.mixed_adapter_runs must rise) and one
 *     after the other (two runs)
 *   - Update (16 × 48 trained tokens), full vs LoRA
 * Times are "wall ms (engine CPU ms)", medians of `reps` warm calls; on a loaded machine the CPU ms are the
 * steadier.
 */
import * as fs from 'node:fs';
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { normalizeTransformerSpec } from '../engines/families/transformer/spec';
import { pytorchEngine } from '../stack/pytorch-engine';
import { engineCommand } from '../processes/engine-kinds';
import { spawnEngine } from '../gpu-workers/engine-process';
import { updateRequest } from './lib/update-request';
import { fmt, timeProcess, type Timing } from './lib/timing';

const { values } = parseArgs({ options: { reps: { type: 'string' }, rank: { type: 'string' }, engines: { type: 'string' } } });
const reps = Number(values.reps ?? 3);
const rank = Number(values.rank ?? 8);
const engines = (values.engines ?? 'onnx,pytorch').split(',');
const V = 1024;
const base = { family: 'transformer', vocabSize: V, width: 320, layers: 8, heads: 8, maxSeq: 64 };
const lora = (baseSeed: number) => ({ ...base, lora: { rank, alpha: 2 * rank, targets: ['q', 'k', 'v', 'o', '1', '2'], baseSeed } });

const rssMiB = (pid: number) => Number(/^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
const ms = (t: Timing) => `${fmt(t.wall)} (${fmt(t.cpu)})`;

function generateRequest(modelKey: string, n: number, offset = 0) {
  return {
    modelKey,
    version: 0,
    sampling: { temperature: 1, maxTokens: 16 },
    sequences: Array.from({ length: n }, (_, k) => {
      const i = k + offset;
      return { context: Array.from({ length: 16 }, (_, j) => (i * 31 + j * 7) % V), seed: i + 1 };
    }),
  };
}

async function measure(kind: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', '1'], { quiet: true, command: engineCommand(kind) });
  const pid = engine.child.pid!;
  const c = await EngineClient.connect(engine.listening.address);
  const timed = (fn: () => Promise<unknown>) => timeProcess(pid, reps, fn);
  try {
    out.set('RSS at start (MiB)', fmt(rssMiB(pid)));
    const full = await c.initModel({ modelKey: 'full', spec: normalizeTransformerSpec(base), seed: 1 });
    out.set('RSS + base model (MiB)', fmt(rssMiB(pid)));
    let adapter;
    for (const [i, key] of ['lora-a', 'lora-b', 'lora-other-base'].entries()) {
      adapter = await c.initModel({ modelKey: key, spec: lora(i < 2 ? 1 : 2) as never, seed: 10 + i });
      out.set(`RSS + ${key} (MiB)`, fmt(rssMiB(pid)));
    }
    const bytes = async (key: string) => {
      const e = await c.exportVersion({ modelKey: key, version: 0 });
      return e.weights.length + e.optimizerState.length;
    };
    out.set(`version bytes, full (${fmt(full.paramCount)} params)`, fmt(await bytes('full')));
    out.set(`version bytes, LoRA r${rank} (${fmt(adapter!.paramCount)} params)`, fmt(await bytes('lora-a')));
    out.set('Generate 32, full model: ms (CPU ms)', ms(await timed(() => c.generate(generateRequest('full', 32)))));
    out.set('Generate 32, one adapter', ms(await timed(() => c.generate(generateRequest('lora-a', 32)))));
    const mixed = async () => Number((await c.stats()).mixedAdapterRuns);
    const before = await mixed();
    const both = await timed(() => Promise.all([c.generate(generateRequest('lora-a', 16)), c.generate(generateRequest('lora-b', 16, 16))]));
    out.set('Generate 16 + 16, two adapters at once', `${ms(both)}; ${(await mixed()) - before} mixed runs`);
    out.set(
      'Generate 16, then 16 on the other adapter',
      ms(await timed(async () => (await c.generate(generateRequest('lora-a', 16)), await c.generate(generateRequest('lora-b', 16, 16))))),
    );
    for (const key of ['full', 'lora-a']) {
      let n = 0;
      out.set(`Update 16×48 tokens, ${key === 'full' ? 'full model' : 'one adapter'}`, ms(await timed(() => c.update(updateRequest(key, `${key}-${n++}`, V)))));
    }
  } finally {
    c.close();
    engine.child.kill('SIGTERM');
  }
  return out;
}

async function main() {
  const columns: Array<[string, Map<string, string>]> = [];
  for (const kind of engines) {
    if (kind === 'pytorch') {
      const torch = pytorchEngine();
      if ('missing' in torch) {
        console.error(`pytorch: skipped (${torch.missing})`);
        continue;
      }
    }
    columns.push([kind, await measure(kind)]);
  }
  const rows = [...new Set(columns.flatMap(([, m]) => [...m.keys()]))];
  const width = Math.max(...rows.map((r) => r.length));
  console.log(`${'measure'.padEnd(width)}  ${columns.map(([k]) => k.padEnd(30)).join('')}`);
  for (const r of rows) console.log(`${r.padEnd(width)}  ${columns.map(([, m]) => (m.get(r) ?? '').padEnd(30)).join('')}`);
}

void main().catch((e) => {
  console.error(e);
  process.exit(1);
});
