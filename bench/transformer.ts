/**
 * Transformer benchmark (CPU EP). Prints numbers; not a test.
 *
 *   node --import tsx bench/transformer.ts [--threads N] [--reps N (5)] [--quick (1 rep)] [--no-torch]
 *
 * For a ~1M and a ~10M parameter config (GPT-2 layout, vocab 1024):
 *   - Generate tokens/s at batch 1, 8, 32, 128 (context 16, 16 new tokens, temperature 1)
 *   - decode ms/token at positions 16 and 512 (batch 8): (run of 33 tokens − run of 1 token) / 32,
 *     so prefill is excluded
 *   - Update trained tokens/s (16 sequences of 16 context + 48 trained tokens, one AdamW step)
 *   - the same three in PyTorch on CPU with the same shapes and thread count
 *     (bench/transformer_torch.py; skipped with a message when python3 has no torch)
 *   - engine over gRPC vs the same session run directly: Generate at batch 32, interleaved rounds
 *   - peak RSS of one large update (32 × 64 tokens, ~10M) in one micro-batch vs the default
 *     256 MiB micro-batches, each in a fresh child process
 * In-process numbers are medians of wall time, with this process's CPU time in parentheses (one
 * intra-op thread: on an idle machine they agree; on a loaded one CPU time is the steadier).
 */
import { execFileSync, spawn } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { defaultMemoryPolicy, sessionFactory } from '../engines/onnx/device';
import { updateSettings } from '../engines/onnx/validate';
import { spawnEngine } from '../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';
import type { GenerateRow, UpdateSample } from '../engines/onnx/model-runtime';
import { seedKey } from '../engines/families/philox';
import { initTransformerWeights } from '../engines/families/transformer/init';
import { stateBytes, updateBytesPerSequence } from '../engines/families/transformer/memory';
import { TransformerRuntime } from '../engines/onnx/transformer/runtime';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec } from '../engines/families/transformer/spec';
import { DEFAULT_UPDATE_SETTINGS } from '../engines/protocol/types';
import { fmt, time, type Timing } from './lib/timing';

const { values } = parseArgs({
  options: {
    threads: { type: 'string' },
    quick: { type: 'boolean' },
    reps: { type: 'string' },
    'no-torch': { type: 'boolean' },
    'rss-child': { type: 'string' },
  },
});
const threads = Number(values.threads ?? 1);
const quick = !!values.quick;
const reps = Number(values.reps ?? (quick ? 1 : 5));
const V = 1024;
const CONFIGS: Record<string, TransformerSpec> = {
  '~1M': normalizeTransformerSpec({ vocabSize: V, width: 128, layers: 4, heads: 4, maxSeq: 560 }),
  '~10M': normalizeTransformerSpec({ vocabSize: V, width: 320, layers: 8, heads: 8, maxSeq: 560 }),
};
/** Shared with transformer_torch.py so both columns run the same work. */
const W = {
  generateBatches: [1, 8, 32, 128],
  generateContext: 16,
  generateTokens: 16,
  decodeBatch: 8,
  decodePositions: [16, 512],
  decodeTokens: 32,
  updateSequences: 16,
  updateContext: 16,
  updateTokens: 48,
};
/** The peak-RSS update: 32 sequences of 16 context + 48 trained tokens on the ~10M config. */
const RSS = { config: '~10M', sequences: 32 };

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

const updateSamples = (n: number): UpdateSample[] =>
  Array.from({ length: n }, (_, i) => {
    const t = W.updateTokens;
    return {
      context: Array.from({ length: W.updateContext }, (_, j) => (i + j) % V),
      tokens: Array.from({ length: t }, (_, j) => (i * 5 + j) % V),
      lossMask: new Array(t).fill(1),
      advantages: Array.from({ length: t }, (_, j) => ((i + j) % 3) - 1),
      oldLogprobs: new Array(t).fill(-Math.log(V)),
      lossWeights: new Array(t).fill(1 / (n * t)),
      refLogprobs: [],
    };
  });

const runtime = (spec: TransformerSpec, microBatchBytes = defaultMemoryPolicy().microBatchBytes) =>
  new TransformerRuntime(spec, sessionFactory('cpu', { intraOpThreads: threads, memory: { ...defaultMemoryPolicy(), microBatchBytes } }));

