/**
 * The PyTorch engine's Update in micro-batches (issue #28): `--micro-batch-bytes` cuts the batch
 * into groups whose gradients add up (engines/pytorch/update.py), `--activation-checkpointing`
 * recomputes each layer in the backward, `--dtype` is fp32 on CPU. Real engine processes over gRPC;
 * skips (saying why) where the engine's Python environment cannot be made.
 *
 * - The same request with the same split gives the same bytes (weights and AdamW state), run
 *   twice; checkpointing changes no bit.
 * - One sequence a micro-batch against the whole batch at once: only the order of the gradient's
 *   additions differs, so the weights agree within the float32 bounds of pytorch-interop.test.ts
 *   (AdamW moves each weight by ~lr·m/√v, which amplifies rounding in tiny gradients) and the
 *   metrics within 1e-5 relative.
 * - `--dtype bf16` on a CPU and an unknown dtype are refused at start, naming the flag.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import type { UpdateRequest } from '../../../engines/protocol/types';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { childProcesses } from '../../../testing/chaos/stack';
import { TINY_TRANSFORMER } from '../../helpers/tiny-transformer';

const engine = pytorchEngine();
const skip = 'missing' in engine ? engine.missing : false;
const spawn = (flags: string[]) =>
  spawnEngine([...(flags.includes('--device') ? [] : ['--device', 'cpu']), '--port', '0', ...flags], {
    quiet: true,
    command: (engine as { command: string[] }).command,
    startTimeoutMs: 120_000,
  });

const FLAGS = {
  whole: [] as string[], // the default 256 MiB holds the whole batch of this small model
  perSequence: ['--micro-batch-bytes', '1'], // at least one sequence a micro-batch: one each
  checkpointed: ['--micro-batch-bytes', '1', '--activation-checkpointing'],
  // two gloo ranks (engines/pytorch/parallel.py), one sequence a micro-batch on each
  parallel: ['--device', 'cpu,cpu', '--micro-batch-bytes', '1'],
};
type Kind = keyof typeof FLAGS;
const procs: Partial<Record<Kind, SpawnedEngine>> = {};
const clients: Partial<Record<Kind, EngineClient>> = {};

before(async () => {
  if (skip) return;
  for (const k of Object.keys(FLAGS) as Kind[]) {
    procs[k] = await spawn(FLAGS[k]);
    clients[k] = await EngineClient.connect(procs[k]!.listening.address);
  }
});

after(() => {
  for (const k of Object.keys(FLAGS) as Kind[]) {
    clients[k]?.close();
    procs[k]?.child.kill('SIGTERM');
  }
});

const SPEC = TINY_TRANSFORMER;
const LR = 0.01;
const INNER = 2;

function tokens(seed: number, n: number, V: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => ((x = (x * 1103515245 + 12345) >>> 0) >>> 8) % V);
}

/** 6 samples of different lengths (or the first `n`); the last trains no token (a micro-batch of its own with nothing to add). */
function request(modelKey: string, requestId: string, o: { n?: number; lr?: number } = {}): UpdateRequest {
  const V = SPEC.vocabSize;
  const samples = [0, 1, 2, 3, 4, 5].slice(0, o.n ?? 6).map((i) => {
    const toks = tokens(10 + i, 4 + 3 * i, V);
    return {
      context: tokens(20 + i, 2 + i, V),
      tokens: toks,
      lossMask: toks.map((_, t) => (i === 5 || (t === 0 && i === 1) ? 0 : 1)),
      advantages: toks.map((_, t) => (i % 2 === 0 ? 1 : -1) * (0.5 + 0.1 * t)),
      oldLogprobs: toks.map((_, t) => -Math.log(V) + 0.3 * Math.sin(i + t)),
      lossWeights: toks.map(() => 1 / 40),
      refLogprobs: i < 2 ? toks.map(() => -Math.log(V) - 0.05) : [],
    };
  });
  return { modelKey, baseVersion: 0, requestId, samples, settings: { lr: o.lr ?? LR, innerSteps: INNER, entropyCoef: 0.01, klCoef: 0.1 } };
}

async function updated(kind: Kind, key: string, o: { n?: number; lr?: number } = {}) {
  const c = clients[kind]!;
  await c.initModel({ modelKey: key, spec: SPEC, seed: 42 });
  const res = await c.update(request(key, `${key}/u`, o));
  const exp = await c.exportVersion({ modelKey: key, version: 1 });
  return { res, exp };
}

const f32 = (a: Uint8Array) => new Float32Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));

