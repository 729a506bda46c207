/**
 * What several areas of checks share: Generate with its response checked, the
 * first Update, sample contexts, comparisons.
 */
import * as P from '../../protocol/proto';
import type { DeepPartial } from '../../protocol/proto';
import { type Context, Fail, ok, type Spec, type UpdateFixture } from '../context';
import type { Req } from '../wire-client';

export type Sampling = DeepPartial<P.SamplingParams>;
export type Seq = { context: number[]; seed: string; sampling?: Sampling | undefined };

export interface GenReq {
  modelKey: string;
  version: string;
  sequences: Seq[];
  sampling: Sampling | undefined;
  requestId?: string;
}

export const MAX_U64 = '18446744073709551615';
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const fmt = (x: number) => (x === 0 ? '0' : Math.abs(x) < 1e-3 || Math.abs(x) >= 1e4 ? x.toExponential(2) : x.toPrecision(4));

export function generate(ctx: Context, req: GenReq, timeoutMs?: number) {
  return ctx.client.unary('Generate', req, timeoutMs);
}

export async function generateOk(ctx: Context, req: GenReq, what = 'Generate'): Promise<P.GenerateResponse> {
  const res = ok(await generate(ctx, req), what);
  const problems = sequenceProblems(req, res, await ctx.vocab());
  if (problems.length) throw new Fail(`${what}: ${problems.slice(0, 3).join('; ')}${problems.length > 3 ? ` (+${problems.length - 3} more)` : ''}`);
  return res;
}

/**
 * Everything wrong with a Generate response, given its request: counts, lengths,
 * log-prob ranges, token ids, versions, stop reasons. ABORTED sequences only
 * when `allowAborted`.
 */
export function sequenceProblems(req: GenReq, res: P.GenerateResponse, V: number, allowAborted = false): string[] {
  const out: string[] = [];
  if (String(res.version) !== String(req.version)) out.push(`response version ${res.version}, requested ${req.version}`);
  if (res.sequences.length !== req.sequences.length) {
    out.push(`${res.sequences.length} sequences back for ${req.sequences.length} sent`);
    return out;
  }
  res.sequences.forEach((s, i) => {
    const at = `sequences[${i}]`;
    const sampling = req.sequences[i]!.sampling ?? req.sampling ?? {};
    const max = sampling.maxTokens ?? 0;
    const stops = new Set(sampling.stopTokens ?? []);
    const n = s.tokens.length;
    if (String(s.version) !== String(req.version)) out.push(`${at}.version ${s.version}, requested ${req.version}`);
    if (n > max) out.push(`${at}: ${n} tokens > max_tokens ${max}`);
    if (s.logprobs.length !== n) out.push(`${at}: ${s.logprobs.length} logprobs for ${n} tokens`);
    if (s.sampleLogprobs.length !== n) out.push(`${at}: ${s.sampleLogprobs.length} sample_logprobs for ${n} tokens`);
    const badTok = s.tokens.findIndex((t) => !(t >= 0 && t < V));
    if (badTok >= 0) out.push(`${at}.tokens[${badTok}] = ${s.tokens[badTok]} outside [0, ${V - 1}]`);
    const badLp = s.logprobs.findIndex((x) => !(Number.isFinite(x) && x <= 0));
    if (badLp >= 0) out.push(`${at}.logprobs[${badLp}] = ${s.logprobs[badLp]}, expected finite <= 0`);
    const badSlp = s.sampleLogprobs.findIndex((x) => !(Number.isFinite(x) && x <= 1e-6));
    if (badSlp >= 0) out.push(`${at}.sample_logprobs[${badSlp}] = ${s.sampleLogprobs[badSlp]}, expected finite <= 0`);
    const earlyStop = s.tokens.slice(0, -1).findIndex((t) => stops.has(t));
    if (earlyStop >= 0 && s.stopReason !== 'ABORTED') out.push(`${at}: stop token ${s.tokens[earlyStop]} at position ${earlyStop}, generation went on`);
    if (s.stopReason === 'ABORTED') {
      if (!allowAborted) out.push(`${at}: stop_reason ABORTED without an Abort`);
      return;
    }
    const last = s.tokens[n - 1];
    const expected = n > 0 && stops.has(last!) ? 'STOP_TOKEN' : n === max ? 'MAX_TOKENS' : undefined;
    if (expected === undefined) out.push(`${at}: ${n} of max ${max} tokens, last ${last} not a stop token, stop_reason ${s.stopReason}`);
    else if (s.stopReason !== expected)
      out.push(`${at}: stop_reason ${s.stopReason}, expected ${expected} (${n}/${max} tokens, last ${last}, stop_tokens [${[...stops]}])`);
  });
  return out;
}

