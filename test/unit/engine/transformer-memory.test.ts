/**
 * The transformer memory estimate (engines/families/transformer/memory.ts) against
 * hand-computed byte counts, the refusal naming the dominant field, and the
 * engine refusing a spec that does not fit its budget at InitModel.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EngineFault } from '../../../engines/protocol/errors';
import { checkTransformerFits, generateBytesPerRow, rowsThatFit, stateBytes, updateBytesPerSequence } from '../../../engines/families/transformer/memory';
import { normalizeTransformerSpec, paramLayout, TransformerSpecError } from '../../../engines/families/transformer/spec';
import { cpuEngine } from './helpers';

// V 10, D 8, 2 layers, 2 heads over 1 kv head (hd 4, Dkv 4), F 16, GELU, learned positions, maxSeq 6.
const SMALL = normalizeTransformerSpec({ vocabSize: 10, width: 8, layers: 2, heads: 2, kvHeads: 1, mlpWidth: 16, maxSeq: 6 });

test('byte counts match hand computation', () => {
  // θ: tok 80 + pos 48 + 2 × (ln1 16 + q 72 + k 36 + v 36 + o 72 + ln2 16 + w1 144 + w2 136 = 528) + lnf 16 = 1200
  assert.equal(paramLayout(SMALL).total, 1200);
  assert.equal(stateBytes(SMALL), 4 * 8 * 1200); // 38,400
  // per layer and token: 10·8 + 2·4 + 3·16 = 136, plus copies·H·S attention values
  // update, S 6: (2 + 1) × (136 + 2·2·6 = 160) = 480 per token → 4 × 6 × 480 (the head runs in chunks: no V term)
  assert.equal(updateBytesPerSequence(SMALL, 6), 11_520);
  // generate, S 6: caches 4·2·4·6 = 192; prefill 6 × (136 + 3·2·6 = 172) = 1032; sampling 24·10 = 240 → 4 × 1464
  assert.equal(generateBytesPerRow(SMALL, 6), 5_856);
  // S 3: update 3 × 3 × (136 + 12) × 4 = 5,328
  assert.equal(updateBytesPerSequence(SMALL, 3), 5_328);
});

test('a LoRA spec keeps AdamW state for its adapter only: 4·(2·P + 2·Pt + 8·Pa); a generate row holds 2·Pa more', () => {
  // rank 2 on q [8, 8] and w2 [16, 8], 2 layers: Pt = 2 × (64 + 128) = 384; Pa = 2 × (2·8 + 8·2 + 2·16 + 8·2) = 160
  const lora = normalizeTransformerSpec({ ...SMALL, lora: { rank: 2, alpha: 2, targets: ['q', '2'], baseSeed: 1 } });
  assert.equal(stateBytes(lora), 4 * (2 * 1200 + 2 * 384 + 8 * 160)); // 17,792 < the full spec's 38,400
  assert.equal(generateBytesPerRow(lora, 6), 5_856 + 4 * 2 * 160); // the row's gathered A and B, and the run's transposes
  // activations are the base's
  assert.equal(updateBytesPerSequence(lora, 6), updateBytesPerSequence(SMALL, 6));
});

test('a free head dimension and q/k norms: q and ctx are heads·headDim wide, the norms keep 2·(Dq + Dkv) more', () => {
  // SMALL with hd 6: Dq 12, Dkv 6; per layer and token 8·8 + 2·12 + 2·6 + 3·16 = 148, with qkNorm + 2·(12 + 6) = 184
  const wide = normalizeTransformerSpec({ ...SMALL, headDim: 6 });
  const qk = normalizeTransformerSpec({ ...SMALL, headDim: 6, qkNorm: true });
  // update, S 6: 3 × (148 + 24) × 6 × 4 = 12,384; with q/k norms 3 × (184 + 24) × 6 × 4 = 14,976
  assert.equal(updateBytesPerSequence(wide, 6), 12_384);
  assert.equal(updateBytesPerSequence(qk, 6), 14_976);
  // generate, S 6: caches 4·2·6·6 = 288; prefill 6 × (184 + 36) = 1320; sampling 240 → 4 × 1848
  assert.equal(generateBytesPerRow(qk, 6), 7_392);
});

test('a spec fits exactly at state + 2 of its largest rows; one byte less is refused naming the dominant field', () => {
  const need = 38_400 + 2 * 11_520; // 61,440
  assert.doesNotThrow(() => checkTransformerFits(SMALL, need));
  assert.throws(
    () => checkTransformerFits(SMALL, need - 1, 'models.policy'),
    (e: unknown) =>
      e instanceof TransformerSpecError && e.issues.length === 1 && e.issues[0]!.path === 'models.policy.width' && /budget is/.test(e.issues[0]!.message),
  );
  // Long sequences: activations (quadratic in maxSeq) dominate the 1664-parameter state.
  const long = normalizeTransformerSpec({ ...SMALL, maxSeq: 64 });
  assert.ok(2 * updateBytesPerSequence(long, 64) > stateBytes(long));
  assert.throws(
    () => checkTransformerFits(long, 100_000),
    (e: unknown) => e instanceof TransformerSpecError && e.issues[0]!.path === 'spec.maxSeq',
  );
  // A large vocabulary: the embedding holds most parameters.
  const wide = normalizeTransformerSpec({ vocabSize: 5000, width: 8, layers: 1, heads: 2, maxSeq: 2 });
  assert.throws(
    () => checkTransformerFits(wide, 1_000_000),
    (e: unknown) => e instanceof TransformerSpecError && e.issues[0]!.path === 'spec.vocabSize',
  );
});

test('rows that fit beside the state: floor((budget − state) / row), at least 2', () => {
  assert.equal(rowsThatFit(SMALL, 38_400 + 5 * 5_056 + 5_055, 5_056), 5);
  assert.equal(rowsThatFit(SMALL, 10, 5_056), 2);
});

test('the engine refuses a spec over its memory budget at InitModel, naming the field', async () => {
  const engine = cpuEngine({ memory: { budgetBytes: 100_000, microBatchBytes: 2 ** 20 } });
  await assert.rejects(
    engine.initModel({
      modelKey: 'm',
      spec: { family: 'transformer', vocabSize: 10, width: 8, layers: 2, heads: 2, kvHeads: 1, mlpWidth: 16, maxSeq: 64 },
      seed: 1,
    }),
    (e: unknown) => e instanceof EngineFault && e.reason === 'INVALID_REQUEST' && /spec\.maxSeq: needs ~/.test(e.message),
  );
  const info = await engine.initModel({
    modelKey: 'm',
    spec: { family: 'transformer', vocabSize: 10, width: 8, layers: 2, heads: 2, kvHeads: 1, mlpWidth: 16, maxSeq: 6 },
    seed: 1,
  });
  assert.equal(info.version, 0);
});

test('a Qwen2.5-1.5B shape is a valid spec (the parameter bound is 1e10); the memory check is what refuses it on a small budget', () => {
  const qwen = normalizeTransformerSpec({
    ...{ vocabSize: 151_936, width: 1536, layers: 28, heads: 12, kvHeads: 2, mlpWidth: 8960, maxSeq: 2048 },
    ...{ positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false, tiedHead: true },
  });
  assert.ok(paramLayout(qwen).total > 1e9 && paramLayout(qwen).total < 2e9, `${paramLayout(qwen).total} parameters`);
  // 1.5e9 × 32 bytes of state (θ, m, v in and out, gradients) is 46 GiB, and 2 sequences of 2,048 positions 45 GiB:
  // a 16 GiB budget cannot hold it, an H200's can
  assert.throws(
    () => checkTransformerFits(qwen, 16 * 2 ** 30, 'models.policy'),
    (e: unknown) =>
      e instanceof TransformerSpecError &&
      e.issues[0]!.path === 'models.policy.width' &&
      /needs ~90\.64 GiB .* budget is 16\.00 GiB/.test(e.issues[0]!.message),
  );
  assert.doesNotThrow(() => checkTransformerFits(qwen, 128 * 2 ** 30));
  assert.throws(() => normalizeTransformerSpec({ vocabSize: 16, width: 8192, layers: 128, heads: 64 }), /parameters exceed the limit of 10000000000/);
});
