/**
 * The PyTorch engine (engines/pytorch/) and the built-in ONNX engine implement the
 * same transformer: weights exported by one load into the other with the same
 * sha256, Score agrees within float32 rounding, the same Update from the same
 * base gives nearly the same weights and metrics, and greedy Generate gives the
 * same tokens. Both run as real processes over gRPC. Skips (saying
 * why) where the engine's Python environment cannot be made.
 *
 * Tolerances come from measurements on this machine (printed by each test):
 * Score |Δ| ≈ 1e-6 over these small models, so 1e-4 leaves ample room while still
 * catching any layout or formula difference (those give |Δ| ~ 1e-2 and up).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EngineClient } from '../../../engines/protocol/client';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';
import type { ModelSpecInput, UpdateRequest } from '../../../engines/protocol/types';
import { referenceForward } from '../../../engines/onnx/transformer/reference';
import { normalizeTransformerSpec, paramLayout } from '../../../engines/families/transformer/spec';
import { pytorchEngine } from '../../../stack/pytorch-engine';

const engine = pytorchEngine();
const skip = 'missing' in engine ? engine.missing : false;

const SCORE_TOL = 1e-4;
/**
 * Update: AdamW moves each parameter by about lr·m/√v per step, whatever the gradient's size, so a
 * parameter with a small gradient (|g| ~ 1e-6 next to 0.4 elsewhere: float32 rounding is then a
 * percent of it) moves by a visibly different fraction of lr in the second step (m/√v mixes the two
 * steps' gradients). Measured with lr 0.01 and 2 steps: p99.9 of |Δθ| 4e-7 … 3e-5, max 2e-6 … 1e-4
 * (the worst in l*.w2 / l*.bk: bk's gradient is 0 in exact arithmetic, softmax being shift-invariant).
 * Bounds: p99.9 ≤ 1% of lr, max ≤ 5% of lr per step; a real formula difference moves most weights by ~lr.
 */
const WEIGHT_P999_TOL = 1e-4;
const weightMaxTol = (lr: number, steps: number) => 0.05 * lr * steps;

let torchProc: SpawnedEngine | undefined;
let builtin: SpawnedEngine | undefined;
let torchClient: EngineClient;
let onnxClient: EngineClient;

before(async () => {
  if ('missing' in engine) return; // skipped
  // The PyTorch engine keeps the built-in engine's launch contract (spawnEngine's `command`).
  torchProc = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: engine.command, startTimeoutMs: 120_000 });
  builtin = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  torchClient = await EngineClient.connect(torchProc.listening.address);
  onnxClient = await EngineClient.connect(builtin.listening.address);
});

after(() => {
  torchClient?.close();
  onnxClient?.close();
  torchProc?.child.kill('SIGTERM');
  builtin?.child.kill('SIGTERM');
});

const base = { family: 'transformer', vocabSize: 16, width: 32, layers: 2, heads: 4, maxSeq: 32 };
const VARIANTS: Record<string, ModelSpecInput> = {
  gpt2: { ...base, positions: 'learned', norm: 'layernorm', mlp: 'gelu', bias: true, tiedHead: true },
  llama: { ...base, kvHeads: 2, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false, tiedHead: false },
  // Qwen3's shape: a head dimension of its own (12 ≠ 32 / 4) and per-head q/k RMSNorm
  qwen3: { ...base, kvHeads: 2, headDim: 12, qkNorm: true, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false, tiedHead: true, normEps: 1e-6 },
};

/** deterministic pseudo-random token lists */
function tokens(seed: number, n: number, V: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => ((x = (x * 1103515245 + 12345) >>> 0) >>> 8) % V);
}

const scoreSeqs = (V: number) => [
  { context: [1], tokens: tokens(1, 12, V) },
  { context: tokens(2, 5, V), tokens: tokens(3, 20, V) },
  { context: tokens(4, 30, V), tokens: tokens(5, 2, V) },
];

