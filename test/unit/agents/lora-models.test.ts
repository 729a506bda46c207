/**
 * LoRA models (agents/model.ts lora(), engines/families/transformer/lora.ts): the team completes a
 * LoRA model's config from its base and names every bad field; the adapter layout and the merge
 * W + (α/r)·Aᵀ·Bᵀ against hand-computed values.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agent, charTokenizer, defineTeam, generatedTasks, lora, TeamDefinitionError, tinyLM, transformer, type ModelSpec } from '../../../agents';
import { engineSpec } from '../../../agents/model';
import { adapterLayout, baseSpecOf, mergeLora } from '../../../engines/families/transformer/lora';
import { normalizeTransformerSpec, paramLayout, transformerSpecKey } from '../../../engines/families/transformer/spec';

const tokenizer = charTokenizer('0123456789');
const policy = transformer({ tokenizer, width: 16, layers: 2, heads: 2, maxSeq: 32, mlp: 'swiglu', norm: 'rmsnorm', positions: 'rope', bias: false });

function team(models: Record<string, ModelSpec>) {
  const agents = Object.fromEntries(Object.keys(models).map((m) => [m, agent({ model: m, maxTokens: 2 })]));
  return defineTeam({
    name: 'lora',
    tokenizer,
    models,
    agents,
    tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
    episode: async () => '',
    rewards: Object.fromEntries(Object.keys(models).map((m) => [m, () => ({ r: 1 })])),
    success: () => true,
  });
}

function problems(models: Record<string, ModelSpec>): string[] {
  try {
    team(models);
  } catch (e) {
    assert.ok(e instanceof TeamDefinitionError, String(e));
    return e.problems;
  }
  assert.fail('expected a TeamDefinitionError');
}

test("a LoRA model's engine spec is its base's config plus lora, targets in layer order", () => {
  const t = team({ policy, solver: lora({ tokenizer, base: 'policy', rank: 4, targets: ['v', 'q', 'd'] }) });
  const s = t.models.solver!;
  assert.equal(s.base, 'policy');
  assert.deepEqual(engineSpec(s), { ...engineSpec(policy), lora: { rank: 4, alpha: 4, targets: ['v', 'q', 'd'] } });
  const n = normalizeTransformerSpec(engineSpec(s));
  assert.deepEqual(n.lora, { rank: 4, alpha: 4, targets: ['q', 'v', 'd'] });
  assert.deepEqual(baseSpecOf(n), normalizeTransformerSpec(engineSpec(policy)));
  // defining the team again (troupe train --model does) completes it the same way
  assert.deepEqual(engineSpec(team(t.models).models.solver!), engineSpec(s));
  // the adapter's rank, scale and base seed are part of the spec's identity
  const key = (l: object) => transformerSpecKey(normalizeTransformerSpec({ ...engineSpec(policy), lora: l }));
  const keys = new Set([
    key({ rank: 4, alpha: 4, targets: ['q'] }),
    key({ rank: 4, alpha: 8, targets: ['q'] }),
    key({ rank: 4, alpha: 4, targets: ['q'], baseSeed: 3 }),
  ]);
  assert.equal(keys.size, 3);
});

test('a LoRA model over a checkpoint: the directory and lora travel to InitModel, the engine names the base', () => {
  const t = team({
    policy: transformer({ tokenizer, checkpoint: '/abs/qwen', maxSeq: 64 }),
    solver: lora({ tokenizer, base: 'policy', rank: 2, targets: ['q'] }),
  });
  assert.deepEqual(engineSpec(t.models.solver!), {
    family: 'transformer',
    vocabSize: tokenizer.size,
    checkpoint: '/abs/qwen',
    maxSeq: 64,
    lora: { rank: 2, alpha: 2, targets: ['q'] },
  });
});

test('bad LoRA models fail at team load, each field named', () => {
  const l = (o: Partial<Parameters<typeof lora>[0]>) => lora({ tokenizer, base: 'policy', rank: 2, targets: ['q'], ...o });
  assert.deepEqual(problems({ policy, solver: l({ base: 'nope' }) }), ['models.solver.base: unknown model "nope" (models: policy, solver)']);
  assert.deepEqual(problems({ policy, solver: l({ base: 'solver' }) }), ['models.solver.base: a LoRA model cannot be its own base']);
  assert.deepEqual(problems({ policy, a: l({}), b: l({ base: 'a' }) }), ['models.b.base: "a" is itself a LoRA model; name a full model']);
  assert.deepEqual(problems({ policy: tinyLM({ tokenizer }), solver: l({}) }), [
    'models.solver.base: "policy" is a tiny-lm model; LoRA needs a transformer base',
  ]);
  // over a checkpoint the shape is the directory's: the lora object is checked alone (targets by the engine, against
  // the layout: the family's projections or, over a transformers-layout model, module names such as q_proj)
  const ck = transformer({ tokenizer, checkpoint: '/abs/mistral' });
  assert.deepEqual(problems({ policy: ck, solver: l({ rank: 0, targets: ['q_proj', ''] }) }), [
    'models.solver.lora.rank: must be ≥ 1',
    'models.solver.lora.alpha: must be > 0',
    'models.solver.lora.targets[1]: must be a projection or module name',
  ]);
  assert.deepEqual(engineSpec(team({ policy: ck, solver: l({ targets: ['q_proj', 'gate_up_proj'] }) }).models.solver!).lora, {
    rank: 2,
    alpha: 2,
    targets: ['q_proj', 'gate_up_proj'],
  });
  assert.deepEqual(problems({ policy, solver: l({ rank: 0, alpha: -1 }) }), ['models.solver.lora.rank: must be ≥ 1', 'models.solver.lora.alpha: must be > 0']);
  assert.deepEqual(problems({ policy, solver: l({ targets: [] }) }), ['models.solver.lora.targets: name at least one projection']);
  assert.deepEqual(problems({ policy, solver: l({ targets: ['q_proj'] }) }), [
    'models.solver.lora.targets[0]: unknown option "q_proj"; known: q, k, v, o, 1, 2, g, u, d',
  ]);
  // '1' and '2' are the GELU MLP's; this base has a SwiGLU MLP
  assert.deepEqual(problems({ policy, solver: l({ targets: ['q', '1', 'q'] }) }), [
    'models.solver.lora.targets: "1" is not a projection of this model (it has: q, k, v, o, g, u, d)',
    'models.solver.lora.targets: "q" is named twice',
  ]);
});

test('adapter layout: A [r, in] then B [out, r] per layer and target', () => {
  // D 16, 2 heads of 8, kvHeads 1: wk is [16, 8]; F 64 (4·D): wd is [64, 16]
  const s = normalizeTransformerSpec({ ...engineSpec(policy), kvHeads: 1, lora: { rank: 3, alpha: 6, targets: ['d', 'k'] } });
  const { slots, total } = adapterLayout(s);
  assert.deepEqual(
    slots.map((x) => [x.name, x.offset, x.shape]),
    [
      ['l0.k.A', 0, [3, 16]],
      ['l0.k.B', 48, [8, 3]],
      ['l0.d.A', 72, [3, 64]],
      ['l0.d.B', 264, [16, 3]],
      ['l1.k.A', 312, [3, 16]],
      ['l1.k.B', 360, [8, 3]],
      ['l1.d.A', 384, [3, 64]],
      ['l1.d.B', 576, [16, 3]],
    ],
  );
  assert.equal(total, 624);
});

test('merge: W + (α/r)·Aᵀ·Bᵀ on the targeted matrix only, by hand', () => {
  // one layer, width 2, one head, MLP width 2, GELU, learned positions: wq is [2, 2] (in, out)
  const s = normalizeTransformerSpec({ vocabSize: 3, width: 2, layers: 1, heads: 1, mlpWidth: 2, maxSeq: 2, lora: { rank: 1, alpha: 2, targets: ['q'] } });
  const layout = paramLayout(s);
  const base = Float32Array.from({ length: layout.total }, (_, i) => i / 8);
  // A [1, 2] = [1, 2]; B [2, 1] = [3, 4]: Aᵀ·Bᵀ [in, out] = [[3, 4], [6, 8]], scale α/r = 2
  const merged = mergeLora(s, base, Float32Array.from([1, 2, 3, 4]));
  const wq = layout.slots.find((x) => x.name === 'l0.wq')!;
  assert.deepEqual(
    [...merged.subarray(wq.offset, wq.offset + 4)],
    [0, 1, 2, 3].map((i) => (wq.offset + i) / 8 + 2 * [3, 4, 6, 8][i]!),
  );
  for (let i = 0; i < layout.total; i++) if (i < wq.offset || i >= wq.offset + 4) assert.equal(merged[i], base[i], `θ[${i}] is not targeted`);
  assert.throws(() => mergeLora(s, base, new Float32Array(3)), /the adapter has 3 values, the spec needs 4/);
});
