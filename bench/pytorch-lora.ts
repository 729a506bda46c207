/**
 * LoRA on the PyTorch engine (engines/pytorch/lora.py), one engine process over gRPC on this machine
 * (CPU, 1 intra-op thread). Prints numbers; not a test.
 *
 *   node --import tsx bench/pytorch-lora.ts [--reps N (3)] [--rank R (8)]
 *
 * For the ~10M transformer of bench/pytorch-engine.ts (GPT-2 layout, vocab 1024, maxSeq 64), adapters of
 * rank R on q, k, v, o, 1, 2:
 *   - the engine's resident memory (VmRSS) after InitModel of the base model, then of one, two and three
 *     adapters (the third over another base seed: a second base in memory)
 *   - version bytes (weights + AdamW state) of the base and of an adapter
 *   - Generate (batch 32, 16 new tokens) and Update (16 × 48 trained tokens) wall ms, full vs LoRA
 * Medians of `reps` warm calls (bench/lib/timing.ts).
 */
import * as fs from 'node:fs';
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { normalizeTransformerSpec } from '../engines/families/transformer/spec';
import { pytorchEngine } from '../engines/pytorch';
import { engineCommand } from '../gpu-workers/engine-kinds';
import { spawnEngine } from '../gpu-workers/engine-process';
import { updateRequest } from './lib/update-request';
import { time } from './lib/timing';

const { values } = parseArgs({ options: { reps: { type: 'string' }, rank: { type: 'string' } } });
const reps = Number(values.reps ?? 3);
const rank = Number(values.rank ?? 8);
const V = 1024;
const base = { family: 'transformer', vocabSize: V, width: 320, layers: 8, heads: 8, maxSeq: 64 };
const lora = (baseSeed: number) => ({ ...base, lora: { rank, alpha: 2 * rank, targets: ['q', 'k', 'v', 'o', '1', '2'], baseSeed } });

const rssMiB = (pid: number) => Number(/^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;

async function main() {
  const torch = pytorchEngine();
  if ('missing' in torch) throw new Error(torch.missing);
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', '1'], { quiet: true, command: engineCommand('pytorch') });
  const pid = engine.child.pid!;
  const c = await EngineClient.connect(engine.listening.address);
  const rows: Array<[string, string]> = [];
  try {
    rows.push(['RSS at start (MiB)', rssMiB(pid).toFixed(0)]);
    const full = await c.initModel({ modelKey: 'full', spec: normalizeTransformerSpec(base), seed: 1 });
    rows.push(['RSS + base model (MiB)', rssMiB(pid).toFixed(0)]);
    const names = ['lora-a', 'lora-b', 'lora-other-base'];
    let adapter;
    for (const [i, key] of names.entries()) {
      adapter = await c.initModel({ modelKey: key, spec: lora(i < 2 ? 1 : 2) as never, seed: 10 + i });
      rows.push([`RSS + ${key} (MiB)`, rssMiB(pid).toFixed(0)]);
    }
    const bytes = async (key: string) => {
      const e = await c.exportVersion({ modelKey: key, version: 0 });
      return e.weights.length + e.optimizerState.length;
    };
    rows.push([`version bytes, full (${full.paramCount} params)`, String(await bytes('full'))]);
    rows.push([`version bytes, LoRA r${rank} (${adapter!.paramCount} params)`, String(await bytes('lora-a'))]);
    for (const key of ['full', 'lora-a']) {
      const gen = {
        modelKey: key,
        version: 0,
        sampling: { temperature: 1, maxTokens: 16 },
        sequences: Array.from({ length: 32 }, (_, i) => ({ context: Array.from({ length: 16 }, (_, j) => (i * 31 + j * 7) % V), seed: i + 1 })),
      };
      rows.push([`${key}: Generate batch 32 (ms)`, (await time(reps, () => c.generate(gen))).wall.toFixed(0)]);
      let n = 0;
      rows.push([`${key}: Update 16×48 tokens (ms)`, (await time(reps, () => c.update(updateRequest(key, `${key}-${n++}`, V)))).wall.toFixed(0)]);
    }
  } finally {
    c.close();
    engine.child.kill('SIGTERM');
  }
  for (const [k, v] of rows) console.log(`${k.padEnd(44)} ${v}`);
}

void main().catch((e) => {
  console.error(e);
  process.exit(1);
});