async function scoreGap(modelKey: string, version: number, V: number): Promise<{ lp: number; ent: number }> {
  const req = { modelKey, version, sequences: scoreSeqs(V) };
  const [a, b] = await Promise.all([torchClient.score(req), onnxClient.score(req)]);
  let lp = 0;
  let ent = 0;
  a.sequences.forEach((s, i) => {
    assert.equal(s.logprobs.length, b.sequences[i]!.logprobs.length);
    s.logprobs.forEach((x, t) => {
      lp = Math.max(lp, Math.abs(x - b.sequences[i]!.logprobs[t]!));
      ent = Math.max(ent, Math.abs(s.entropy[t]! - b.sequences[i]!.entropy[t]!));
    });
  });
  return { lp, ent };
}

const f32 = (a: Uint8Array) => new Float32Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));

function absDiffs(a: Uint8Array, b: Uint8Array, keep: (i: number) => boolean = () => true): Float64Array {
  const x = f32(a);
  const y = f32(b);
  assert.equal(x.length, y.length);
  return Float64Array.from(x.map((v, i) => (keep(i) ? Math.abs(v - y[i]!) : 0))).sort();
}

/** The largest |Δ| per parameter slot, worst first. */
function worstSlots(spec: ModelSpecInput, a: Uint8Array, b: Uint8Array): string {
  const x = f32(a);
  const y = f32(b);
  return paramLayout(normalizeTransformerSpec(spec))
    .slots.map((s) => {
      let m = 0;
      for (let i = s.offset; i < s.offset + s.size; i++) m = Math.max(m, Math.abs(x[i]! - y[i]!));
      return [s.name, m] as const;
    })
    .sort((p, q) => q[1] - p[1])
    .slice(0, 3)
    .map(([n, m]) => `${n} ${m.toExponential(1)}`)
    .join(', ');
}

const maxAbsDiff = (a: Uint8Array, b: Uint8Array) => absDiffs(a, b).at(-1) ?? 0;

/** Family specs no transformers architecture computes: the built-in engine runs them, the PyTorch engine refuses them. */
const NOT_ON_TRANSFORMERS: Record<string, [ModelSpecInput, RegExp]> = {
  ropeLayernorm: [
    { ...base, kvHeads: 2, positions: 'rope', norm: 'layernorm', mlp: 'gelu', bias: true, tiedHead: false, ropeTheta: 500, normEps: 1e-6 },
    /^engine InitModel: spec\.norm: .*rope positions are Llama's or Qwen3's, which need norm rmsnorm and mlp swiglu/,
  ],
  learnedRmsnorm: [
    { ...base, kvHeads: 1, positions: 'learned', norm: 'rmsnorm', mlp: 'swiglu', bias: false, tiedHead: true, mlpWidth: 48 },
    /^engine InitModel: spec\.norm: .*learned positions are GPT-2's/,
  ],
};

test('specs no transformers architecture computes: the built-in engine runs them, the PyTorch engine refuses them naming the field', { skip }, async () => {
  for (const [name, [spec, message]] of Object.entries(NOT_ON_TRANSFORMERS)) {
    assert.equal((await onnxClient.initModel({ modelKey: `n-${name}`, spec, seed: 1 })).version, 0);
    await assert.rejects(torchClient.initModel({ modelKey: `n-${name}`, spec, seed: 1 }), (e: { reason: string; message: string }) => {
      assert.equal(e.reason, 'INVALID_REQUEST', e.message);
      assert.match(e.message, message);
      return true;
    });
  }
});

