/**
 * The transformer's fused rollout with a preallocated KV cache
 * (engines/onnx/transformer/generate-graph.ts): left-padded contexts of
 * different lengths, plain / top-k / greedy rows in one run. The log-probs it
 * returns match full-sequence scoring (score graph) within the stated
 * tolerance, and the float64 reference; greedy rows take the reference's
 * argmax; the loop stops when every row is done.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { fillUniforms, seedKey, STREAM_SAMPLING } from '../../../engines/families/philox';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { referenceForward } from '../../../engines/onnx/transformer/reference';
import { buildTransformerGenerateGraph } from '../../../engines/onnx/transformer/generate-graph';
import { buildTransformerScoreGraph } from '../../../engines/onnx/transformer/score-graph';
import type { TransformerSpec } from '../../../engines/families/transformer/spec';
import { session, TINY_LAYOUTS } from './helpers';

/** Generate vs Score: the same function computed over cache columns vs whole sequences (float32). */
const GENERATE_SCORE_TOLERANCE = 1e-5;

const SPECS = TINY_LAYOUTS;

interface Row {
  context: number[];
  temperature: number;
  topK: number;
  maxTokens: number;
  seed: number;
}

const ROWS: Row[] = [
  { context: [3], temperature: 1, topK: 0, maxTokens: 6, seed: 11 },
  { context: [1, 5, 1, 2], temperature: 0.8, topK: 5, maxTokens: 6, seed: 12 },
  { context: [7, 7], temperature: 0, topK: 0, maxTokens: 4, seed: 13 },
];

async function generate(s: ort.InferenceSession, spec: TransformerSpec, theta: Float32Array, rows: Row[], steps: number) {
  const B = rows.length;
  const C = Math.max(...rows.map((r) => r.context.length));
  const context = new BigInt64Array(B * C); // left padding with token 0 (masked)
  const uniforms = new Float32Array(B * steps);
  rows.forEach((r, b) => {
    r.context.forEach((t, i) => (context[b * C + C - r.context.length + i] = BigInt(t)));
    fillUniforms(seedKey(r.seed), STREAM_SAMPLING, steps, uniforms, b * steps);
  });
  const out = await s.run({
    theta: new ort.Tensor('float32', theta, [theta.length]),
    context: new ort.Tensor('int64', context, [B, C]),
    context_len: new ort.Tensor(
      'int64',
      BigInt64Array.from(rows, (r) => BigInt(r.context.length)),
      [B],
    ),
    uniforms: new ort.Tensor('float32', uniforms, [B, steps]),
    temperature: new ort.Tensor(
      'float32',
      Float32Array.from(rows, (r) => r.temperature),
      [B],
    ),
    top_k: new ort.Tensor(
      'int64',
      BigInt64Array.from(rows, (r) => BigInt(r.topK)),
      [B],
    ),
    top_p: new ort.Tensor('float32', new Float32Array(B), [B]),
    stop_mask: new ort.Tensor('bool', new Uint8Array(B * spec.vocabSize), [B, spec.vocabSize]),
    max_tokens: new ort.Tensor(
      'int64',
      BigInt64Array.from(rows, (r) => BigInt(r.maxTokens)),
      [B],
    ),
    steps: new ort.Tensor('int64', BigInt64Array.of(BigInt(steps)), []),
  });
  const S = out.tokens!.dims[0]!;
  const toks = out.tokens!.data as BigInt64Array;
  const lps = out.logprobs!.data as Float32Array;
  return {
    S,
    rows: rows.map((r, b) => ({
      tokens: Array.from({ length: Math.min(S, r.maxTokens) }, (_, t) => Number(toks[t * B + b])),
      logprobs: Array.from({ length: Math.min(S, r.maxTokens) }, (_, t) => lps[t * B + b]),
    })),
  };
}

for (const [name, spec] of SPECS) {
  test(`KV-cache generation log-probs match full-sequence scoring within ${GENERATE_SCORE_TOLERANCE} (${name})`, async () => {
    const theta = Float32Array.from(initTransformerWeights(spec, 21), (x) => x * 8);
    const gen = await session(buildTransformerGenerateGraph(spec));
    const out = await generate(gen, spec, theta, ROWS, 6);
    assert.equal(out.S, 6);

    // Score the same sequences (right-padded, positions from 0) in one batch.
    const full = ROWS.map((r, b) => [...r.context, ...out.rows[b]!.tokens]);
    const S = Math.max(...full.map((f) => f.length));
    const pad = (f: number[]) => [...f, ...new Array(S - f.length).fill(0)];
    const sc = await session(buildTransformerScoreGraph(spec));
    const scored = await sc.run({
      theta: new ort.Tensor('float32', theta, [theta.length]),
      tokens: new ort.Tensor('int64', BigInt64Array.from(full.flatMap(pad), BigInt), [ROWS.length, S]),
      targets: new ort.Tensor(
        'int64',
        BigInt64Array.from(
          full.flatMap((f) => pad(f.slice(1))),
          BigInt,
        ),
        [ROWS.length, S],
      ),
    });
    const scoreLp = scored.logprobs!.data as Float32Array;
    const ref = referenceForward(spec, theta, full);
    let worst = 0;
    ROWS.forEach((r, b) => {
      out.rows[b]!.tokens.forEach((tok, i) => {
        const p = r.context.length - 1 + i; // the position that predicts generated token i
        const g = out.rows[b]!.logprobs[i]!;
        const gap = Math.abs(g - scoreLp[b * S + p]!);
        worst = Math.max(worst, gap);
        assert.ok(gap <= GENERATE_SCORE_TOLERANCE, `row ${b} token ${i}: generate ${g} vs score ${scoreLp[b * S + p]}`);
        assert.ok(Math.abs(g - ref.logp[b]![p]![tok]!) < 1e-4, `row ${b} token ${i}: generate ${g} vs reference ${ref.logp[b]![p]![tok]}`);
        if (r.temperature === 0) {
          const best = ref.logp[b]![p]!.indexOf(Math.max(...ref.logp[b]![p]!));
          assert.equal(tok, best, `greedy row ${b} token ${i}`);
        }
      });
    });
    // The sampled rows are not degenerate (the policy is far from uniform, tokens vary).
    const all = out.rows.flatMap((r) => r.tokens);
    assert.ok(new Set(all).size > 2 && out.rows.flatMap((r) => r.logprobs).some((lp) => lp! > Math.log(1 / spec.vocabSize) + 0.5));
    console.log(`# ${name}: max |generate − score| = ${worst.toExponential(2)}`);

    // Rows stop at max_tokens; the loop exits once every row is done.
    const short = await generate(
      gen,
      spec,
      theta,
      ROWS.map((r) => ({ ...r, maxTokens: 3 })),
      6,
    );
    assert.equal(short.S, 3);
    ROWS.forEach((_, b) => assert.deepEqual(short.rows[b]!.tokens, out.rows[b]!.tokens.slice(0, 3), 'same seeds, same tokens'));
  });
}
