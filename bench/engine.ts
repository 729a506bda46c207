/**
 * Engine benchmark (CPU EP, default tiny-lm size). Prints numbers; not a test.
 *
 *   node --import tsx bench/engine.ts [--threads N] [--tokens T] [--quick]
 *
 * Measures, through a spawned engine process over gRPC:
 *   - Generate tokens/s at batch 1, 16, 256, 1024 (one call, T tokens per sequence)
 *   - 64 concurrent single-sequence callers (dynamic batching) vs one 64-sequence call
 *   - Update samples/s (and trained tokens/s)
 *   - fixed per-call overhead (Health round trip; Generate of 1 token)
 * and in-process (no gRPC): fused rollout (one run, Loop over T tokens) vs one
 * run per token step.
 */
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { sessionFactory } from '../engines/onnx/device';
import { spawnEngine } from '../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';
import { seedKey } from '../engines/families/philox';
import { initWeights } from '../engines/families/tiny-lm/init';
import type { GenerateRow } from '../engines/onnx/model-runtime';
import { TinyLmRuntime } from '../engines/onnx/tiny-lm/runtime';
import { normalizeSpec, paramLayout } from '../engines/families/tiny-lm/spec';
import type { UpdateSampleInput } from '../engines/protocol/types';
import { fmt, time } from './lib/timing';

/** Median wall time (ms) of `reps` runs after one warm-up. */
const wallMs = async (reps: number, fn: () => Promise<unknown>) => (await time(reps, fn)).wall;

const { values } = parseArgs({
  options: { threads: { type: 'string' }, tokens: { type: 'string' }, quick: { type: 'boolean' } },
});
const threads = Number(values.threads ?? 1);
const T = Number(values.tokens ?? 32);
const quick = !!values.quick;
const SPEC = normalizeSpec({ vocabSize: 32 });

function sequences(n: number, salt: number) {
  return Array.from({ length: n }, (_, i) => ({ context: [(i * 7) % 32, (i * 3 + salt) % 32, 5], seed: salt * 100000 + i }));
}