test('built-in InitModel → export → PyTorch LoadVersion: same sha256, param_count, spec; Score agrees', { skip, timeout: 600_000 }, async () => {
  for (const [name, spec] of Object.entries(VARIANTS)) {
    const key = `a-${name}`;
    const info = await onnxClient.initModel({ modelKey: key, spec, seed: 7 });
    const exp = await onnxClient.exportVersion({ modelKey: key, version: 0 });
    const loaded = await torchClient.loadVersion({ modelKey: key, version: 0, spec, weights: exp.weights, optimizerState: exp.optimizerState });
    assert.equal(loaded.weightsSha256, info.weightsSha256, name);
    assert.equal(loaded.optimizerSha256, info.optimizerSha256, name);
    assert.equal(loaded.paramCount, info.paramCount, name);
    assert.deepEqual(loaded.spec, info.spec, `${name}: normalized specs agree`);
    // both draw θ₀ from Philox(seed, STREAM_INIT) the same way: InitModel itself agrees bit for bit
    const own = await torchClient.initModel({ modelKey: `${key}-own`, spec, seed: 7 });
    assert.equal(own.weightsSha256, info.weightsSha256, `${name}: InitModel bit-identical`);
    const gap = await scoreGap(key, 0, spec.vocabSize);
    console.log(`[interop] ${name}: P=${info.paramCount} score max|Δlogp|=${gap.lp.toExponential(2)} max|Δentropy|=${gap.ent.toExponential(2)}`);
    assert.ok(gap.lp <= SCORE_TOL && gap.ent <= SCORE_TOL, `${name}: score gap ${gap.lp} / ${gap.ent}`);
  }
});

test('PyTorch InitModel → export → built-in LoadVersion: Score agrees', { skip, timeout: 600_000 }, async () => {
  for (const [name, spec] of Object.entries(VARIANTS)) {
    const key = `b-${name}`;
    const info = await torchClient.initModel({ modelKey: key, spec, seed: 1234567890123 });
    const exp = await torchClient.exportVersion({ modelKey: key, version: 0 });
    // give the weights some structure beyond init: one torch update, then export v1
    const up = await torchClient.update(updateRequest(key, 0, `b-${name}-u`, spec.vocabSize));
    const exp1 = await torchClient.exportVersion({ modelKey: key, version: 1 });
    for (const [v, e] of [
      [0, exp],
      [1, exp1],
    ] as const) {
      const loaded = await onnxClient.loadVersion({ modelKey: key, version: v, spec, weights: e.weights, optimizerState: e.optimizerState });
      assert.equal(loaded.weightsSha256, (v === 0 ? info : up.info).weightsSha256, name);
      assert.equal(loaded.optimizerStep, v === 0 ? 0 : 2, name); // AdamW steps: innerSteps 2
      const gap = await scoreGap(key, v, spec.vocabSize);
      console.log(`[interop] ${name} v${v}: score max|Δlogp|=${gap.lp.toExponential(2)} max|Δentropy|=${gap.ent.toExponential(2)}`);
      assert.ok(gap.lp <= SCORE_TOL && gap.ent <= SCORE_TOL, `${name} v${v}: score gap ${gap.lp} / ${gap.ent}`);
    }
  }
});

function updateRequest(modelKey: string, baseVersion: number, requestId: string, V: number, settings: UpdateRequest['settings'] = {}): UpdateRequest {
  const samples = [0, 1, 2, 3].map((i) => {
    const toks = tokens(10 + i, 6 + i, V);
    return {
      context: tokens(20 + i, 3 + i, V),
      tokens: toks,
      lossMask: toks.map((_, t) => (t === 0 && i === 1 ? 0 : 1)),
      advantages: toks.map((_, t) => (i % 2 === 0 ? 1 : -1) * (0.5 + 0.1 * t)),
      // behaviour log-probs a little off the model's, so ratios move and clipping can bind
      oldLogprobs: toks.map((_, t) => -Math.log(V) + 0.3 * Math.sin(i + t)),
      lossWeights: toks.map(() => 1 / 30),
      refLogprobs: i < 2 ? toks.map(() => -Math.log(V) - 0.05) : [],
    };
  });
  return { modelKey, baseVersion, requestId, samples, settings: { lr: 0.01, innerSteps: 2, entropyCoef: 0.01, ...settings } };
}

