/**
 * Errors: each wrong request gets its code and reason, nothing is committed, and
 * the engine serves on. Most checks are a table of cases (rpc, request, code,
 * reason), sent in order by one runner, errorCheck; a case whose RPC the engine
 * does not list is left out.
 */
import type * as grpc from '@grpc/grpc-js';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as P from '../../protocol/proto';
import { type DeepPartial, RPCS } from '../../protocol/proto';
import type { ErrorReason } from '../../protocol/errors';
import { type Check, type Context, expect, ok, Skip } from '../context';
import { describeError, type Outcome, type Req, type WireError } from '../wire-client';
import { type GenReq, generateOk, firstUpdate, loadRequest } from './fixtures';

/** One wrong request and the error it must get. */
interface ErrorCase {
  /** What is sent, as a failure names it: "Generate with max_tokens 0". */
  what: string;
  rpc: P.RpcName;
  /** The request; a client stream's (LoadVersionChunks) is its messages. */
  request: Req<P.RpcName> | Req<P.RpcName>[];
  code: keyof typeof grpc.status;
  reason: ErrorReason;
  /** A field path the error message must name, its parts split by "…" ("samples[1]…advantages"). */
  names?: string;
}

interface ErrorCheck {
  id: string;
  title: string;
  /** RPCs the check needs: skipped unless the engine lists them. */
  requires: P.RpcName[];
  /** The cases, in the order they are sent (may Skip). */
  cases(ctx: Context): Promise<ErrorCase[]>;
  /** After every case: what else must hold (nothing committed...); the pass detail. */
  after?(ctx: Context, errors: WireError[]): Promise<string | void>;
}

function send(ctx: Context, c: ErrorCase): Promise<Outcome<unknown>> {
  if (Array.isArray(c.request)) return ctx.client.clientStream(c.rpc, c.request);
  return RPCS[c.rpc].responseStream ? ctx.client.serverStream(c.rpc, c.request) : ctx.client.unary(c.rpc, c.request);
}

/** The runner: each case the engine lists must fail with its code and reason (Context.expectError), naming its field. */
function errorCheck(c: ErrorCheck): Check {
  return {
    id: c.id,
    title: c.title,
    async run(ctx) {
      await ctx.requireRpcs(...c.requires);
      const cases = await c.cases(ctx);
      const caps = await ctx.capabilities();
      const errors: WireError[] = [];
      for (const k of cases) {
        if (!caps.rpcs.includes(k.rpc)) continue;
        const e = await ctx.expectError(k.what, () => send(ctx, k), k.code, k.reason);
        const named = k.names?.split('…').every((part) => e.message.includes(part)) ?? true;
        expect(named, `message ${JSON.stringify(e.message)} does not name ${k.names}`);
        errors.push(e);
      }
      return c.after?.(ctx, errors);
    },
  };
}

/** After failed Updates of the base model: it has no version 1. */
async function nothingCommitted(ctx: Context, what: string): Promise<void> {
  const v1 = await ctx.client.unary('ExportVersion', { modelKey: (await ctx.base()).key, version: '1' });
  expect(!v1.ok, `the base model has a version 1 after ${what}`);
}

const NOT_FOUND = 'NOT_FOUND';
const INVALID_ARGUMENT = 'INVALID_ARGUMENT';
const INVALID_REQUEST = 'INVALID_REQUEST';

