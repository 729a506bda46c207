/**
 * InitModel: version 0 of a spec and seed, from a checkpoint, idempotent and
 * deterministic, the spec normalized, v1 specs.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as P from '../../protocol/proto';
import * as wire from '../../protocol/wire';
import { BASE_SEED, type Check, expect, Fail, HEX64, ok, sha256Hex, Skip, type Spec } from '../context';
import { FAMILY_NAMES, normalizeModelSpec } from '../../families';
import { initTransformerWeights } from '../../families/transformer/init';
import { normalizeTransformerSpec } from '../../families/transformer/spec';
import { exportHfCheckpoint, loadHfCheckpoint } from '../../checkpoints/hf-layout';
import { encodeWeights } from '../../protocol/version-bytes';
import { generateOk, sameInfo } from './fixtures';

export const INIT_CHECKS: Check[] = [
  {
    id: 'init.version0',
    title: 'InitModel: version 0, the normalized spec echoed, param_count > 0, 64-hex sha256s, optimizer_step 0',
    async run(ctx) {
      const spec = await ctx.spec();
      const { info } = await ctx.base();
      const problems: string[] = [];
      if (String(info.version) !== '0') problems.push(`version ${info.version}, expected 0`);
      if (!info.spec) problems.push('spec missing');
      else {
        if (info.spec.family !== spec.family) problems.push(`spec.family ${JSON.stringify(info.spec.family)}, sent ${JSON.stringify(spec.family)}`);
        if (info.spec.vocabSize !== spec.vocabSize) problems.push(`spec.vocab_size ${info.spec.vocabSize}, sent ${spec.vocabSize}`);
        let cfg: Record<string, unknown> | undefined;
        try {
          cfg = JSON.parse(info.spec.configJson || 'null');
        } catch {
          problems.push(`spec.config_json not JSON: ${JSON.stringify(info.spec.configJson).slice(0, 80)}`);
        }
        if (cfg !== undefined) {
          if (!cfg || typeof cfg !== 'object') problems.push(`spec.config_json ${JSON.stringify(info.spec.configJson).slice(0, 80)} is not an object`);
          else {
            const sent = JSON.parse(spec.configJson || '{}') as Record<string, unknown>;
            const diff = Object.keys(sent).filter((k) => JSON.stringify(cfg[k]) !== JSON.stringify(sent[k]));
            if (diff.length)
              problems.push(
                `spec.config_json differs from the sent config at ${diff.map((k) => `${k} (${JSON.stringify(cfg[k])} vs ${JSON.stringify(sent[k])})`).join(', ')}`,
              );
          }
        }
      }
      if (!(info.paramCount > 0)) problems.push(`param_count ${info.paramCount}`);
      if (!HEX64.test(info.weightsSha256)) problems.push(`weights_sha256 ${JSON.stringify(info.weightsSha256)} not 64 lowercase hex`);
      if (!HEX64.test(info.optimizerSha256)) problems.push(`optimizer_sha256 ${JSON.stringify(info.optimizerSha256)} not 64 lowercase hex`);
      if (info.optimizerStep !== 0) problems.push(`optimizer_step ${info.optimizerStep}, expected 0`);
      expect(problems.length === 0, problems.join('; '));
      return `${info.paramCount} params; config ${info.spec?.configJson}`;
    },
  },
  {
    id: 'init.checkpoint',
    title:
      'InitModel of {"checkpoint": dir}: version 0 is the Hugging Face directory\'s weights and spec (as engines/checkpoints reads them); a directory without config.json is INVALID_REQUEST naming spec.checkpoint',
    async run(ctx) {
      await ctx.requireRpcs('InitModel');
      if (!(await ctx.capabilities()).families.includes('transformer')) throw new Skip('the engine does not host the "transformer" family');
      // a llama-layout checkpoint written here (so the engine must share this machine's temp dir, as a pool worker's does)
      const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-conformance-ckpt-'));
      try {
        const dir = path.join(root, 'llama');
        const spec = normalizeTransformerSpec({
          vocabSize: 16,
          width: 32,
          layers: 2,
          heads: 4,
          kvHeads: 2,
          maxSeq: 32,
          positions: 'rope',
          norm: 'rmsnorm',
          mlp: 'swiglu',
        });
        exportHfCheckpoint(dir, spec, initTransformerWeights(spec, 7));
        const loaded = loadHfCheckpoint(dir);
        const key = ctx.key('checkpoint');
        const o = await ctx.client.unary('InitModel', {
          modelKey: key,
          spec: { family: 'transformer', configJson: JSON.stringify({ checkpoint: dir }) },
          seed: '1',
        });
        if (!o.ok && o.error.reason === 'INVALID_REQUEST' && /spec\.checkpoint: unknown option/.test(o.error.message))
          throw new Skip(`the engine does not load checkpoint specs (${o.error.message})`);
        const info = ok(o, 'InitModel {checkpoint}');
        const want = sha256Hex(encodeWeights(loaded.theta));
        expect(info.weightsSha256 === want, `weights_sha256 ${info.weightsSha256}, the checkpoint's θ is ${want}`);
        const got = normalizeModelSpec({ ...JSON.parse(info.spec?.configJson || '{}'), family: info.spec?.family, vocabSize: info.spec?.vocabSize });
        expect(JSON.stringify(got) === JSON.stringify(loaded.spec), `spec ${JSON.stringify(got)}, the checkpoint's is ${JSON.stringify(loaded.spec)}`);
        const empty = path.join(root, 'empty');
        fs.mkdirSync(empty);
        const e = await ctx.expectError(
          'InitModel of a directory without config.json',
          () =>
            ctx.client.unary('InitModel', {
              modelKey: ctx.key('checkpoint-empty'),
              spec: { family: 'transformer', configJson: JSON.stringify({ checkpoint: empty }) },
              seed: '1',
            }),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
        expect(/spec\.checkpoint/.test(e.message), `the error does not name spec.checkpoint: ${e.message}`);
        return `${info.paramCount} params from ${loaded.model.modelType}; the bad directory: ${e.message.slice(0, 80)}`;
      } finally {
        fs.rmSync(root, { recursive: true, force: true });
      }
    },
  },
  {
    id: 'init.idempotent',
    title: 'InitModel repeated with the same key, spec and seed returns the same version 0',
    async run(ctx) {
      const base = await ctx.base();
      const again = ok(await ctx.client.unary('InitModel', { modelKey: base.key, spec: await ctx.spec(), seed: BASE_SEED }), 'repeated InitModel');
      expect(
        sameInfo(again, base.info),
        `repeat gave v${again.version} sha ${again.weightsSha256.slice(0, 12)}…, first v${base.info.version} sha ${base.info.weightsSha256.slice(0, 12)}…`,
      );
    },
  },
  {
    id: 'init.deterministic',
    title: 'InitModel with the same spec and seed under another key gives the same weights sha (deterministic engines)',
    async run(ctx) {
      await ctx.requireDeterministic();
      const base = await ctx.base();
      const info = ok(await ctx.client.unary('InitModel', { modelKey: ctx.key('init-same-seed'), spec: await ctx.spec(), seed: BASE_SEED }), 'InitModel');
      expect(
        info.weightsSha256 === base.info.weightsSha256,
        `sha ${info.weightsSha256.slice(0, 12)}…, expected ${base.info.weightsSha256.slice(0, 12)}… (same spec and seed)`,
      );
    },
  },
  {
    id: 'init.seed',
    title: 'InitModel with another seed gives other weights; under the same key that is VERSION_CONFLICT',
    async run(ctx) {
      await ctx.requireRpcs('InitModel');
      const base = await ctx.base();
      const spec = await ctx.spec();
      const info = ok(await ctx.client.unary('InitModel', { modelKey: ctx.key('init-other-seed'), spec, seed: '4321' }), 'InitModel seed 4321');
      expect(info.weightsSha256 !== base.info.weightsSha256, `seed 4321 gave the same weights sha as seed ${BASE_SEED}`);
      await ctx.expectError(
        'InitModel of the base key with another seed',
        () => ctx.client.unary('InitModel', { modelKey: base.key, spec, seed: '4321' }),
        'FAILED_PRECONDITION',
        'VERSION_CONFLICT',
      );
    },
  },

  {
    id: 'init.normalized-spec',
    title: 'InitModel echoes the spec normalized as Troupe does (engines/families/index.ts): every field, defaults filled, for a full and a sparse config',
    async run(ctx) {
      await ctx.requireRpcs('InitModel');
      const spec = await ctx.spec();
      if (!FAMILY_NAMES.includes(spec.family ?? ''))
        throw new Skip(`family ${spec.family} is not one of Troupe's (${FAMILY_NAMES.join(', ')}): no reference normalization`);
      const sparse: Spec =
        spec.family === 'transformer'
          ? { family: 'transformer', vocabSize: 12, configJson: JSON.stringify({ width: 16, layers: 1, heads: 2, maxSeq: 16 }) }
          : { family: spec.family, vocabSize: 12, configJson: '{}' };
      const problems: string[] = [];
      for (const [name, sent, info] of [
        ['test', spec, (await ctx.base()).info],
        ['sparse', sparse, ok(await ctx.client.unary('InitModel', { modelKey: ctx.key('sparse'), spec: sparse, seed: '1' }), 'InitModel of a sparse spec')],
      ] as const) {
        const want = JSON.parse(wire.specToWire(normalizeModelSpec(wire.specFromWire(P.ModelSpec.fromPartial(sent)))).configJson!) as Record<string, unknown>;
        let got: Record<string, unknown> = {};
        try {
          got = JSON.parse(info.spec?.configJson || '{}');
        } catch {
          problems.push(`${name}: config_json not JSON`);
          continue;
        }
        const keys = [...new Set([...Object.keys(want), ...Object.keys(got)])];
        const diff = keys.filter((k) => JSON.stringify(want[k]) !== JSON.stringify(got[k]));
        if (diff.length) problems.push(`${name} spec: ${diff.map((k) => `${k} ${JSON.stringify(got[k])} (Troupe: ${JSON.stringify(want[k])})`).join(', ')}`);
        if (info.spec?.family !== sent.family) problems.push(`${name} spec: family ${JSON.stringify(info.spec?.family)}`);
      }
      expect(problems.length === 0, problems.join('; '));
    },
  },
  {
    id: 'init.v1-spec',
    title:
      'InitModel reads the v1 tiny-lm form (family "", fields 3-7, no config_json) and echoes it as family "tiny-lm" with config_json; tiny-lm generates from an empty context, past its window, without CONTEXT_FULL',
    async run(ctx) {
      await ctx.requireRpcs('InitModel');
      if (!(await ctx.capabilities()).families.includes('tiny-lm')) throw new Skip('the engine does not host tiny-lm');
      const info = ok(
        await ctx.client.unary('InitModel', {
          modelKey: ctx.key('v1-spec'),
          spec: { family: '', vocabSize: 16, contextWindow: 4, embedDim: 8, hiddenDim: 16 },
          seed: '1',
        }),
        'InitModel of a v1 tiny-lm spec',
      );
      let cfg: Record<string, unknown> = {};
      try {
        cfg = JSON.parse(info.spec?.configJson || '{}');
      } catch {
        throw new Fail(`config_json ${JSON.stringify(info.spec?.configJson)} not JSON`);
      }
      expect(info.spec?.family === 'tiny-lm', `family ${JSON.stringify(info.spec?.family)}, expected "tiny-lm"`);
      expect(
        cfg.contextWindow === 4 && cfg.embedDim === 8 && cfg.hiddenDim === 16,
        `config_json ${info.spec?.configJson}, expected contextWindow 4, embedDim 8, hiddenDim 16`,
      );
      if ((await ctx.capabilities()).rpcs.includes('Generate')) {
        // tiny-lm: an empty context is allowed, and its sliding window never fills (no CONTEXT_FULL)
        const g = await generateOk(
          ctx,
          {
            modelKey: info.modelKey,
            version: '0',
            sampling: { temperature: 1, maxTokens: 40 },
            sequences: [
              { context: [], seed: '1' },
              { context: [3], seed: '2' },
            ],
          },
          'tiny-lm Generate (empty context, 40 tokens > window 4)',
        );
        expect(
          g.sequences.every((x) => x.tokens.length === 40 && x.stopReason === 'MAX_TOKENS'),
          `tiny-lm: ${g.sequences.map((x) => `${x.tokens.length} ${x.stopReason}`).join(', ')}, expected 40 MAX_TOKENS`,
        );
      }
    },
  },
];