test('the same Update from the same base: weights and metrics agree', { skip, timeout: 600_000 }, async () => {
  for (const [name, spec] of Object.entries(VARIANTS)) {
    const key = `c-${name}`;
    await onnxClient.initModel({ modelKey: key, spec, seed: 99 });
    await torchClient.initModel({ modelKey: key, spec, seed: 99 });
    for (const [label, settings] of [
      ['default clip', {}],
      ['k1, no grad clip, weight decay, dual clip off', { klType: 'k1' as const, maxGradNorm: 0, weightDecay: 0.1, dualClip: 0, clipHigh: 0.28 }],
    ] as const) {
      const v = label === 'default clip' ? 0 : 1;
      const req = updateRequest(key, v, `c-${name}-${v}`, spec.vocabSize, settings);
      const [a, b] = await Promise.all([torchClient.update(req), onnxClient.update(req)]);
      assert.equal(a.info.version, v + 1);
      assert.equal(b.info.version, v + 1);
      assert.equal(a.tokens, b.tokens);
      assert.equal(a.info.optimizerStep, b.info.optimizerStep);
      const [ea, eb] = await Promise.all([
        torchClient.exportVersion({ modelKey: key, version: v + 1 }),
        onnxClient.exportVersion({ modelKey: key, version: v + 1 }),
      ]);
      const diffs = absDiffs(ea.weights, eb.weights);
      const dw = diffs.at(-1)!;
      const p999 = diffs[Math.floor(0.999 * (diffs.length - 1))]!;
      const rel = (x: number, y: number) => Math.abs(x - y) / Math.max(1e-6, Math.abs(y));
      const m = (k: 'loss' | 'gradNorm' | 'pgLoss' | 'klLoss' | 'entropySum' | 'approxKl' | 'entropy') =>
        Math.max(...a.stepMetrics.map((s, i) => rel(s[k], b.stepMetrics[i]![k])));
      console.log(
        `[interop] ${name} update (${label}): max|Δθ|=${dw.toExponential(2)} p99.9|Δθ|=${p999.toExponential(2)} rel Δloss=${m('loss').toExponential(2)} rel Δgrad_norm=${m('gradNorm').toExponential(2)} ` +
          `rel Δkl=${m('klLoss').toExponential(2)} rel Δentropy=${m('entropy').toExponential(2)} clip ${a.metrics.clipFraction}/${b.metrics.clipFraction} ` +
          `gap max ${a.logprobGap.max.toExponential(2)}/${b.logprobGap.max.toExponential(2)} worst slots: ${worstSlots(spec, ea.weights, eb.weights)}`,
      );
      assert.ok(p999 <= WEIGHT_P999_TOL && dw <= weightMaxTol(0.01, 2), `${name}: weights differ by ${dw} (p99.9 ${p999})`);
      for (const k of ['loss', 'gradNorm', 'pgLoss', 'entropySum', 'entropy'] as const) assert.ok(m(k) <= 1e-3, `${name} ${k}: ${m(k)}`);
      assert.deepEqual(
        a.stepMetrics.map((s) => s.clipFraction),
        b.stepMetrics.map((s) => s.clipFraction),
        `${name}: clip fractions`,
      );
    }
    // the torch engine is deterministic: the same update elsewhere gives the same bytes
    const again = await torchClient.update({ ...updateRequest(key, 0, `c-${name}-again`, spec.vocabSize), allowStaleBase: true });
    const first = await torchClient.exportVersion({ modelKey: key, version: 1 });
    const second = await torchClient.exportVersion({ modelKey: key, version: again.info.version });
    assert.equal(maxAbsDiff(first.weights, second.weights), 0, `${name}: torch update deterministic`);
  }
});