/** First difference of two sequence lists, bit for bit, or undefined. */
export function firstDifference(a: P.GeneratedSequence[], b: P.GeneratedSequence[]): string | undefined {
  if (a.length !== b.length) return `${a.length} vs ${b.length} sequences`;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x.tokens.join() !== y.tokens.join()) return `sequences[${i}].tokens [${x.tokens}] vs [${y.tokens}]`;
    for (const f of ['logprobs', 'sampleLogprobs'] as const) {
      const j = x[f].findIndex((v, k) => !Object.is(v, y[f][k]));
      if (j >= 0 || x[f].length !== y[f].length) return `sequences[${i}].${f}[${j}] ${x[f][j]} vs ${y[f][j]}`;
    }
    if (x.stopReason !== y.stopReason) return `sequences[${i}].stop_reason ${x.stopReason} vs ${y.stopReason}`;
  }
  return undefined;
}

/** A few contexts for the test model (length 1..4, ids < V). */
export function contexts(V: number): number[][] {
  const id = (i: number) => i % V;
  return [[id(1), id(2), id(3)], [id(4)], [id(5), id(6)], [id(7), id(8), id(9), id(10)]];
}

/** Update samples from a Generate on (key, version): advantages ±1, old_logprobs = the generated ones, token-mean weights. */
export async function updateSamples(ctx: Context, key: string, version: string): Promise<P.UpdateSample[]> {
  const V = await ctx.vocab();
  const cs = contexts(V).slice(0, 3);
  const res = await generateOk(ctx, {
    modelKey: key,
    version,
    sequences: cs.map((c, i) => ({ context: c, seed: String(500 + i) })),
    sampling: { temperature: 1, maxTokens: 6 },
  });
  // the first sample's last token is context only (loss_mask 0): not trained, not counted
  const total = res.sequences.reduce((n, s) => n + s.tokens.length, 0) - 1;
  return res.sequences.map((s, i) => ({
    context: cs[i]!,
    tokens: s.tokens,
    lossMask: s.tokens.map((_, t) => (i === 0 && t === s.tokens.length - 1 ? 0 : 1)),
    advantages: s.tokens.map(() => (i % 2 === 0 ? 1 : -1)),
    oldLogprobs: s.logprobs,
    lossWeights: s.tokens.map(() => 1 / total),
    refLogprobs: [],
  }));
}

export function metricProblems(m: P.UpdateMetrics | null | undefined, at: string): string[] {
  if (!m) return [`${at}: missing`];
  return Object.entries(m)
    .filter(([, v]) => typeof v !== 'number' || !Number.isFinite(v))
    .map(([k, v]) => `${at}.${k} = ${v}`);
}

/** The first Update of the suite: "train" (InitModel) version 0 → 1. */
export function firstUpdate(ctx: Context): Promise<UpdateFixture> {
  return ctx.once('update', async () => {
    await ctx.requireRpcs('Update', 'Generate');
    const base = await ctx.initModel('train');
    const request = P.UpdateRequest.fromPartial({
      modelKey: base.key,
      baseVersion: '0',
      requestId: ctx.key('update-1'),
      samples: await updateSamples(ctx, base.key, '0'),
      settings: { lr: 0.01 },
    });
    const response = ok(await ctx.client.unary('Update', request), 'Update from version 0');
    return { key: base.key, base, request, response };
  });
}

export const sameInfo = (a: P.VersionInfo | undefined, b: P.VersionInfo | undefined) =>
  !!a && !!b && String(a.version) === String(b.version) && a.weightsSha256 === b.weightsSha256 && a.optimizerSha256 === b.optimizerSha256;

export function loadRequest(key: string, version: string, spec: Spec, m: Req<'LoadVersion'>): Req<'LoadVersion'> {
  return { modelKey: key, version, spec, weights: Buffer.alloc(0), optimizerState: Buffer.alloc(0), weightsSha256: '', ...m };
}
