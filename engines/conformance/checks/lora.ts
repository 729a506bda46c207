/**
 * LoRA models (engines/families/transformer/lora.ts): refused without
 * capabilities.lora, version 0 is the base, Update trains the adapter only, the
 * merged model, mixed batches, checkpoints of the base, bad LoRA specs.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as P from '../../protocol/proto';
import { BASE_SEED, type Check, type Context, TRANSFORMER_TEST_SPEC, expect, Fail, type Model, ok, Skip, type Spec } from '../context';
import { initTransformerWeights } from '../../families/transformer/init';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec } from '../../families/transformer/spec';
import { adapterLayout, baseSpecOf, initAdapter, mergeLora } from '../../families/transformer/lora';
import { exportHfCheckpoint } from '../../checkpoints/hf-layout';
import { decodeOptimizerState, decodeWeights, encodeWeights } from '../../protocol/version-bytes';
import { type GenReq, fmt, generateOk, firstDifference, contexts, updateSamples, loadRequest } from './fixtures';

// ---------- LoRA (engines/families/transformer/lora.ts) ----------

/**
 * The LoRA test spec over the suite's transformer (its base: version 0 at BASE_SEED, the base model's), as sent
 * with `lora` merged over the test adapter (rank 4, α 8, q v and the MLP's down projection), and normalized.
 */
async function loraSpec(ctx: Context, lora: Record<string, unknown> = {}): Promise<{ spec: () => TransformerSpec; wire: Spec }> {
  const base = await ctx.spec();
  if (base.family !== 'transformer') throw new Skip(`the test spec is a ${base.family} model; LoRA adapts transformers`);
  const config = JSON.parse(base.configJson || '{}') as Record<string, unknown>;
  const mlp = normalizeTransformerSpec({ ...config, vocabSize: base.vocabSize }).mlp;
  const l = { rank: 4, alpha: 8, targets: ['q', 'v', mlp === 'swiglu' ? 'd' : '2'], baseSeed: Number(BASE_SEED), ...lora };
  return {
    spec: () => normalizeTransformerSpec({ ...config, lora: l, vocabSize: base.vocabSize }),
    wire: { ...base, configJson: JSON.stringify({ ...config, lora: l }) },
  };
}

async function requireLora(ctx: Context): Promise<void> {
  if (!(await ctx.capabilities()).lora) throw new Skip('the engine does not host LoRA models (capabilities.lora false; lora.refused checks that)');
  await ctx.requireRpcs('InitModel', 'ExportVersion', 'Score', 'Update', 'Generate', 'LoadVersion');
}

interface LoraFixture {
  key: string;
  spec: TransformerSpec;
  wire: Spec;
  base: Model;
  v0: P.ExportVersionResponse;
  v1: P.ExportVersionResponse;
  update: P.UpdateResponse;
}

/** A LoRA model over the base model's version 0: InitModel (seed 99), one Update, both versions exported. */
function loraFixture(ctx: Context): Promise<LoraFixture> {
  return ctx.once('lora', async () => {
    await requireLora(ctx);
    const base = await ctx.base();
    const { spec: normalized, wire } = await loraSpec(ctx);
    const spec = normalized();
    const key = ctx.key('lora');
    ok(await ctx.client.unary('InitModel', { modelKey: key, spec: wire, seed: '99' }), 'InitModel of the LoRA spec');
    const v0 = ok(await ctx.client.unary('ExportVersion', { modelKey: key, version: '0' }), 'ExportVersion LoRA v0');
    const request = P.UpdateRequest.fromPartial({
      modelKey: key,
      baseVersion: '0',
      requestId: ctx.key('lora-update'),
      samples: await updateSamples(ctx, key, '0'),
      settings: { lr: 0.05 },
    });
    const update = ok(await ctx.client.unary('Update', request), 'Update of the LoRA model');
    const v1 = ok(await ctx.client.unary('ExportVersion', { modelKey: key, version: String(update.info?.version ?? 1) }), 'ExportVersion LoRA v1');
    return { key, spec, wire, base, v0, v1, update };
  });
}

/** Score of fixed sequences (every context, 6 tokens each) on (key, version). */
async function scoreFixed(ctx: Context, key: string, version: string): Promise<number[][]> {
  const V = await ctx.vocab();
  const seqs = contexts(V).map((c, i) => ({ context: c, tokens: Array.from({ length: 6 }, (_, k) => (k * 7 + i * 3 + 1) % V) }));
  const res = ok(await ctx.client.unary('Score', { modelKey: key, version, sequences: seqs }), `Score ${key} v${version}`);
  return res.sequences.map((s) => s.logprobs);
}