test('greedy Generate gives the same tokens in both; sampled Generate (same Philox noise) nearly always too', { skip, timeout: 600_000 }, async () => {
  let sampledSame = 0;
  let sampledAll = 0;
  for (const [name, spec] of Object.entries(VARIANTS)) {
    const key = `d-${name}`;
    await onnxClient.initModel({ modelKey: key, spec, seed: 5 });
    // a trained version, so that the greedy path is not flat
    const u = await onnxClient.update(updateRequest(key, 0, `d-${name}-u`, spec.vocabSize, { lr: 0.05, innerSteps: 4 }));
    const e = await onnxClient.exportVersion({ modelKey: key, version: u.info.version });
    await torchClient.loadVersion({ modelKey: key, version: u.info.version, spec, weights: e.weights, optimizerState: e.optimizerState });
    const sequences = [0, 1, 2, 3, 4, 5].map((i) => ({ context: tokens(40 + i, 1 + i, spec.vocabSize), seed: 1000 + i }));
    const greedy = { modelKey: key, version: u.info.version, sequences, sampling: { temperature: 0, maxTokens: 16, stopTokens: [15] } };
    const [a, b] = await Promise.all([torchClient.generate(greedy), onnxClient.generate(greedy)]);
    let lpGap = 0;
    a.sequences.forEach((s, i) => {
      assert.deepEqual(s.tokens, b.sequences[i]!.tokens, `${name} seq ${i}`);
      assert.equal(s.stopReason, b.sequences[i]!.stopReason);
      s.logprobs.forEach((x, t) => (lpGap = Math.max(lpGap, Math.abs(x - b.sequences[i]!.logprobs[t]!))));
      assert.ok(s.sampleLogprobs.every((x) => x === 0));
    });
    assert.ok(lpGap <= SCORE_TOL, `${name}: generate logprob gap ${lpGap}`);
    const sampled = { ...greedy, sampling: { temperature: 1, maxTokens: 16 } };
    const filtered = { ...greedy, sampling: { temperature: 0.8, topK: 8, topP: 0.9, maxTokens: 16 } };
    for (const req of [sampled, filtered]) {
      const [c, d] = await Promise.all([torchClient.generate(req), onnxClient.generate(req)]);
      c.sequences.forEach((s, i) => {
        sampledAll++;
        if (JSON.stringify(s.tokens) === JSON.stringify(d.sequences[i]!.tokens)) sampledSame++;
      });
    }
    console.log(`[interop] ${name}: greedy tokens equal, max|Δlogprob|=${lpGap.toExponential(2)}`);

    // sample with the built-in engine, train with this one: the rollout's log-probs are the policy's here too
    const rollout = await onnxClient.generate({ ...greedy, sampling: { temperature: 1, maxTokens: 8 } });
    const trained = await torchClient.update({
      modelKey: key,
      baseVersion: u.info.version,
      requestId: `d-${name}-cross`,
      samples: rollout.sequences.map((g, i) => ({
        context: sequences[i]!.context,
        tokens: g.tokens,
        lossMask: g.tokens.map(() => 1),
        advantages: g.tokens.map(() => (i % 2 ? 1 : -1)),
        oldLogprobs: g.logprobs,
        lossWeights: g.tokens.map(() => 0.02),
      })),
    });
    console.log(
      `[interop] ${name}: built-in rollout → PyTorch update: logprob gap max ${trained.logprobGap.max.toExponential(2)}, approx_kl ${trained.metrics.approxKl.toExponential(2)}`,
    );
    assert.ok(trained.logprobGap.max <= SCORE_TOL, `${name}: cross-engine logprob gap ${trained.logprobGap.max}`);
  }
  console.log(`[interop] sampled sequences identical in both engines: ${sampledSame}/${sampledAll}`);
  assert.ok(sampledSame >= 0.9 * sampledAll, `sampled agreement ${sampledSame}/${sampledAll}`);
});

