/**
 * TransformerRuntime (engines/onnx/transformer/runtime.ts) through the engine's
 * session factory: Score of generated sequences reproduces Generate's
 * log-probs within the stated tolerance; a row's generation does not depend on
 * the other rows of its batch; updates are bitwise deterministic, advance the
 * AdamW step, and learn a toy bandit that needs attention over the context;
 * requests the spec cannot run fail naming the field.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaultMemoryPolicy, sessionFactory } from '../../../engines/onnx/device';
import { seedKey } from '../../../engines/families/philox';
import type { GenerateRow, OptimState, SessionFactory, UpdateSettings } from '../../../engines/onnx/model-runtime';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { TransformerRequestError, TransformerRuntime } from '../../../engines/onnx/transformer/runtime';
import { generateBytesPerRow, stateBytes, updateBytesPerSequence } from '../../../engines/families/transformer/memory';
import { normalizeTransformerSpec, paramLayout } from '../../../engines/families/transformer/spec';
import { sameBits } from './helpers';

const SPEC = normalizeTransformerSpec({
  vocabSize: 12,
  width: 32,
  layers: 2,
  heads: 4,
  kvHeads: 2,
  positions: 'rope',
  norm: 'rmsnorm',
  mlp: 'swiglu',
  maxSeq: 24,
});
// Qwen3's shape: q/k/v heads of their own width (12 ≠ 32 / 4), q/k RMSNorm per head
const QWEN3 = normalizeTransformerSpec({ ...SPEC, headDim: 12, qkNorm: true, bias: false });
const runtime = (spec = SPEC) => new TransformerRuntime(spec, sessionFactory('cpu', { intraOpThreads: 1 }));
const LAYOUTS = [
  ['Llama layout', SPEC],
  ['Qwen3 layout', QWEN3],
] as const;

const row = (context: number[], seed: number, maxTokens = 5): GenerateRow => ({
  context,
  seedKey: seedKey(seed),
  temperature: 1,
  topK: 0,
  topP: 0,
  maxTokens,
  stopTokens: [],
});

const SETTINGS: UpdateSettings = {
  lr: 0.01,
  beta1: 0.9,
  beta2: 0.999,
  eps: 1e-8,
  weightDecay: 0.01,
  maxGradNorm: 1,
  clipLow: 0.2,
  clipHigh: 0.28,
  dualClip: 3,
  klCoef: 0,
  klType: 'low_var_kl',
  entropyCoef: 0,
  innerSteps: 2,
};

for (const [name, spec] of LAYOUTS) {
  test(`transformer runtime (${name}): Score reproduces Generate log-probs; a row does not depend on its batch`, async () => {
    const rt = runtime(spec);
    // ×5: peaked distributions. Float32 rounding grows with the logits: over 40 random batches of 3 rows the
    // largest Generate-vs-Score gap was 5.3e-6 (Llama) and 5.6e-6 (Qwen3) at ×5, 7.2e-6 and 1.2e-5 at ×10.
    const theta = Float32Array.from(initTransformerWeights(spec, 5), (x) => x * 5);
    // q/k norms fix each head's length at gain·√hd: scaled gains would put every attention logit near 350,
    // where float32 rounding of the scores alone moves log-probs by ~1e-5 (measured 1.6e-5); they stay at 1
    for (const slot of paramLayout(spec).slots) if (/\.ln[qk]_g$/.test(slot.name)) theta.fill(1, slot.offset, slot.offset + slot.size);
    const rows = [row([1, 2, 3], 1), row([4], 2, 7), row([5, 5, 5, 5, 5, 6], 3, 3)];
    const gen = await rt.generate(theta, rows);
    const scored = await rt.score(
      theta,
      rows.map((r, i) => ({ context: r.context, tokens: gen[i]!.tokens })),
    );
    gen.forEach((g, i) => {
      assert.equal(g.tokens.length, rows[i]!.maxTokens);
      g.logprobs.forEach((lp, t) => assert.ok(Math.abs(lp - scored.logprobs[i]![t]!) <= 1e-5, `row ${i} token ${t}: ${lp} vs ${scored.logprobs[i]![t]}`));
    });
    // Alone (padded to 2 rows; other C and T), the first row generates the same tokens and log-probs
    // (bit-identical on this CPU here; bit-level batch invariance is for the engine's probe to establish).
    const alone = await rt.generate(theta, [rows[0]!]);
    assert.deepEqual(alone[0]!.tokens, gen[0]!.tokens);
    assert.ok(alone[0]!.logprobs.every((lp, t) => Math.abs(lp - gen[0]!.logprobs[t]!) <= 1e-5));
  });

  test(`transformer runtime (${name}): updates are bitwise deterministic and learn a bandit that needs attention`, async () => {
    const rt = runtime(spec);
    // Reward token 7 after context [2, x, x, x] and token 9 after [3, x, x, x]: the cue sits 4 tokens back.
    const samples = (target: (cue: number) => number) =>
      [2, 3, 2, 3].map((cue, i) => {
        const context = [cue, (i * 5) % 12, 1, 1];
        return { context, tokens: [target(cue)], lossMask: [1], advantages: [1], oldLogprobs: [0], lossWeights: [1 / 4], refLogprobs: [] };
      });
    let state: OptimState = { theta: initTransformerWeights(spec, 9), m: new Float32Array(rt.paramCount), v: new Float32Array(rt.paramCount), step: 0 };
    const first = await rt.update(
      state,
      samples((c) => (c === 2 ? 7 : 9)),
      SETTINGS,
    );
    const again = await runtime(spec).update(
      state,
      samples((c) => (c === 2 ? 7 : 9)),
      SETTINGS,
    );
    assert.ok(sameBits(first.state.theta, again.state.theta) && sameBits(first.state.m, again.state.m) && sameBits(first.state.v, again.state.v));
    assert.equal(first.state.step, 2);
    assert.equal(first.tokens, 4);
    assert.equal(first.steps.length, 2);
    // A micro-batch budget that holds 2 of these 4-token sequences: 2 micro-batches, the same step
    // within float32 summation order, and bitwise reproducible itself.
    const perSequence = updateBytesPerSequence(spec, 4);
    const split = () =>
      new TransformerRuntime(
        spec,
        sessionFactory('cpu', { intraOpThreads: 1, memory: { ...defaultMemoryPolicy(), microBatchBytes: 2 * perSequence + perSequence - 1 } }),
      );
    const micro = await split().update(
      state,
      samples((c) => (c === 2 ? 7 : 9)),
      SETTINGS,
    );
    const microAgain = await split().update(
      state,
      samples((c) => (c === 2 ? 7 : 9)),
      SETTINGS,
    );
    assert.ok(
      sameBits(micro.state.theta, microAgain.state.theta) && sameBits(micro.state.m, microAgain.state.m) && sameBits(micro.state.v, microAgain.state.v),
    );
    const moved = Math.max(...first.state.theta.map((x, i) => Math.abs(x - state.theta[i]!)));
    assert.ok(!sameBits(micro.state.theta, first.state.theta), 'the batch really ran as 2 micro-batches (summation order differs)');
    assert.ok(first.state.theta.every((x, i) => Math.abs(x - micro.state.theta[i]!) < 1e-3 * moved));

    const probe = async () => {
      const s = await rt.score(state.theta, [
        { context: [2, 0, 1, 1], tokens: [7] },
        { context: [3, 0, 1, 1], tokens: [9] },
      ]);
      return Math.min(Math.exp(s.logprobs[0]![0]!), Math.exp(s.logprobs[1]![0]!));
    };
    assert.ok((await probe()) < 0.2);
    for (let i = 0; i < 40 && (await probe()) < 0.9; i++) {
      const old = await rt.score(
        state.theta,
        samples((c) => (c === 2 ? 7 : 9)),
      );
      const batch = samples((c) => (c === 2 ? 7 : 9)).map((x, j) => ({ ...x, oldLogprobs: Array.from(old.logprobs[j]!) }));
      state = (await rt.update(state, batch, SETTINGS)).state;
    }
    assert.ok((await probe()) >= 0.9, `p(target | cue) = ${await probe()}`);
  });
}

test('transformer runtime: rows whose caches do not fit the budget together run in chunks with the same results', async () => {
  const theta = Float32Array.from(initTransformerWeights(SPEC, 5), (x) => x * 10);
  const rows = [row([1, 2, 3], 1), row([4], 2, 7), row([5, 5, 5, 5, 5, 6], 3, 3), row([7, 8], 4, 6), row([9], 5, 2)];
  // 2 rows per run of caches over C + T = 16 + 7 columns (the longest context, 6, aligned to 16)
  const budget = stateBytes(SPEC) + 2 * generateBytesPerRow(SPEC, 16 + 7);
  const base = sessionFactory('cpu', { intraOpThreads: 1, memory: { ...defaultMemoryPolicy(), budgetBytes: budget } });
  let runs = 0;
  const counting: SessionFactory = {
    memory: base.memory,
    async create(model, label) {
      const s = await base.create(model, label);
      const run = s.run.bind(s);
      if (label === 'generate') s.run = ((...args: Parameters<typeof run>) => (runs++, run(...args))) as typeof s.run;
      return s;
    },
  };
  const whole = await runtime().generate(theta, rows);
  const parts = await new TransformerRuntime(SPEC, counting).generate(theta, rows);
  assert.equal(runs, 3, '5 rows in runs of 2');
  parts.forEach((p, i) => {
    assert.deepEqual(p.tokens, whole[i]!.tokens, `row ${i}`);
    p.logprobs.forEach((lp, t) => assert.ok(Math.abs(lp - whole[i]!.logprobs[t]!) <= 1e-5, `row ${i} token ${t}`));
  });
});

test('transformer runtime: requests the spec cannot run fail naming the field', async () => {
  const rt = runtime();
  const theta = initTransformerWeights(SPEC, 1);
  await assert.rejects(
    rt.generate(theta, [row([1], 1), row([], 2)]),
    (e: unknown) => e instanceof TransformerRequestError && e.field === 'sequences[1].context',
  );
  await assert.rejects(
    rt.generate(theta, [row([1, 2], 1, 23)]),
    (e: unknown) => e instanceof TransformerRequestError && /maxSeq 24/.test(e.message) && e.field === 'sequences[0]',
  );
  await assert.rejects(rt.score(theta, [{ context: [1], tokens: new Array(24).fill(1) }]), /sequences\[0\]: context \+ tokens = 25 exceeds/);
});