const optimState = (spec: TransformerSpec) => {
  const P = paramLayout(spec).total;
  return { theta: initTransformerWeights(spec, 1), m: new Float32Array(P), v: new Float32Array(P), step: 0 };
};

/** One row of results per config: label → [onnx, torch] cells. */
type Table = Map<string, Record<string, [string, string]>>;
const both = (t: Timing, per: (ms: number) => number, digits = 0) => `${fmt(per(t.wall), digits)} (${fmt(per(t.cpu), digits)})`;
const tokensPerS = (n: number) => (ms: number) => n / (ms / 1000);

async function onnxColumn(table: Table) {
  for (const [name, spec] of Object.entries(CONFIGS)) {
    const rt = runtime(spec);
    await rt.warm();
    const theta = initTransformerWeights(spec, 1);
    const cell = (label: string, v: string) => ((table.get(label) ?? table.set(label, {}).get(label)!)[name] = [v, '']);
    for (const B of W.generateBatches) {
      const t = await time(reps, () => rt.generate(theta, rows(B, W.generateContext, W.generateTokens)));
      cell(`generate batch ${B} (tokens/s)`, both(t, tokensPerS(B * W.generateTokens)));
    }
    for (const C of W.decodePositions) {
      const one = await time(reps, () => rt.generate(theta, rows(W.decodeBatch, C, 1)));
      const many = await time(reps, () => rt.generate(theta, rows(W.decodeBatch, C, W.decodeTokens + 1)));
      cell(
        `decode at position ${C} (ms/token, batch ${W.decodeBatch})`,
        both({ wall: many.wall - one.wall, cpu: many.cpu - one.cpu }, (ms) => ms / W.decodeTokens, 2),
      );
    }
    const t = await time(reps, () => rt.update(optimState(spec), updateSamples(W.updateSequences), updateSettings({ ...DEFAULT_UPDATE_SETTINGS })));
    cell('update (trained tokens/s)', both(t, tokensPerS(W.updateSequences * W.updateTokens)));
    console.error(`onnx ${name} done`);
  }
}