function maxDiff(a: number[][], b: number[][]): { max: number; differ: number; n: number } {
  let max = 0;
  let differ = 0;
  let n = 0;
  a.forEach((row, i) =>
    row.forEach((x, k) => {
      const y = b[i]![k]!;
      n++;
      if (!Object.is(x, y)) differ++;
      const d = Math.abs(x - y);
      if (!(d <= max)) max = Number.isNaN(d) ? NaN : d;
    }),
  );
  return { max, differ, n };
}

/** The base's θ at version 0, as the engine exported it. */
const baseTheta = (f: LoraFixture) => decodeWeights(f.base.weights, paramLayout(baseSpecOf(f.spec)).total);

export const LORA_CHECKS: Check[] = [
  {
    id: 'lora.refused',
    title: 'An engine without capabilities.lora refuses a LoRA spec at InitModel: INVALID_REQUEST naming spec.lora (it does not run the base instead)',
    async run(ctx) {
      if ((await ctx.capabilities()).lora) throw new Skip('the engine hosts LoRA models (capabilities.lora); the other lora.* checks cover it');
      await ctx.requireRpcs('InitModel');
      const { wire } = await loraSpec(ctx);
      const e = await ctx.expectError(
        'InitModel of a LoRA spec',
        () => ctx.client.unary('InitModel', { modelKey: ctx.key('lora-refused'), spec: wire, seed: '99' }),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      expect(/spec\.lora/.test(e.message), `the error does not name spec.lora: ${e.message}`);
      return e.message.slice(0, 100);
    },
  },
  {
    id: 'lora.init-is-base',
    title:
      "LoRA version 0 (B = 0) scores bit for bit as its base's version 0; its weights are the adapter's A and B only, drawn as initAdapter draws them (the same bytes on every engine)",
    async run(ctx) {
      const f = await loraFixture(ctx);
      const adapter = adapterLayout(f.spec).total;
      expect(
        f.v0.weights.length === 4 * adapter,
        `version 0 holds ${f.v0.weights.length} weights bytes; the adapter is ${adapter} float32 values (${4 * adapter} bytes)`,
      );
      const drawn = decodeWeights(f.v0.weights, adapter);
      const expected = initAdapter(f.spec, 99);
      const off = drawn.findIndex((x, i) => !Object.is(x, expected[i]));
      expect(off < 0, `version 0's adapter value ${off} is ${drawn[off]}, initAdapter(spec, seed 99) draws ${expected[off]}`);
      const d = maxDiff(await scoreFixed(ctx, f.key, '0'), await scoreFixed(ctx, f.base.key, '0'));
      expect(d.differ === 0, `${d.differ} of ${d.n} log-probs differ from the base's (max |Δ| ${fmt(d.max)})`);
      return `${adapter} adapter values (${((100 * adapter) / paramLayout(baseSpecOf(f.spec)).total).toFixed(1)}% of the base's); ${d.n} log-probs equal`;
    },
  },
  {
    id: 'lora.update-adapter-only',
    title:
      "A LoRA Update trains the adapter: the new version's weights and AdamW state hold A and B only, B leaves 0, the log-probs move and the base's version 0 is unchanged",
    async run(ctx) {
      const f = await loraFixture(ctx);
      const { slots, total } = adapterLayout(f.spec);
      expect(f.v1.weights.length === 4 * total, `version 1 holds ${f.v1.weights.length} weights bytes, the adapter ${4 * total}`);
      let moments;
      try {
        moments = decodeOptimizerState(f.v1.optimizerState, total);
      } catch (e) {
        throw new Fail(`version 1's optimizer_state is not an AdamW state of the ${total} adapter values: ${(e as Error).message}`);
      }
      expect(moments.step === 1, `optimizer step ${moments.step} after one Update, expected 1`);
      const phi = decodeWeights(f.v1.weights, total);
      const b = slots.filter((x) => x.matrix === 'B');
      const moved = b.filter((x) => phi.subarray(x.offset, x.offset + x.size).some((v) => v !== 0)).length;
      expect(moved === b.length, `${b.length - moved} of ${b.length} B matrices are still 0 after the Update`);
      const d = maxDiff(await scoreFixed(ctx, f.key, String(f.update.info?.version)), await scoreFixed(ctx, f.base.key, '0'));
      expect(d.max > 0, 'the updated adapter scores exactly as the base');
      await ctx.stillServing('a LoRA Update');
      return `${total} values and moments per version; max |Δ log-prob| vs the base ${fmt(d.max)}`;
    },
  },
  {
    id: 'lora.merged',
    title: 'The merged weights W + (α/r)·Aᵀ·Bᵀ, loaded as a plain transformer, score as the LoRA version within 1e-5',
    async run(ctx) {
      const f = await loraFixture(ctx);
      const v = String(f.update.info?.version);
      const merged = mergeLora(f.spec, baseTheta(f), decodeWeights(f.v1.weights, adapterLayout(f.spec).total));
      const key = ctx.key('lora-merged');
      ok(
        await ctx.client.unary('LoadVersion', loadRequest(key, '0', await ctx.spec(), { weights: Buffer.from(encodeWeights(merged)) })),
        'LoadVersion of the merged weights',
      );
      const d = maxDiff(await scoreFixed(ctx, key, '0'), await scoreFixed(ctx, f.key, v));
      expect(d.max <= 1e-5, `max |Δ log-prob| ${fmt(d.max)} > 1e-5 over ${d.n} tokens`);
      return `max |Δ| ${fmt(d.max)} over ${d.n} tokens`;
    },
  },
  {
    id: 'lora.mixed-batch',
    title:
      'Generate calls on different LoRA adapters over one base run in one batch (Stats.mixed_adapter_runs rises), each row with its own adapter: every sequence equals its call alone, bit for bit when deterministic',
    async run(ctx) {
      const f = await loraFixture(ctx);
      await ctx.requireRpcs('Stats');
      const caps = await ctx.capabilities();
      const V = await ctx.vocab();
      // a third adapter: version 1's with B negated, loaded under another key
      const { total, slots } = adapterLayout(f.spec);
      const phi = decodeWeights(f.v1.weights, total);
      for (const x of slots.filter((s) => s.matrix === 'B')) for (let i = x.offset; i < x.offset + x.size; i++) phi[i] = -phi[i]!;
      const other = ctx.key('lora-mixed');
      ok(
        await ctx.client.unary('LoadVersion', loadRequest(other, '0', f.wire, { weights: Buffer.from(encodeWeights(phi)) })),
        'LoadVersion of a third adapter',
      );
      // sampled when deterministic (tokens and log-probs must match), else greedy (log-probs within score_tolerance)
      const sampling = { temperature: caps.deterministic ? 1 : 0, maxTokens: 6 };
      const calls: GenReq[] = [
        [f.key, String(f.update.info?.version ?? 1)],
        [f.key, '0'],
        [other, '0'],
      ].map(([modelKey, version], i) => ({
        modelKey: modelKey!,
        version: version!,
        sampling,
        sequences: contexts(V).map((context, j) => ({ context, seed: String(10 * i + j) })),
      }));
      const alone: P.GenerateResponse[] = [];
      for (const [i, c] of calls.entries()) alone.push(await generateOk(ctx, c, `Generate on adapter ${i} alone`));
      const d01 = maxDiff(
        alone[0]!.sequences.map((s) => s.logprobs),
        alone[1]!.sequences.map((s) => s.logprobs),
      );
      expect(
        d01.differ > 0 || alone[0]!.sequences.some((s, i) => s.tokens.join() !== alone[1]!.sequences[i]!.tokens.join()),
        'the trained adapter generates exactly as version 0',
      );
      const mixedRuns = async () => BigInt(ok(await ctx.client.unary('Stats', {}), 'Stats').mixedAdapterRuns || 0);
      let worst = 0;
      for (let attempt = 1; attempt <= 3; attempt++) {
        const before = await mixedRuns();
        const together = await Promise.all(calls.map((c, i) => generateOk(ctx, c, `Generate on adapter ${i} (concurrent)`)));
        const mixed = (await mixedRuns()) > before;
        together.forEach((res, i) => {
          if (caps.deterministic) {
            const diff = firstDifference(res.sequences, alone[i]!.sequences);
            expect(!diff, `adapter ${i}${mixed ? ' in a mixed run' : ''} vs alone: ${diff}`);
          } else {
            const d = maxDiff(
              res.sequences.map((s) => s.logprobs),
              alone[i]!.sequences.map((s) => s.logprobs),
            );
            expect(
              d.max <= caps.scoreTolerance,
              `adapter ${i}${mixed ? ' in a mixed run' : ''} vs alone: max |Δ log-prob| ${fmt(d.max)} > ${fmt(caps.scoreTolerance)}`,
            );
            worst = Math.max(worst, d.max);
          }
        });
        if (mixed)
          return `3 adapters, ${calls.length * contexts(V).length} sequences in a mixed run (attempt ${attempt}); ${caps.deterministic ? 'bit for bit' : `max |Δ| ${fmt(worst)}`} as alone`;
      }
      throw new Fail('3 concurrent Generate calls on adapters of one base never shared a run (Stats.mixed_adapter_runs unchanged over 3 attempts)');
    },
  },
  {
    id: 'lora.checkpoint-base',
    title:
      'InitModel of {"checkpoint": dir, "lora": …}: an adapter over the directory\'s weights (its spec names them as lora.baseCheckpoint); version 0 scores as the checkpoint model, and again when loaded from its export under another key',
    async run(ctx) {
      await requireLora(ctx);
      const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-conformance-lora-ckpt-'));
      try {
        const dir = path.join(root, 'llama');
        const spec = normalizeTransformerSpec({ ...JSON.parse(TRANSFORMER_TEST_SPEC.configJson!), vocabSize: 16 });
        exportHfCheckpoint(dir, spec, initTransformerWeights(spec, 7));
        const plain = ctx.key('lora-ckpt-plain');
        ok(
          await ctx.client.unary('InitModel', { modelKey: plain, spec: { family: 'transformer', configJson: JSON.stringify({ checkpoint: dir }) }, seed: '1' }),
          'InitModel {checkpoint}',
        );
        const key = ctx.key('lora-ckpt');
        const lora = { rank: 2, alpha: 4, targets: ['q', 'd'] };
        const info = ok(
          await ctx.client.unary('InitModel', {
            modelKey: key,
            spec: { family: 'transformer', configJson: JSON.stringify({ checkpoint: dir, lora }) },
            seed: '5',
          }),
          'InitModel {checkpoint, lora}',
        );
        const config = JSON.parse(info.spec?.configJson || '{}') as { lora?: { baseCheckpoint?: string } };
        expect(config.lora?.baseCheckpoint === dir, `the version's spec has lora ${JSON.stringify(config.lora)}, expected baseCheckpoint ${dir}`);
        const base = await scoreFixed(ctx, plain, '0');
        const d = maxDiff(await scoreFixed(ctx, key, '0'), base);
        expect(d.differ === 0, `version 0 (B = 0): ${d.differ} of ${d.n} log-probs differ from the checkpoint model's (max |Δ| ${fmt(d.max)})`);
        const ex = ok(await ctx.client.unary('ExportVersion', { modelKey: key, version: '0' }), 'ExportVersion');
        const again = ctx.key('lora-ckpt-loaded');
        ok(
          await ctx.client.unary(
            'LoadVersion',
            loadRequest(again, '0', info.spec!, { weights: Buffer.from(ex.weights), optimizerState: Buffer.from(ex.optimizerState) }),
          ),
          'LoadVersion of the export with its spec',
        );
        const d2 = maxDiff(await scoreFixed(ctx, again, '0'), base);
        expect(d2.differ === 0, `loaded from its export: ${d2.differ} of ${d2.n} log-probs differ (max |Δ| ${fmt(d2.max)})`);
        return `${info.paramCount} adapter values over ${dir}`;
      } finally {
        fs.rmSync(root, { recursive: true, force: true });
      }
    },
  },
  {
    id: 'lora.bad-spec',
    title: 'A LoRA spec without lora.baseSeed, or naming a projection the base lacks, is INVALID_REQUEST naming the field',
    async run(ctx) {
      await requireLora(ctx);
      const cases: Array<[Record<string, unknown>, RegExp]> = [
        [{ baseSeed: undefined }, /spec\.lora\.baseSeed/],
        [{ targets: ['q', 'nope'] }, /spec\.lora\.targets/],
        [{ rank: 0 }, /spec\.lora\.rank/],
      ];
      for (const [lora, field] of cases) {
        const { wire: spec } = await loraSpec(ctx, lora);
        const e = await ctx.expectError(
          `InitModel with lora ${JSON.stringify(lora)}`,
          () => ctx.client.unary('InitModel', { modelKey: ctx.key('lora-bad'), spec, seed: '1' }),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
        expect(field.test(e.message), `lora ${JSON.stringify(lora)}: the error does not match ${field}: ${e.message}`);
      }
    },
  },
];