async function main() {
  const cmd = `node --import tsx bench/engine.ts${values.threads ? ` --threads ${threads}` : ''}${values.tokens ? ` --tokens ${T}` : ''}${quick ? ' --quick' : ''}`;
  console.log(`# ${cmd}`);
  console.log(`# spec ${JSON.stringify(SPEC)} (${paramLayout(SPEC).total} parameters), CPU EP, intra-op threads ${threads}, ${T} tokens per sequence`);
  console.log(`# node ${process.version}, ${require('node:os').cpus().length} cores (${require('node:os').cpus()[0]?.model ?? '?'})`);

  const engine = await spawnEngine(['--device', 'cpu', '--port', '0', '--threads', String(threads)], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  const client = await EngineClient.connect(engine.listening.address);
  try {
    await client.initModel({ modelKey: 'bench', spec: SPEC, seed: 1 });
    const sampling = { temperature: 1, topK: 0, topP: 0, maxTokens: T };

    console.log('\n## Generate over gRPC (one call, B sequences x T tokens)');
    console.log('batch | ms/call | tokens/s');
    for (const B of [1, 16, 256, 1024]) {
      const reps = quick ? 3 : B >= 256 ? 5 : 20;
      let salt = 0;
      const ms = await wallMs(reps, () => client.generate({ modelKey: 'bench', version: 0, sequences: sequences(B, salt++), sampling }));
      console.log(`${String(B).padStart(5)} | ${fmt(ms, 2).padStart(7)} | ${fmt((B * T) / (ms / 1000))}`);
    }

    console.log('\n## Dynamic batching: 64 concurrent single-sequence callers vs one 64-sequence call (T tokens each)');
    // The three variants run interleaved, round by round, so machine-load drift hits them alike.
    //  (a) callers sharing one EngineClient: merged client-side into one RPC per event-loop turn, then batched by the engine;
    //  (b) callers on 64 connections without client coalescing: 64 RPCs, batched by the engine only.
    const plain = await Promise.all(Array.from({ length: 64 }, () => EngineClient.connect(engine.listening.address, { coalesce: false })));
    const rounds = quick ? 4 : 20;
    const t = { big: [] as number[], shared: [] as number[], separate: [] as number[] };
    const runsBefore = (await client.stats()).generateBatches;
    try {
      let salt = 1000;
      for (let r = 0; r <= rounds; r++) {
        const measure = async (fn: () => Promise<unknown>) => {
          const t0 = performance.now();
          await fn();
          return performance.now() - t0;
        };
        const big = await measure(() => client.generate({ modelKey: 'bench', version: 0, sequences: sequences(64, salt++), sampling }));
        const shared = await measure(() =>
          Promise.all(sequences(64, salt++).map((q) => client.generate({ modelKey: 'bench', version: 0, sequences: [q], sampling }))),
        );
        const separate = await measure(() =>
          Promise.all(sequences(64, salt++).map((q, i) => plain[i]!.generate({ modelKey: 'bench', version: 0, sequences: [q], sampling }))),
        );
        if (r > 0) {
          t.big.push(big);
          t.shared.push(shared);
          t.separate.push(separate);
        }
      }
    } finally {
      for (const c of plain) c.close();
    }
    const runs = (await client.stats()).generateBatches - runsBefore;
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
    const big = med(t.big);
    const line = (label: string, ms: number) =>
      console.log(`${label.padEnd(56)} ${fmt(ms, 2).padStart(7)} ms  ${fmt((64 * T) / (ms / 1000)).padStart(8)} tokens/s  ratio ${fmt(big / ms, 2)}`);
    line('one 64-sequence call', big);
    line('64 callers, shared client (coalesced)', med(t.shared));
    line('64 callers, 64 connections (engine-side batching only)', med(t.separate));
    console.log(
      `(medians of ${rounds} interleaved rounds; ${3 * (rounds + 1)} scenarios ran as ${runs} fused runs; ratio = throughput vs the one call, goal >= 0.8)`,
    );

    console.log('\n## Update over gRPC (samples: 4-token context + 16 generated tokens, all trained)');
    const gen = await client.generate({ modelKey: 'bench', version: 0, sequences: sequences(256, 7), sampling: { ...sampling, maxTokens: 16 } });
    const samples: UpdateSampleInput[] = gen.sequences.map((s, i) => ({
      context: [1, 2, 3, i % 32],
      tokens: s.tokens,
      lossMask: s.tokens.map(() => 1),
      advantages: s.tokens.map(() => (i % 2 ? 0.5 : -0.5)),
      oldLogprobs: s.logprobs,
      lossWeights: s.tokens.map(() => 1 / (256 * 16)),
    }));
    console.log('samples | K | ms/update | samples/s | trained tokens/s');
    let rid = 0;
    for (const [n, K] of [
      [16, 1],
      [64, 1],
      [256, 1],
      [256, 4],
    ] as const) {
      const ms = await wallMs(quick ? 2 : 5, () =>
        client.update({
          modelKey: 'bench',
          baseVersion: 0,
          requestId: `bench-${rid++}`,
          allowStaleBase: true,
          samples: samples.slice(0, n),
          settings: { innerSteps: K },
        }),
      );
      console.log(`${String(n).padStart(7)} | ${K} | ${fmt(ms, 2).padStart(9)} | ${fmt(n / (ms / 1000)).padStart(9)} | ${fmt((n * 16) / (ms / 1000))}`);
    }

    console.log('\n## Fixed per-call overhead over gRPC');
    const health = await wallMs(quick ? 20 : 200, () => client.health());
    const one = await wallMs(quick ? 20 : 200, () =>
      client.generate({ modelKey: 'bench', version: 0, sequences: [{ context: [1], seed: 1 }], sampling: { maxTokens: 1 } }),
    );
    const window = (await client.stats()).batchWindowMs;
    console.log(
      `Health round trip: ${fmt(health * 1000)} us; Generate(1 sequence, 1 token): ${fmt(one * 1000)} us (includes the ${fmt(window, 1)} ms batching window)`,
    );
  } finally {
    client.close();
    engine.child.kill('SIGTERM');
  }

  console.log('\n## In-process: fused rollout (one run, Loop over tokens) vs one run per token step');
  const rt = new TinyLmRuntime(SPEC, sessionFactory('cpu', { intraOpThreads: threads }), { minRows: 2 });
  await rt.warm();
  const theta = initWeights(SPEC, 1);
  const rows = (B: number): GenerateRow[] =>
    sequences(B, 3).map((s) => ({ context: s.context, seedKey: seedKey(s.seed), temperature: 1, topK: 0, topP: 0, maxTokens: T, stopTokens: [] }));
  console.log('batch | fused ms | per-step ms | fused tokens/s | per-step tokens/s');
  for (const B of [1, 16, 256, 1024]) {
    const r = rows(B);
    const fused = await wallMs(quick ? 2 : 5, () => rt.generate(theta, r));
    const stepped = await wallMs(quick ? 2 : 5, async () => {
      const ctx = r.map((x) => Array.from(x.context));
      for (let t = 0; t < T; t++) {
        // One token per run; per-step seeds stand in for the per-token uniforms.
        const out = await rt.generate(
          theta,
          r.map((x, b) => ({ ...x, context: ctx[b]!, maxTokens: 1, seedKey: [x.seedKey[0], t] })),
        );
        out.forEach((o, b) => ctx[b]!.push(o.tokens[0]!));
      }
    });
    console.log(
      `${String(B).padStart(5)} | ${fmt(fused, 2).padStart(8)} | ${fmt(stepped, 2).padStart(11)} | ${fmt((B * T) / (fused / 1000)).padStart(14)} | ${fmt((B * T) / (stepped / 1000))}`,
    );
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
