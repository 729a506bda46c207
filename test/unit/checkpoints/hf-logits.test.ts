/**
 * Pretrained checkpoints compute what PyTorch computes: the four tiny
 * checkpoints in test/fixtures/hf (gpt2 F32, llama BF16 sharded with GQA and
 * an untied head, qwen2 F16 with q/k/v biases and a tied head, qwen3 BF16 with
 * head_dim 8 ≠ hidden/heads, per-head q/k RMSNorm, GQA, tied head) are loaded
 * through the HF layout and run by the float64 reference (reference.ts) and by
 * the engine's ONNX logits graph (float64 and float32). The expected logits
 * were computed once by tools/hf-fixtures.py in float64 PyTorch from the same
 * stored weights, with the model math written there independently.
 *
 * Tolerances: float64 paths 1e-6 absolute (the fixture keeps 9 significant
 * digits of logits of magnitude < 10); float32 graph 2e-4 absolute (float32
 * rounding through 2 layers of width 16; qwen3's within 1e-4).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import * as ort from 'onnxruntime-node';
import { loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { paramLayout } from '../../../engines/families/transformer/spec';
import { referenceForward } from '../../../engines/onnx/transformer/reference';
import { buildTransformerLogitsGraph } from '../../../engines/onnx/transformer/score-graph';
import { session } from '../engine/helpers';

const FIXTURES = path.join(__dirname, '../../fixtures/hf');
const expected = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'reference-logits.json'), 'utf8')) as {
  prompts: number[][];
  models: Record<string, number[][][]>;
};

function maxDiff(a: number[][], b: ArrayLike<number>[]): number {
  let m = 0;
  a.forEach((row, p) => row.forEach((x, v) => (m = Math.max(m, Math.abs(x - b[p]![v]!)))));
  return m;
}

describe('HF checkpoints: logits agree with PyTorch', () => {
  for (const name of ['gpt2-tiny', 'llama-tiny', 'qwen2-tiny', 'qwen3-tiny']) {
    const ckpt = loadHfCheckpoint(path.join(FIXTURES, name));
    const want = expected.models[name]!;

    it(`${name}: the float64 reference within 1e-6`, () => {
      const { logits } = referenceForward(ckpt.spec, ckpt.theta, expected.prompts);
      logits.forEach((seq, i) => {
        const d = maxDiff(want[i]!, seq);
        assert.ok(d < 1e-6, `prompt ${i}: max |Δlogit| ${d}`);
      });
    });

    for (const [ft, tol] of [
      ['float64', 1e-6],
      ['float32', name === 'qwen3-tiny' ? 1e-4 : 2e-4],
    ] as const) {
      it(`${name}: the engine's ${ft} logits graph within ${tol}`, async () => {
        const graph = buildTransformerLogitsGraph(ckpt.spec, ft);
        // ORT's extended fusions are float32-only (as in transformer-gradient.test.ts)
        const s =
          ft === 'float64'
            ? await ort.InferenceSession.create(graph, { intraOpNumThreads: 1, graphOptimizationLevel: 'basic', logSeverityLevel: 3 })
            : await session(graph);
        const Arr = ft === 'float64' ? Float64Array : Float32Array;
        for (const [i, prompt] of expected.prompts.entries()) {
          const out = await s.run({
            theta: new ort.Tensor(ft, Arr.from(ckpt.theta), [ckpt.theta.length]),
            tokens: new ort.Tensor('int64', BigInt64Array.from(prompt.map(BigInt)), [1, prompt.length]),
          });
          const data = out.logits!.data as Float32Array | Float64Array;
          const V = ckpt.spec.vocabSize;
          const rows = prompt.map((_, p) => data.subarray(p * V, (p + 1) * V));
          const d = maxDiff(want[i]!, rows);
          assert.ok(d < tol, `prompt ${i}: max |Δlogit| ${d}`);
        }
      });
    }
  }

  it('the logits are not trivially close: models and prompts differ by far more than the tolerance', () => {
    const g = expected.models['gpt2-tiny']!;
    const l = expected.models['llama-tiny']!;
    assert.ok(Math.abs(g[0]![5]![3]! - l[0]![5]![3]!) > 0.01);
    assert.ok(Math.abs(g[0]![5]![3]! - g[1]![5]![3]!) > 0.01);
  });

  it('qwen3-tiny: its q/k norms matter (the same weights without them give other logits)', () => {
    const ckpt = loadHfCheckpoint(path.join(FIXTURES, 'qwen3-tiny'));
    assert.equal(ckpt.spec.headDim, 8);
    assert.equal(ckpt.spec.qkNorm, true);
    const spec = { ...ckpt.spec, qkNorm: false };
    const keep = new Set(paramLayout(spec).slots.map((s) => s.name));
    const theta = Float32Array.from(
      paramLayout(ckpt.spec)
        .slots.filter((s) => keep.has(s.name))
        .flatMap((s) => [...ckpt.theta.subarray(s.offset, s.offset + s.size)]),
    );
    const d = maxDiff(expected.models['qwen3-tiny']![0]!, referenceForward(spec, theta, [expected.prompts[0]!]).logits[0]!);
    assert.ok(d > 0.01, `max |Δlogit| without q/k norms ${d}`);
  });
});
