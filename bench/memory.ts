/**
 * Peak RSS of the built-in engine against transformer/memory.ts's estimate.
 *
 *   node --import tsx bench/memory.ts [--vocab 100,151669] [--seq 32,128,2048] [--cap-mb 3000]
 *
 * Each case spawns a fresh engine (processes/onnx-engine.ts) under a hard cap
 * (`prlimit --data` (private writable memory) on the child, and SIGKILL when its VmRSS passes --cap-mb),
 * loads a qwen2-layout spec (hidden 16, 1 layer, 4 heads, 1 KV head, mlp 32,
 * tied embeddings) with maxSeq = S, runs one training step's calls — Generate
 * for 8 rows (2 groups × 4) of S/2 context + S/2 tokens, Score of those
 * sequences, then 2 Updates — and reads the engine's peak RSS (VmHWM of
 * /proc/<pid>/status). The estimate is memory.ts's `enginePeakBytes` for that
 * work. The 152k row is the issue's checkpoint shape (vocab of Qwen3's
 * tokenizer); weights come from InitModel, which allocates what a loaded
 * checkpoint of that shape does.
 */
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { enginePeakBytes } from '../engines/families/transformer/memory';
import { normalizeTransformerSpec, type TransformerSpec } from '../engines/families/transformer/spec';
import { spawnEngine } from '../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';
import { procStatusBytes } from './lib/timing';

export const QWEN3_VOCAB = 151_669;
const ROWS = 8;

/** The qwen2-layout shape at vocabulary V and maxSeq S. */
export function qwen2Spec(V: number, S: number): TransformerSpec {
  return normalizeTransformerSpec({
    vocabSize: V,
    width: 16,
    layers: 1,
    heads: 4,
    kvHeads: 1,
    mlpWidth: 32,
    maxSeq: S,
    positions: 'rope',
    norm: 'rmsnorm',
    mlp: 'swiglu',
    tiedHead: true,
  });
}

export interface MemoryCase {
  vocab: number;
  seq: number;
  /** memory.ts's estimate of the engine's peak for this work */
  estimate: number;
  /** VmHWM of the engine process; the last value seen when it was killed at the cap */
  peakRss: number;
  /** the engine passed the cap and was killed (or a call failed: see error) */
  hitCap: boolean;
  error?: string;
  updates: number;
  /** VmHWM after each call (MiB), e.g. "init 120, generate 300, …" */
  phases: string;
}

/** One engine, one training step's calls on qwen2Spec(vocab, seq), peak RSS under a hard cap. */
export async function measureCase(vocab: number, seq: number, capBytes: number, engineArgs: string[] = []): Promise<MemoryCase> {
  const spec = qwen2Spec(vocab, seq);
  const half = Math.max(1, Math.floor(seq / 2));
  const estimate = enginePeakBytes(spec, { rows: ROWS, seq });
  // The data limit bounds the engine even between two RSS samples (node + ORT reserve ~1.5 GB of it unused).
  const as = capBytes + 1.5 * 2 ** 30;
  // --batch-shape free: skip the one-time batch-invariance probe (up to --max-batch rows), not part of a training step
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--batch-shape', 'free', ...engineArgs], {
    quiet: true,
    command: ['prlimit', `--data=${Math.round(as)}`, '--', ...BUILT_IN_ENGINE_COMMAND],
  });
  const pid = engine.child.pid!;
  let peak = 0;
  let hitCap = false;
  const watch = setInterval(() => {
    try {
      peak = Math.max(peak, procStatusBytes(pid, 'VmHWM'));
      if (procStatusBytes(pid, 'VmRSS') > capBytes) {
        hitCap = true;
        engine.child.kill('SIGKILL');
      }
    } catch {
      // exited
    }
  }, 20);
  const client = await EngineClient.connect(engine.listening.address);
  let updates = 0;
  let error: string | undefined;
  const phases: string[] = [];
  const mark = (name: string) => phases.push(`${name} ${(procStatusBytes(pid, 'VmHWM') / 2 ** 20).toFixed(0)}`);
  try {
    await client.initModel({ modelKey: 'm', spec: { ...spec, family: 'transformer' }, seed: 1 });
    mark('init');
    const context = Array.from({ length: half }, (_, i) => (i * 7919) % vocab);
    const gen = await client.generate({
      modelKey: 'm',
      version: 0,
      sequences: Array.from({ length: ROWS }, (_, i) => ({ context, seed: i + 1 })),
      sampling: { maxTokens: seq - half, temperature: 1 },
    });
    mark('generate');
    const seqs = gen.sequences.map((s) => ({ context, tokens: s.tokens.length > 0 ? s.tokens : [0] }));
    const scored = await client.score({ modelKey: 'm', version: 0, sequences: seqs });
    mark('score');
    for (let step = 0; step < 2; step++) {
      await client.update({
        modelKey: 'm',
        baseVersion: step,
        requestId: `u${step}`,
        samples: seqs.map((s, i) => ({
          ...s,
          lossMask: s.tokens.map(() => 1),
          advantages: s.tokens.map(() => (i % 2 ? 1 : -1)),
          oldLogprobs: Array.from(scored.sequences[i]!.logprobs),
          lossWeights: s.tokens.map(() => 1 / s.tokens.length),
        })),
      });
      updates++;
      mark(`update ${updates}`);
    }
    peak = Math.max(peak, procStatusBytes(pid, 'VmHWM'));
  } catch (e) {
    error = (e as Error).message.split('\n')[0];
  } finally {
    clearInterval(watch);
    client.close();
    engine.child.kill('SIGTERM');
    await new Promise((r) => (engine.child.exitCode !== null || engine.child.signalCode !== null ? r(null) : engine.child.once('exit', r)));
  }
  return { vocab, seq, estimate, peakRss: peak, hitCap, error, updates, phases: phases.join(', ') };
}

const mb = (b: number) => (b / 2 ** 20).toFixed(0);

export function formatCase(c: MemoryCase): string {
  const ratio = c.peakRss > 0 ? (c.peakRss / c.estimate).toFixed(2) : '-';
  const note = c.hitCap ? ' HIT CAP' : c.error ? ` failed: ${c.error}` : '';
  return `| ${c.vocab} | ${c.seq} | ${mb(c.estimate)} | ${mb(c.peakRss)} | ${ratio} | ${c.updates}${note} | ${c.phases} |`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { vocab: { type: 'string' }, seq: { type: 'string' }, 'cap-mb': { type: 'string' } } });
  const vocabs = (values.vocab ?? `100,32000,${QWEN3_VOCAB}`).split(',').map(Number);
  const seqs = (values.seq ?? '32,128,512,2048').split(',').map(Number);
  const cap = Number(values['cap-mb'] ?? 3000) * 2 ** 20;
  console.log('| vocab | seq | estimate MiB | peak RSS MiB | measured/estimate | updates | peak after each call (MiB) |');
  console.log('|---|---|---|---|---|---|---|');
  for (const v of vocabs) for (const s of seqs) console.log(formatCase(await measureCase(v, s, cap)));
}

if (require.main === module)
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