test('bad requests: the same gRPC code, reason and message from both engines; both keep serving', { skip, timeout: 600_000 }, async () => {
  const spec = VARIANTS.llama!;
  const key = 'e-errors';
  await onnxClient.initModel({ modelKey: key, spec, seed: 3 });
  await torchClient.initModel({ modelKey: key, spec, seed: 3 });
  const sampling = { temperature: 1, maxTokens: 4 };
  const sample = { context: [1, 2], tokens: [3, 4], lossMask: [1, 1], advantages: [1, -1], oldLogprobs: [-2, -2], lossWeights: [0.5, 0.5] };
  const calls: [string, (c: EngineClient) => Promise<unknown>][] = [
    ['token out of vocabulary', (c) => c.generate({ modelKey: key, version: 0, sequences: [{ context: [1, 2, 99], seed: 1 }], sampling })],
    ['empty context', (c) => c.score({ modelKey: key, version: 0, sequences: [{ context: [], tokens: [1] }] })],
    ['past maxSeq', (c) => c.generate({ modelKey: key, version: 0, sequences: [{ context: [1], seed: 1 }], sampling: { ...sampling, maxTokens: 40 } })],
    ['unknown model', (c) => c.score({ modelKey: 'nope', version: 0, sequences: [{ context: [1], tokens: [1] }] })],
    ['unknown version', (c) => c.score({ modelKey: key, version: 9, sequences: [{ context: [1], tokens: [1] }] })],
    ['bad spec', (c) => c.initModel({ modelKey: 'e-bad', spec: { ...spec, width: 30, mlp: 'relu' }, seed: 1 })],
    ['unknown spec option', (c) => c.initModel({ modelKey: 'e-bad', spec: { ...spec, dropout: 0.1 }, seed: 1 })],
    ['other seed for version 0', (c) => c.initModel({ modelKey: key, spec, seed: 4 })],
    ['NaN advantage', (c) => c.update({ modelKey: key, baseVersion: 0, requestId: 'e1', samples: [{ ...sample, advantages: [1, NaN] }] })],
    ['no trained tokens', (c) => c.update({ modelKey: key, baseVersion: 0, requestId: 'e2', samples: [{ ...sample, lossMask: [0, 0] }] })],
    ['bad dual clip', (c) => c.update({ modelKey: key, baseVersion: 0, requestId: 'e3', samples: [sample], settings: { dualClip: 0.5 } })],
    ['short weights', (c) => c.loadVersion({ modelKey: key, version: 5, spec, weights: new Uint8Array(8) })],
  ];
  for (const [label, call] of calls) {
    const [a, b] = await Promise.all([
      call(torchClient).then(
        () => undefined,
        (e) => e,
      ),
      call(onnxClient).then(
        () => undefined,
        (e) => e,
      ),
    ]);
    assert.ok(a && b, `${label}: both refuse (torch ${a}, onnx ${b})`);
    assert.equal(a.reason, b.reason, `${label}: reason`);
    assert.equal(a.code, b.code, `${label}: code`);
    assert.equal(a.message, b.message, `${label}: message`);
  }
  // the same update request twice replays; another request under the same id is REQUEST_ID_REUSED; a stale base is refused
  const req = { modelKey: key, baseVersion: 0, requestId: 'e-ok', samples: [sample] };
  for (const c of [torchClient, onnxClient]) {
    const first = await c.update(req);
    const again = await c.update(req);
    assert.equal(again.replayed, true);
    assert.equal(again.info.weightsSha256, first.info.weightsSha256);
    await assert.rejects(c.update({ ...req, samples: [{ ...sample, advantages: [2, 2] }] }), (e: { reason: string }) => e.reason === 'REQUEST_ID_REUSED');
    await assert.rejects(c.update({ ...req, requestId: 'e-stale' }), (e: { reason: string }) => e.reason === 'STALE_BASE');
  }
  const h = await torchClient.health();
  assert.equal(h.status, 'SERVING');
});

test('PyTorch Score against the float64 reference (transformer/reference.ts)', { skip, timeout: 600_000 }, async () => {
  for (const [name, spec] of Object.entries(VARIANTS)) {
    const key = `f-${name}`;
    await torchClient.initModel({ modelKey: key, spec, seed: 17 });
    await torchClient.update(updateRequest(key, 0, `f-${name}-u`, spec.vocabSize));
    const e = await torchClient.exportVersion({ modelKey: key, version: 1 });
    const theta = f32(e.weights);
    const seqs = scoreSeqs(spec.vocabSize).slice(0, 2);
    const ref = referenceForward(
      normalizeTransformerSpec(spec),
      theta,
      seqs.map((s) => [...s.context, ...s.tokens]),
    );
    const got = await torchClient.score({ modelKey: key, version: 1, sequences: seqs });
    let gap = 0;
    seqs.forEach((s, i) =>
      s.tokens.forEach((tok, t) => (gap = Math.max(gap, Math.abs(got.sequences[i]!.logprobs[t]! - ref.logp[i]![s.context.length - 1 + t]![tok]!)))),
    );
    console.log(`[interop] ${name}: PyTorch Score vs float64 reference max|Δlogp|=${gap.toExponential(2)}`);
    assert.ok(gap <= 1e-5, `${name}: ${gap}`);
  }
});