test('micro-batched updates: bitwise repeatable per split, checkpointing changes no bit, close to the whole batch', { skip, timeout: 600_000 }, async () => {
  const first = await updated('perSequence', 'a');
  const again = await updated('perSequence', 'b');
  assert.ok(same(first.exp.weights, again.exp.weights), 'same split twice: the same weights');
  assert.ok(same(first.exp.optimizerState, again.exp.optimizerState), 'same split twice: the same AdamW state');

  const ckpt = await updated('checkpointed', 'a');
  assert.ok(same(first.exp.weights, ckpt.exp.weights), 'activation checkpointing: the same weights');
  assert.ok(same(first.exp.optimizerState, ckpt.exp.optimizerState), 'activation checkpointing: the same AdamW state');

  const whole = await updated('whole', 'a');
  assert.equal(whole.res.tokens, first.res.tokens);
  const x = f32(whole.exp.weights);
  const y = f32(first.exp.weights);
  const diffs = Float64Array.from(x, (v, i) => Math.abs(v - y[i]!)).sort();
  const max = diffs.at(-1)!;
  const p999 = diffs[Math.floor(0.999 * (diffs.length - 1))]!;
  console.log(`[micro-batch] whole batch vs one sequence a micro-batch: max|Δθ| ${max.toExponential(2)}, p99.9 ${p999.toExponential(2)} (${x.length} weights)`);
  // the flag took effect: summing six micro-batches' gradients rounds differently from one backward
  assert.ok(max > 0, 'one sequence a micro-batch gives other bits than the whole batch');
  assert.ok(p999 <= 1e-4 && max <= 0.05 * LR * INNER, `whole vs micro-batched: max ${max}, p99.9 ${p999}`);
  for (const k of ['loss', 'pgLoss', 'klLoss', 'entropy', 'approxKl', 'clipFraction'] as const) {
    const a = whole.res.metrics![k]!;
    const b = first.res.metrics![k]!;
    assert.ok(Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(a)), `metric ${k}: ${a} vs ${b}`);
  }
});

const maxDiff = (a: Uint8Array, b: Uint8Array) => {
  const x = f32(a);
  const y = f32(b);
  return x.reduce((m, v, i) => Math.max(m, Math.abs(v - y[i]!)), 0);
};

test('data-parallel updates: 2 gloo ranks give the update of one process (within 1e-6 at the default lr)', { skip, timeout: 600_000 }, async () => {
  // one engine endpoint, a second rank under it
  const ranks = childProcesses(procs.parallel!.child.pid!).filter((c) => c.argv.some((a) => a.endsWith('parallel.py')));
  assert.equal(ranks.length, 1, 'the engine started rank 1 (parallel.py)');
  // shards on the micro-batch boundaries: rank sums g0 and g1 add as one process adds them, bit for bit
  const two = { n: 2, lr: 1e-3 };
  const [p2, s2] = await Promise.all([updated('parallel', 'p2', two), updated('perSequence', 'p2', two)]);
  assert.ok(same(p2.exp.weights, s2.exp.weights) && same(p2.exp.optimizerState, s2.exp.optimizerState), '2 samples: bit-identical');
  // 6 samples: rank 0 adds g0..g2, rank 1 g3..g5, then the two sums; one process adds all six in turn
  const six = { lr: 1e-3 };
  const [p6, s6, w6] = await Promise.all([updated('parallel', 'p6', six), updated('perSequence', 'p6', six), updated('whole', 'p6', six)]);
  const vsSeq = maxDiff(p6.exp.weights, s6.exp.weights);
  const vsWhole = maxDiff(p6.exp.weights, w6.exp.weights);
  console.log(
    `[data-parallel] 6 samples, lr 1e-3, 2 inner steps: max|Δθ| ${vsSeq.toExponential(2)} vs one process (same micro-batches), ${vsWhole.toExponential(2)} vs one micro-batch`,
  );
  assert.ok(vsSeq <= 1e-6 && vsWhole <= 1e-6, `2 ranks vs 1 process: ${vsSeq}, ${vsWhole}`);
  assert.equal(p6.res.tokens, s6.res.tokens);
  for (const k of ['loss', 'entropy', 'gradNorm'] as const) {
    const a = p6.res.metrics![k]!;
    const b = s6.res.metrics![k]!;
    assert.ok(Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(a)), `metric ${k}: ${a} vs ${b}`);
  }
});

test('--dtype: bf16 needs CUDA, an unknown one is refused; both name the flag', { skip, timeout: 300_000 }, async () => {
  await assert.rejects(spawn(['--dtype', 'bf16']), /--dtype bf16 needs a CUDA device/);
  await assert.rejects(spawn(['--dtype', 'fp8']), /--dtype must be one of fp32, bf16/);
  await assert.rejects(spawn(['--micro-batch-bytes', '0']), /--micro-batch-bytes must be a positive integer/);
  const fp32 = await spawn(['--dtype', 'fp32']);
  fp32.child.kill('SIGTERM');
});
