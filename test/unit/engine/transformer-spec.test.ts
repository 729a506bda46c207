/**
 * The transformer config (engines/families/transformer/spec.ts): defaults, the flat
 * parameter layout against hand-counted sizes, errors that name the field, and
 * the deterministic init (init.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { transformerFamily } from '../../../engines/families/transformer/family';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { normalizeTransformerSpec, paramLayout, TransformerSpecError, transformerSpecKey } from '../../../engines/families/transformer/spec';
import { sameBits } from './helpers';

test('defaults give a small GPT-style model', () => {
  const s = normalizeTransformerSpec({ vocabSize: 32 });
  assert.deepEqual(s, {
    family: 'transformer',
    vocabSize: 32,
    width: 128,
    layers: 2,
    heads: 4,
    kvHeads: 4,
    mlpWidth: 512,
    positions: 'learned',
    ropeTheta: 10000,
    norm: 'layernorm',
    normEps: 1e-5,
    qkNorm: false,
    mlp: 'gelu',
    bias: true,
    tiedHead: true,
    maxSeq: 256,
    headDim: 32,
  });
});

test('parameter count and layout match hand counts (GPT-2 and Llama layouts)', () => {
  // V 10, D 8, F 16, maxSeq 4, one layer: tok 80 + pos 32 + ln1 16 + q/k/v/o 4·(64+8) + ln2 16
  // + w1 128+16 + w2 128+8 + lnf 16 = 728
  const gpt = normalizeTransformerSpec({ vocabSize: 10, width: 8, layers: 1, heads: 2, mlpWidth: 16, maxSeq: 4 });
  assert.equal(paramLayout(gpt).total, 728);
  assert.deepEqual(
    paramLayout(gpt).slots.map((s) => s.name),
    [
      'tok_emb',
      'pos_emb',
      'l0.ln1_g',
      'l0.ln1_b',
      'l0.wq',
      'l0.bq',
      'l0.wk',
      'l0.bk',
      'l0.wv',
      'l0.bv',
      'l0.wo',
      'l0.bo',
      'l0.ln2_g',
      'l0.ln2_b',
      'l0.w1',
      'l0.b1',
      'l0.w2',
      'l0.b2',
      'lnf_g',
      'lnf_b',
    ],
  );
  // V 10, D 8, 4 heads of 2, 2 kv heads, F 12, no biases, untied: tok 80 + ln1 8 + q 64 + k 32 + v 32
  // + o 64 + ln2 8 + g/u/d 3·96 + lnf 8 + head 80 = 664
  const llama = normalizeTransformerSpec({
    vocabSize: 10,
    width: 8,
    layers: 1,
    heads: 4,
    kvHeads: 2,
    mlpWidth: 12,
    positions: 'rope',
    norm: 'rmsnorm',
    mlp: 'swiglu',
    bias: false,
    tiedHead: false,
  });
  const layout = paramLayout(llama);
  assert.equal(layout.total, 664);
  assert.deepEqual(layout.slots.find((s) => s.name === 'l0.wk')!.shape, [8, 4]);
  assert.deepEqual(layout.slots.at(-1), { name: 'head', offset: 584, shape: [8, 10], size: 80, kind: 'matrix' });
  // Slots tile θ without gaps.
  let next = 0;
  for (const s of layout.slots) {
    assert.equal(s.offset, next);
    next += s.size;
  }
  assert.notEqual(transformerSpecKey(gpt), transformerSpecKey(llama));
});

test('Qwen3 layout: a free head dimension and per-head q/k norm gains (hand count)', () => {
  // V 10, D 8, 4 heads of 6, 2 kv heads, F 12, no biases, tied: tok 80 + ln1 8 + q 8·24 + k 8·12 + v 8·12
  // + lnq 6 + lnk 6 + o 24·8 + ln2 8 + g/u/d 3·96 + lnf 8 = 980
  const qwen3 = normalizeTransformerSpec({
    vocabSize: 10,
    width: 8,
    layers: 1,
    heads: 4,
    kvHeads: 2,
    headDim: 6,
    qkNorm: true,
    mlpWidth: 12,
    positions: 'rope',
    norm: 'rmsnorm',
    mlp: 'swiglu',
    bias: false,
  });
  const layout = paramLayout(qwen3);
  assert.equal(layout.total, 980);
  assert.deepEqual(
    layout.slots.map((s) => `${s.name} ${s.shape.join('x')}`),
    [
      'tok_emb 10x8',
      'l0.ln1_g 8',
      'l0.wq 8x24',
      'l0.wk 8x12',
      'l0.wv 8x12',
      'l0.lnq_g 6',
      'l0.lnk_g 6',
      'l0.wo 24x8',
      'l0.ln2_g 8',
      'l0.wg 8x12',
      'l0.wu 8x12',
      'l0.wd 12x8',
      'lnf_g 8',
    ],
  );
  // q/k norm gains start at 1, like every gain
  const theta = initTransformerWeights(qwen3, 1);
  const lnq = layout.slots.find((s) => s.name === 'l0.lnq_g')!;
  assert.deepEqual([...theta.subarray(lnq.offset, lnq.offset + lnq.size)], [1, 1, 1, 1, 1, 1]);
  // headDim frees heads from dividing width; qkNorm and headDim are part of the key
  assert.equal(normalizeTransformerSpec({ vocabSize: 10, width: 10, heads: 4, headDim: 4 }).headDim, 4);
  assert.notEqual(transformerSpecKey(qwen3), transformerSpecKey({ ...qwen3, qkNorm: false }));
  assert.notEqual(transformerSpecKey(qwen3), transformerSpecKey({ ...qwen3, headDim: 2 }));
  assert.equal(transformerFamily.describe(qwen3), 'transformer D8 L1 H4/2kv hd6 qk-norm F12 rope rmsnorm swiglu tied maxSeq 256');
});

function issuesOf(input: unknown): { path: string; message: string }[] {
  try {
    normalizeTransformerSpec(input, 'models.policy');
  } catch (e) {
    assert.ok(e instanceof TransformerSpecError, String(e));
    assert.match(e.message, /^models\.policy/);
    return [...e.issues];
  }
  assert.fail(`accepted ${JSON.stringify(input)}`);
}

test('bad specs fail naming the field', () => {
  const cases: [unknown, string, RegExp][] = [
    [{ vocabSize: 16, width: 10, heads: 4 }, 'models.policy.heads', /must divide width/],
    [{ vocabSize: 16, heads: 4, kvHeads: 3 }, 'models.policy.kvHeads', /must divide heads/],
    [{ vocabSize: 16, width: 12, heads: 4, positions: 'rope' }, 'models.policy.positions', /even head dimension/],
    [{ vocabSize: 16, headDim: 5, positions: 'rope' }, 'models.policy.headDim', /rope needs an even head dimension \(headDim = 5\)/],
    [{ vocabSize: 16, headDim: 0 }, 'models.policy.headDim', /≥ 1/],
    [{ vocabSize: 16, qkNorm: 1 }, 'models.policy.qkNorm', /.+/],
    [{ vocabSize: 16, layers: 0 }, 'models.policy.layers', /≥ 1/],
    [{ vocabSize: 16, layers: 2.5 }, 'models.policy.layers', /integer/],
    [{ vocabSize: 16, width: 1_000_000 }, 'models.policy.width', /≤ 8192/],
    [{ vocabSize: 16, maxSeq: 1e9 }, 'models.policy.maxSeq', /≤ 32768/],
    [{ vocabSize: 1 }, 'models.policy.vocabSize', /≥ 2/],
    [{}, 'models.policy.vocabSize', /.+/],
    [{ vocabSize: 16, norm: 'batchnorm' }, 'models.policy.norm', /unknown option "batchnorm"; known: layernorm, rmsnorm/],
    [{ vocabSize: 16, mlp: 'relu' }, 'models.policy.mlp', /known: gelu, swiglu/],
    [{ vocabSize: 16, positions: 'alibi' }, 'models.policy.positions', /known: learned, rope/],
    [{ vocabSize: 16, tiedHead: 'yes' }, 'models.policy.tiedHead', /.+/],
    [{ vocabSize: 16, dropout: 0.1 }, 'models.policy.dropout', /unknown option/],
    [{ vocabSize: 16, family: 'tiny-lm' }, 'models.policy.family', /.+/],
    // 8192-wide, 128 layers: every field is in range, the total is not.
    [{ vocabSize: 16, width: 8192, layers: 128, heads: 64 }, 'models.policy.width', /parameters exceed the limit/],
  ];
  for (const [input, path, message] of cases) {
    const issues = issuesOf(input);
    const hit = issues.find((i) => i.path === path);
    assert.ok(hit, `${JSON.stringify(input)}: expected an issue at ${path}, got ${JSON.stringify(issues)}`);
    assert.match(hit.message, message);
  }
  // Several bad fields are all reported.
  const many = issuesOf({ vocabSize: 0, layers: 0, norm: 'x' })
    .map((i) => i.path)
    .sort();
  assert.deepEqual(many, ['models.policy.layers', 'models.policy.norm', 'models.policy.vocabSize']);
});

test('init is deterministic per seed: gains 1, biases 0, residual projections scaled by 1/√(2·layers)', () => {
  const spec = normalizeTransformerSpec({ vocabSize: 11, width: 16, layers: 4, heads: 2, mlpWidth: 32 });
  const a = initTransformerWeights(spec, 42);
  assert.ok(sameBits(a, initTransformerWeights(spec, 42)));
  assert.ok(!sameBits(a, initTransformerWeights(spec, 43)));
  const half = 0.02 * Math.sqrt(3);
  for (const slot of paramLayout(spec).slots) {
    const v = Array.from(a.subarray(slot.offset, slot.offset + slot.size));
    const maxAbs = Math.max(...v.map(Math.abs));
    if (slot.kind === 'gain')
      assert.ok(
        v.every((x) => x === 1),
        slot.name,
      );
    else if (slot.kind === 'bias')
      assert.ok(
        v.every((x) => x === 0),
        slot.name,
      );
    else {
      const bound = slot.kind === 'residual-out' ? half / Math.sqrt(8) : half;
      assert.ok(maxAbs <= bound && maxAbs > 0.8 * bound, `${slot.name}: max |θ| ${maxAbs} vs bound ${bound}`);
    }
  }
});