/** A python3 that imports torch (pyenv's first, then Debian's), or why none does. */
function torchPython(): { python?: string; why: string } {
  const tried: string[] = [];
  for (const python of ['python3', '/usr/bin/python3']) {
    try {
      const v = execFileSync(python, ['-c', 'import torch; print(torch.__version__)'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
      return { python, why: `${python}, torch ${v}` };
    } catch {
      tried.push(python);
    }
  }
  return { why: `skipped: no torch in ${tried.join(' or ')} (apt-get install python3-torch)` };
}

async function torchColumn(table: Table, python: string) {
  const script = path.join(__dirname, 'transformer_torch.py');
  const args = [script, '--threads', String(threads), '--reps', String(reps), '--configs', JSON.stringify(CONFIGS), '--workloads', JSON.stringify(W)];
  const child = spawn(python, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`${python} bench/transformer_torch.py exited with ${code}`);
  for (const line of out.trim().split('\n')) {
    const r = JSON.parse(line) as Timing & { config: string; metric: string; batch?: number; position?: number };
    const set = (label: string, v: string) => (table.get(label)![r.config]![1] = v);
    if (r.metric === 'generate') set(`generate batch ${r.batch} (tokens/s)`, both(r, tokensPerS(r.batch! * W.generateTokens)));
    if (r.metric === 'decode')
      set(
        `decode at position ${r.position} (ms/token, batch ${W.decodeBatch})`,
        both(r, (ms) => ms, 2),
      );
    if (r.metric === 'update') set('update (trained tokens/s)', both(r, tokensPerS(W.updateSequences * W.updateTokens)));
  }
}

/** Generate at batch 32 through a spawned engine over gRPC vs the same runtime in-process, interleaved. */
async function grpcRatio(name: string, spec: TransformerSpec): Promise<string> {
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', String(threads), '--batch-shape', 'free', '--max-batch', '128'], {
    quiet: true,
    command: BUILT_IN_ENGINE_COMMAND,
  });
  const client = await EngineClient.connect(engine.listening.address);
  try {
    await client.initModel({ modelKey: 'bench', spec, seed: 1 });
    const rt = runtime(spec);
    const theta = initTransformerWeights(spec, 1);
    const r = rows(32, W.generateContext, W.generateTokens);
    const viaGrpc = () =>
      client.generate({
        modelKey: 'bench',
        version: 0,
        sequences: r.map((x, i) => ({ context: Array.from(x.context), seed: i + 1 })),
        sampling: { temperature: 1, topK: 0, topP: 0, maxTokens: W.generateTokens },
      });
    const grpc: number[] = [];
    const direct: number[] = [];
    const wall = async (fn: () => Promise<unknown>) => {
      const t0 = performance.now();
      await fn();
      return performance.now() - t0;
    };
    for (let round = 0; round <= reps; round++) {
      const g = await wall(viaGrpc);
      const d = await wall(() => rt.generate(theta, r));
      if (round === 0) continue; // warm-up
      grpc.push(g);
      direct.push(d);
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
    return `${name}: engine over gRPC ${fmt(med(grpc), 1)} ms vs direct ${fmt(med(direct), 1)} ms per batch-32 Generate → ratio ${fmt(med(direct) / med(grpc), 2)} (goal ≥ 0.9)`;
  } finally {
    client.close();
    engine.child.kill('SIGTERM');
  }
}

/** Child mode: one update of the RSS batch with the given micro-batch bytes; prints peak RSS. */
async function rssChild(microBatchBytes: number) {
  const spec = CONFIGS[RSS.config]!;
  const rt = runtime(spec, microBatchBytes);
  const t0 = performance.now();
  await rt.update(optimState(spec), updateSamples(RSS.sequences), updateSettings({ ...DEFAULT_UPDATE_SETTINGS }));
  console.log(JSON.stringify({ maxRssBytes: process.resourceUsage().maxRSS * 1024, ms: performance.now() - t0 }));
}

function rssLine(microBatchBytes: number, label: string): string {
  const out = execFileSync(process.execPath, [...process.execArgv, __filename, '--threads', String(threads), '--rss-child', String(microBatchBytes)], {
    encoding: 'utf8',
  });
  const r = JSON.parse(out.trim().split('\n').pop()!) as { maxRssBytes: number; ms: number };
  return `${label}: peak RSS ${fmt(r.maxRssBytes / 2 ** 20)} MiB, ${fmt(r.ms)} ms`;
}

async function main() {
  if (values['rss-child'] !== undefined) return rssChild(Number(values['rss-child']));
  const cpu = os.cpus();
  console.log(`# node --import tsx bench/transformer.ts --threads ${threads} --reps ${reps}`);
  console.log(
    `# ${cpu.length} cores (${cpu[0]?.model ?? '?'}), load average ${os
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}, ${new Date().toISOString().slice(0, 10)}`,
  );
  console.log(`# CPU EP, ${threads} intra-op thread(s); cells: ONNX | PyTorch, each "wall-time figure (CPU-time figure)", medians of ${reps}`);
  const table: Table = new Map();
  await onnxColumn(table);
  const torch = values['no-torch'] ? { why: 'skipped (--no-torch)' } : torchPython();
  if (torch.python) await torchColumn(table, torch.python);
  console.log(`# PyTorch: ${torch.why}\n`);
  const names = Object.keys(CONFIGS);
  console.log(`| | ${names.map((n) => `${n} (${fmt(paramLayout(CONFIGS[n]!).total)} params) ONNX | PyTorch`).join(' | ')} |`);
  console.log(`|---|${names.map(() => '---|---').join('|')}|`);
  for (const [label, cells] of table) console.log(`| ${label} | ${names.map((n) => `${cells[n]![0]} | ${cells[n]![1] || '–'}`).join(' | ')} |`);

  console.log('\n## Engine over gRPC vs the same session run directly');
  for (const [name, spec] of Object.entries(CONFIGS)) console.log(await grpcRatio(name, spec));

  const spec = CONFIGS[RSS.config]!;
  const S = W.updateContext + W.updateTokens - 1;
  console.log(`\n## Peak RSS of one update, ${RSS.sequences} × ${S + 1} tokens on ${RSS.config} (fresh process each)`);
  console.log(
    `# estimate (transformer/memory.ts): state ${fmt(stateBytes(spec) / 2 ** 20)} MiB + ${fmt(updateBytesPerSequence(spec, S) / 2 ** 20, 1)} MiB per sequence`,
  );
  console.log(rssLine(2 ** 50, 'one micro-batch (the whole batch)'));
  console.log(rssLine(defaultMemoryPolicy().microBatchBytes, 'default 256 MiB micro-batches'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