export const ERROR_CHECKS: Check[] = [
  errorCheck({
    id: 'errors.model-not-loaded',
    title: 'Generate/Score/ExportVersion/Update of an unknown model_key → MODEL_NOT_LOADED (NOT_FOUND)',
    requires: ['Generate'],
    async cases(ctx) {
      const modelKey = ctx.key('never-loaded');
      const V = await ctx.vocab();
      const samples = [{ context: [1], tokens: [2], lossMask: [1], advantages: [1], oldLogprobs: [-1], lossWeights: [1] }];
      return [
        {
          what: 'Generate of an unknown model',
          rpc: 'Generate',
          request: { modelKey, version: '0', sequences: [{ context: [1], seed: '1' }], sampling: { maxTokens: 2 } },
          code: NOT_FOUND,
          reason: 'MODEL_NOT_LOADED',
        },
        {
          what: 'Score of an unknown model',
          rpc: 'Score',
          request: { modelKey, version: '0', sequences: [{ context: [1], tokens: [2 % V] }] },
          code: NOT_FOUND,
          reason: 'MODEL_NOT_LOADED',
        },
        { what: 'ExportVersion of an unknown model', rpc: 'ExportVersion', request: { modelKey, version: '0' }, code: NOT_FOUND, reason: 'MODEL_NOT_LOADED' },
        {
          what: 'Update of an unknown model',
          rpc: 'Update',
          request: { modelKey, baseVersion: '0', requestId: ctx.key('nl'), samples },
          code: NOT_FOUND,
          reason: 'MODEL_NOT_LOADED',
        },
      ];
    },
  }),
  errorCheck({
    id: 'errors.version-not-loaded',
    title: 'Generate/Score/ExportVersion/Update of a version never made → VERSION_NOT_LOADED (NOT_FOUND)',
    requires: ['Generate'],
    async cases(ctx) {
      const modelKey = (await ctx.base()).key;
      const samples = [{ context: [1], tokens: [2], lossMask: [1], advantages: [1], oldLogprobs: [-1], lossWeights: [1] }];
      return [
        {
          what: 'Generate of version 999',
          rpc: 'Generate',
          request: { modelKey, version: '999', sequences: [{ context: [1], seed: '1' }], sampling: { maxTokens: 2 } },
          code: NOT_FOUND,
          reason: 'VERSION_NOT_LOADED',
        },
        {
          what: 'Score of version 999',
          rpc: 'Score',
          request: { modelKey, version: '999', sequences: [{ context: [1], tokens: [2] }] },
          code: NOT_FOUND,
          reason: 'VERSION_NOT_LOADED',
        },
        { what: 'ExportVersion of version 999', rpc: 'ExportVersion', request: { modelKey, version: '999' }, code: NOT_FOUND, reason: 'VERSION_NOT_LOADED' },
        {
          what: 'Update of version 999',
          rpc: 'Update',
          request: { modelKey, baseVersion: '999', requestId: ctx.key('vnl'), samples },
          code: NOT_FOUND,
          reason: 'VERSION_NOT_LOADED',
        },
      ];
    },
  }),
  errorCheck({
    id: 'errors.token-out-of-vocab',
    title: 'A token id ≥ vocab_size in a Generate context (or Score tokens) → INVALID_REQUEST naming the field path',
    requires: ['Generate'],
    async cases(ctx) {
      const modelKey = (await ctx.base()).key;
      const V = await ctx.vocab();
      const sequences = [
        { context: [1], seed: '1' },
        { context: [1, V], seed: '2' },
      ];
      return [
        {
          what: 'Generate with sequences[1].context[1] = vocab_size',
          rpc: 'Generate',
          request: { modelKey, version: '0', sampling: { maxTokens: 2 }, sequences },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
          names: 'sequences[1]…context',
        },
        {
          what: 'Score with sequences[0].tokens[1] = vocab_size',
          rpc: 'Score',
          request: { modelKey, version: '0', sequences: [{ context: [1], tokens: [2, V + 3] }] },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
          names: 'sequences[0]…tokens',
        },
      ];
    },
    after: async (_, [generate]) => generate?.message,
  }),
  errorCheck({
    id: 'errors.max-tokens-zero',
    title: 'Generate with max_tokens 0 → INVALID_REQUEST naming max_tokens',
    requires: ['Generate'],
    async cases(ctx) {
      const modelKey = (await ctx.base()).key;
      return [
        {
          what: 'Generate with max_tokens 0',
          rpc: 'Generate',
          request: { modelKey, version: '0', sampling: { temperature: 1, maxTokens: 0 }, sequences: [{ context: [1], seed: '1' }] },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
          names: 'max_tokens',
        },
      ];
    },
    after: async (_, [e]) => e?.message,
  }),
  errorCheck({
    id: 'errors.empty-sequences',
    title: 'Generate/Score with no sequences, Update with no samples → INVALID_REQUEST',
    requires: ['Generate'],
    async cases(ctx) {
      const modelKey = (await ctx.base()).key;
      return [
        {
          what: 'Generate with an empty batch',
          rpc: 'Generate',
          request: { modelKey, version: '0', sampling: { maxTokens: 2 }, sequences: [] },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
        {
          what: 'Score with an empty batch',
          rpc: 'Score',
          request: { modelKey, version: '0', sequences: [] },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
        {
          what: 'Update with an empty batch',
          rpc: 'Update',
          request: { modelKey, baseVersion: '0', requestId: ctx.key('empty'), samples: [] },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
      ];
    },
    async after(ctx) {
      if ((await ctx.capabilities()).rpcs.includes('Update')) await nothingCommitted(ctx, 'a failed Update');
    },
  }),
  errorCheck({
    id: 'errors.update-invalid',
    title: 'Update with a NaN advantage, or a loss_mask of the wrong length → INVALID_REQUEST naming the field, nothing committed',
    requires: ['Update'],
    async cases(ctx) {
      const modelKey = (await ctx.base()).key;
      const sample: P.UpdateSample = {
        context: [1, 2],
        tokens: [3, 4, 5],
        lossMask: [1, 1, 1],
        advantages: [1, 1, 1],
        oldLogprobs: [-2, -2, -2],
        lossWeights: [1 / 3, 1 / 3, 1 / 3],
        refLogprobs: [],
      };
      const req = (s: Partial<P.UpdateSample>, id: string): Req<'Update'> => ({
        modelKey,
        baseVersion: '0',
        requestId: ctx.key(id),
        allowStaleBase: false,
        samples: [sample, { ...sample, ...s }],
        settings: undefined,
      });
      return [
        {
          what: 'Update with advantages[1] NaN',
          rpc: 'Update',
          request: req({ advantages: [1, NaN, 1] }, 'nan'),
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
          names: 'samples[1]…advantages',
        },
        {
          what: 'Update with a loss_mask of 2 for 3 tokens',
          rpc: 'Update',
          request: req({ lossMask: [1, 1] }, 'mask'),
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
          names: 'samples[1]…loss_mask',
        },
      ];
    },
    async after(ctx, [nan, mask]) {
      await nothingCommitted(ctx, 'failed Updates');
      return `${nan?.message} | ${mask?.message}`;
    },
  }),
  errorCheck({
    id: 'errors.bad-spec',
    title: 'InitModel with vocab_size 1, or an unknown family → INVALID_REQUEST',
    requires: ['InitModel'],
    async cases(ctx) {
      const spec = await ctx.spec();
      return [
        {
          what: 'InitModel with vocab_size 1',
          rpc: 'InitModel',
          request: { modelKey: ctx.key('bad-spec'), spec: { ...spec, vocabSize: 1 }, seed: '1' },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
        {
          what: 'InitModel of family "no-such-family"',
          rpc: 'InitModel',
          request: { modelKey: ctx.key('bad-family'), spec: { ...spec, family: 'no-such-family' }, seed: '1' },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
      ];
    },
  }),
  errorCheck({
    id: 'errors.sampling-invalid',
    title: 'Generate with a negative or NaN temperature, or a stop token ≥ vocab → INVALID_REQUEST',
    requires: ['Generate'],
    async cases(ctx) {
      const modelKey = (await ctx.base()).key;
      const V = await ctx.vocab();
      const samplings = [
        { temperature: -1, maxTokens: 2 },
        { temperature: NaN, maxTokens: 2 },
        { temperature: 1, maxTokens: 2, stopTokens: [V] },
      ];
      return samplings.map((sampling) => ({
        what: `Generate with ${JSON.stringify(sampling)}`,
        rpc: 'Generate',
        request: { modelKey, version: '0', sampling, sequences: [{ context: [1], seed: '1' }] },
        code: INVALID_ARGUMENT,
        reason: INVALID_REQUEST,
      }));
    },
  }),
  errorCheck({
    id: 'errors.context-length',
    title: 'transformer: an empty context, or context + max_tokens > maxSeq → INVALID_REQUEST; exactly maxSeq is served',
    requires: ['Generate'],
    async cases(ctx) {
      const base = await ctx.base();
      const maxSeq = contextLimit(base.info);
      const ctxLen = maxSeq - 4;
      return [
        { what: 'Generate with an empty context', rpc: 'Generate', request: contextRequest(base.key, [], 2), code: INVALID_ARGUMENT, reason: INVALID_REQUEST },
        {
          what: `Generate with context ${ctxLen} + max_tokens 5 > maxSeq ${maxSeq}`,
          rpc: 'Generate',
          request: contextRequest(base.key, Array(ctxLen).fill(1), 5),
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
      ];
    },
    async after(ctx) {
      const base = await ctx.base();
      const ctxLen = contextLimit(base.info) - 4;
      const full = contextRequest(base.key, Array(ctxLen).fill(1), 4);
      await generateOk(ctx, full, `Generate with context ${ctxLen} + max_tokens 4 = maxSeq`);
    },
  }),
  errorCheck({
    id: 'errors.update-settings',
    title: 'Update with dual_clip 0.5 (must be > 1 or 0), a negative loss weight, a loss_mask value 2, or ref_logprobs of the wrong length → INVALID_REQUEST',
    requires: ['Update'],
    async cases(ctx) {
      const modelKey = (await ctx.base()).key;
      const sample: P.UpdateSample = {
        context: [1, 2],
        tokens: [3, 4, 5],
        lossMask: [1, 1, 1],
        advantages: [1, -1, 1],
        oldLogprobs: [-2, -2, -2],
        lossWeights: [0.25, 0.25, 0.25],
        refLogprobs: [],
      };
      const wrong: [string, Partial<P.UpdateSample>, DeepPartial<P.UpdateSettings> | undefined][] = [
        ['settings.dual_clip 0.5', {}, { dualClip: 0.5 }],
        ['loss_weights[1] −0.25', { lossWeights: [0.25, -0.25, 0.25] }, undefined],
        ['loss_mask[1] 2', { lossMask: [1, 2, 1] }, undefined],
        ['1 ref_logprob for 3 tokens', { refLogprobs: [-1] }, undefined],
      ];
      return wrong.map(([what, s, settings]) => ({
        what: `Update with ${what}`,
        rpc: 'Update',
        request: { modelKey, baseVersion: '0', requestId: ctx.key(`bad-${what}`), allowStaleBase: false, samples: [{ ...sample, ...s }], settings },
        code: INVALID_ARGUMENT,
        reason: INVALID_REQUEST,
      }));
    },
    after: (ctx) => nothingCommitted(ctx, 'failed Updates'),
  }),
  {
    id: 'errors.non-finite-update',
    title:
      'An Update whose weights blow up (lr 3e38, 3 inner steps) → NON_FINITE_UPDATE (ABORTED), nothing committed, not remembered: a good Update with its request_id makes version 1',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const key = ctx.key('non-finite');
      ok(await ctx.client.unary('LoadVersion', loadRequest(key, '0', u.base.info.spec!, { weights: u.base.weights })), 'LoadVersion');
      const o = await ctx.client.unary('Update', { ...u.request, modelKey: key, requestId: ctx.key('blow-up'), settings: { lr: 3e38, innerSteps: 3 } });
      expect(!o.ok, 'Update with lr 3e38 succeeded (weights should not be finite)');
      const e = (o as { error: WireError }).error;
      const asInvalid = e.codeName === 'INVALID_ARGUMENT' && e.reason === 'INVALID_REQUEST';
      expect((e.codeName === 'ABORTED' && e.reason === 'NON_FINITE_UPDATE') || asInvalid, `got ${describeError(e)}; expected ABORTED/NON_FINITE_UPDATE`);
      await ctx.stillServing('NON_FINITE_UPDATE');
      const v1 = await ctx.client.unary('ExportVersion', { modelKey: key, version: '1' });
      expect(!v1.ok, 'a version 1 exists after the failed Update');
      // failed updates are not remembered: the same request_id with a good request runs
      const good = ok(
        await ctx.client.unary('Update', { ...u.request, modelKey: key, requestId: ctx.key('blow-up') }),
        "a good Update reusing the failed one's request_id",
      );
      expect(
        String(good.info?.version) === '1' && !good.replayed,
        `the next Update made version ${good.info?.version} (replayed ${good.replayed}), expected a new version 1`,
      );
      return asInvalid ? `rejected up front: ${e.message}` : e.message;
    },
  },
  errorCheck({
    id: 'errors.streams',
    title:
      'Streaming RPCs fail with the same reasons: LoadVersionChunks without a header → INVALID_REQUEST; ExportVersionChunks / UpdateStream of an unknown model → MODEL_NOT_LOADED; ExportVersionChunks with a destination_uri → INVALID_REQUEST',
    requires: [],
    async cases(ctx) {
      const listed = (await ctx.capabilities()).rpcs;
      if (!['LoadVersionChunks', 'ExportVersionChunks', 'UpdateStream'].some((r) => listed.includes(r))) throw new Skip('the engine lists no streaming RPC');
      const modelKey = ctx.key('never-loaded');
      // the base model and a destination only where the engine exports in chunks
      const exports = listed.includes('ExportVersionChunks');
      const base = exports ? (await ctx.base()).key : '';
      const destinationUri = exports ? pathToFileURL(path.join(ctx.tmpDir(), 'chunks-dest')).href : '';
      const samples = [{ context: [1], tokens: [2], lossMask: [1], advantages: [1], oldLogprobs: [-1], lossWeights: [1], refLogprobs: [] }];
      return [
        {
          what: 'LoadVersionChunks without a header',
          rpc: 'LoadVersionChunks',
          request: [{ header: undefined, weights: Buffer.alloc(8), optimizerState: Buffer.alloc(0) }],
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
        {
          what: 'ExportVersionChunks of an unknown model',
          rpc: 'ExportVersionChunks',
          request: { modelKey, version: '0' },
          code: NOT_FOUND,
          reason: 'MODEL_NOT_LOADED',
        },
        {
          what: 'ExportVersionChunks with a destination_uri',
          rpc: 'ExportVersionChunks',
          request: { modelKey: base, version: '0', destinationUri },
          code: INVALID_ARGUMENT,
          reason: INVALID_REQUEST,
        },
        {
          what: 'UpdateStream of an unknown model',
          rpc: 'UpdateStream',
          request: { modelKey, baseVersion: '0', requestId: ctx.key('us-nl'), samples },
          code: NOT_FOUND,
          reason: 'MODEL_NOT_LOADED',
        },
      ];
    },
  }),
];

/** maxSeq of the base model, or Skip when it is no transformer with one. */
function contextLimit(info: P.VersionInfo): number {
  const maxSeq = JSON.parse(info.spec?.configJson || '{}').maxSeq as number | undefined;
  if (info.spec?.family !== 'transformer' || !maxSeq) throw new Skip('the test model is not a transformer with maxSeq');
  return maxSeq;
}

/** errors.context-length's Generate: a one-token context and `context`, `maxTokens` each. */
function contextRequest(modelKey: string, context: number[], maxTokens: number): GenReq {
  return {
    modelKey,
    version: '0',
    sampling: { temperature: 1, maxTokens },
    sequences: [
      { context: [1], seed: '1' },
      { context, seed: '2' },
    ],
  };
}
