/**
 * gRPC's message size: exports over 4 MiB in chunks, each under gRPC's default limit.
 */
import type * as P from '../../protocol/proto';
import { type Check, type Context, expect, ok, sha256Hex, Skip, type Spec } from '../context';

/**
 * Spec of a model whose weights are just over 4 MiB (~1.1M parameters): tiny-lm
 * when the engine hosts it (about 2 s to make on 2 CPU cores), else a one-layer
 * transformer (about 6 s).
 */
function bigSpec(families: string[]): Spec | undefined {
  if (families.includes('tiny-lm'))
    return { family: 'tiny-lm', vocabSize: 16, configJson: JSON.stringify({ contextWindow: 8, embedDim: 128, hiddenDim: 1100 }) };
  if (families.includes('transformer')) {
    return {
      family: 'transformer',
      vocabSize: 16,
      configJson: JSON.stringify({ width: 256, layers: 1, heads: 4, maxSeq: 32, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu' }),
    };
  }
  return undefined;
}

/** The big model, made once, and its ExportVersionChunks stream with each message's encoded size. */
function bigExport(ctx: Context): Promise<{ info: P.VersionInfo; messages: P.ExportVersionChunk[]; sizes: number[]; initMs: number }> {
  return ctx.once('big', async () => {
    await ctx.requireRpcs('InitModel', 'ExportVersionChunks');
    const spec = bigSpec((await ctx.capabilities()).families);
    if (!spec) throw new Skip('the engine hosts neither tiny-lm nor transformer: no big spec known');
    const key = ctx.key('big');
    const t0 = Date.now();
    const info = ok(await ctx.client.unary('InitModel', { modelKey: key, spec, seed: '7' }, 120_000), 'InitModel of the big model');
    const initMs = Date.now() - t0;
    expect(info.paramCount * 4 > GRPC_DEFAULT_MAX_MESSAGE, `the big model has ${info.paramCount} params: not over 4 MiB`);
    const o = await ctx.client.serverStream('ExportVersionChunks', { modelKey: key, version: '0' }, 120_000);
    return { info, messages: ok(o, 'ExportVersionChunks of the big model'), sizes: o.sizes, initMs };
  });
}

const GRPC_DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024;

export const LIMIT_CHECKS: Check[] = [
  {
    id: 'limits.chunked-export',
    title: 'ExportVersionChunks of a model over 4 MiB: several messages whose joined bytes match the shas',
    async run(ctx) {
      const big = await bigExport(ctx);
      expect(big.messages.length >= 2, `${big.messages.length} message(s) for ${big.info.paramCount * 4} weight bytes`);
      const w = Buffer.concat(big.messages.map((m) => Buffer.from(m.weights)));
      const s = Buffer.concat(big.messages.map((m) => Buffer.from(m.optimizerState)));
      expect(
        w.length === big.info.paramCount * 4 && sha256Hex(w) === big.info.weightsSha256,
        `joined weights ${w.length} bytes, sha ${sha256Hex(w).slice(0, 12)}… vs ${big.info.weightsSha256.slice(0, 12)}…`,
      );
      expect(
        sha256Hex(s) === big.info.optimizerSha256,
        `joined optimizer_state sha ${sha256Hex(s).slice(0, 12)}… vs ${big.info.optimizerSha256.slice(0, 12)}…`,
      );
      return `${big.info.spec?.family} with ${big.info.paramCount} params: ${big.messages.length} messages; InitModel ${big.initMs} ms`;
    },
  },
  {
    id: 'limits.chunk-size',
    title: "ExportVersionChunks: every message within gRPC's default 4 MiB limit (a caller that did not raise it can read the stream)",
    async run(ctx) {
      const big = await bigExport(ctx);
      const largest = Math.max(0, ...big.sizes);
      const over = big.sizes.filter((n) => n > GRPC_DEFAULT_MAX_MESSAGE).length;
      expect(
        over === 0,
        `${over} of ${big.sizes.length} messages over ${GRPC_DEFAULT_MAX_MESSAGE} bytes (largest ${largest}): a client with gRPC's default receive limit gets RESOURCE_EXHAUSTED`,
      );
      return `largest message ${largest} bytes`;
    },
  },
];
