/**
 * The checks of protocol v2, as data: id, what it checks, and a run function
 * that returns a short pass detail, throws Fail (observed vs expected) or Skip
 * (why it does not apply). They run in this order; each makes the fixtures it
 * needs through the Context, so any subset runs on its own.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as P from '../protocol/proto';
import type { DeepPartial } from '../protocol/proto';
import { BASE_SEED, type Context, TRANSFORMER_TEST_SPEC, expect, Fail, HEX64, type Model, ok, sha256Hex, Skip, type Spec, type UpdateFixture } from './context';
import { FAMILY_NAMES, normalizeModelSpec } from '../families';
import { initTransformerWeights } from '../families/transformer/init';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec } from '../families/transformer/spec';
import { adapterLayout, baseSpecOf, initAdapter, mergeLora } from '../families/transformer/lora';
import { exportHfCheckpoint, loadHfCheckpoint } from '../checkpoints/hf-layout';
import { decodeOptimizerState, decodeWeights, encodeWeights } from '../protocol/version-bytes';
import * as wire from '../protocol/wire';
import { describeError, protoRpcNames, type Req, type WireError } from './wire-client';

/** abort.generate: an Abort sent this long after the Generate it names finds it, if the engine is reading its messages at all. */
const QUEUED_ABORT_AFTER_MS = 20;
/** Sequences of each abort.generate call: enough to keep an engine busy for a while. */
const ABORT_BATCH = 512;

export interface Check {
  id: string;
  /** What it checks, one line. */
  title: string;
  /** Resolves with a short detail on pass; throws Fail or Skip. */
  run(ctx: Context): Promise<string | void>;
}

// ---------- helpers ----------

type Sampling = DeepPartial<P.SamplingParams>;
type Seq = { context: number[]; seed: string; sampling?: Sampling | undefined };

interface GenReq {
  modelKey: string;
  version: string;
  sequences: Seq[];
  sampling: Sampling | undefined;
  requestId?: string;
}

const MAX_U64 = '18446744073709551615';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fmt = (x: number) => (x === 0 ? '0' : Math.abs(x) < 1e-3 || Math.abs(x) >= 1e4 ? x.toExponential(2) : x.toPrecision(4));

function generate(ctx: Context, req: GenReq, timeoutMs?: number) {
  return ctx.client.unary('Generate', req, timeoutMs);
}

async function generateOk(ctx: Context, req: GenReq, what = 'Generate'): Promise<P.GenerateResponse> {
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
function firstDifference(a: P.GeneratedSequence[], b: P.GeneratedSequence[]): string | undefined {
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
function contexts(V: number): number[][] {
  const id = (i: number) => i % V;
  return [[id(1), id(2), id(3)], [id(4)], [id(5), id(6)], [id(7), id(8), id(9), id(10)]];
}

/** Update samples from a Generate on (key, version): advantages ±1, old_logprobs = the generated ones, token-mean weights. */
async function updateSamples(ctx: Context, key: string, version: string): Promise<P.UpdateSample[]> {
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

function metricProblems(m: P.UpdateMetrics | null | undefined, at: string): string[] {
  if (!m) return [`${at}: missing`];
  return Object.entries(m)
    .filter(([, v]) => typeof v !== 'number' || !Number.isFinite(v))
    .map(([k, v]) => `${at}.${k} = ${v}`);
}

/** The first Update of the suite: "train" (InitModel) version 0 → 1. */
function firstUpdate(ctx: Context): Promise<UpdateFixture> {
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

const sameInfo = (a: P.VersionInfo | undefined, b: P.VersionInfo | undefined) =>
  !!a && !!b && String(a.version) === String(b.version) && a.weightsSha256 === b.weightsSha256 && a.optimizerSha256 === b.optimizerSha256;

function loadRequest(key: string, version: string, spec: Spec, m: Req<'LoadVersion'>): Req<'LoadVersion'> {
  return { modelKey: key, version, spec, weights: Buffer.alloc(0), optimizerState: Buffer.alloc(0), weightsSha256: '', ...m };
}

function writeFile(ctx: Context, name: string, bytes: Uint8Array): P.BlobReference {
  const file = path.join(ctx.tmpDir(), name);
  fs.writeFileSync(file, bytes);
  return { uri: pathToFileURL(file).href, size: String(bytes.length), sha256: sha256Hex(bytes) };
}

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

// ---------- the checks ----------

export const CHECKS: Check[] = [
  // ---- Health ----
  {
    id: 'health.serving',
    title: 'Health answers with status SERVING, a device and an uptime',
    async run(ctx) {
      const h = await ctx.health();
      expect(h.status === 'SERVING', `status ${JSON.stringify(h.status)}, expected "SERVING"`);
      expect(h.device !== '', 'device empty');
      expect(Number.isFinite(h.uptimeS) && h.uptimeS >= 0, `uptime_s ${h.uptimeS}`);
      return `device ${h.device}${h.fellBack ? ` (fell back from ${h.requestedDevice}: ${h.fallbackReason})` : ''}`;
    },
  },
  {
    id: 'health.capabilities',
    title: "Health.capabilities: protocol_version 2, rpcs ⊆ the proto's RPCs, families non-empty, score_matches_generate valid",
    async run(ctx) {
      const h = await ctx.health();
      expect(h.capabilities, 'Health.capabilities missing');
      const c = h.capabilities;
      const problems: string[] = [];
      if (c.protocolVersion !== 2) problems.push(`protocol_version ${c.protocolVersion}, expected 2`);
      if (!c.engine) problems.push('engine name empty');
      const names = protoRpcNames();
      const unknown = c.rpcs.filter((r) => !(names as string[]).includes(r));
      if (c.rpcs.length === 0) problems.push('rpcs empty');
      if (unknown.length) problems.push(`rpcs not in engine.proto: ${unknown.join(', ')}`);
      if (c.families.length === 0) problems.push('families empty');
      if (!['bit-identical', 'tolerance'].includes(c.scoreMatchesGenerate))
        problems.push(`score_matches_generate ${JSON.stringify(c.scoreMatchesGenerate)}, expected "bit-identical" or "tolerance"`);
      if (c.scoreMatchesGenerate === 'tolerance' && !(Number.isFinite(c.scoreTolerance) && c.scoreTolerance >= 0))
        problems.push(`score_tolerance ${c.scoreTolerance}`);
      expect(problems.length === 0, problems.join('; '));
      return `${c.engine}; ${c.rpcs.length} rpcs; families ${c.families.join(', ')}; deterministic ${c.deterministic}; score ${c.scoreMatchesGenerate}${c.scoreMatchesGenerate === 'tolerance' ? ` ${fmt(c.scoreTolerance)}` : ''}; by reference ${c.weightsByReference}; lora ${c.lora}`;
    },
  },
  {
    id: 'health.capabilities-stable',
    title: 'capabilities are the same in two Health calls, and Stats.max_batch equals capabilities.max_batch',
    async run(ctx) {
      await ctx.requireRpcs('Stats');
      const a = ok(await ctx.client.unary('Health', {}), 'Health').capabilities;
      const b = ok(await ctx.client.unary('Health', {}), 'Health').capabilities;
      expect(JSON.stringify(a) === JSON.stringify(b), `capabilities changed between two Health calls: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
      const st = ok(await ctx.client.unary('Stats', {}), 'Stats');
      expect(st.maxBatch === a?.maxBatch, `Stats.max_batch ${st.maxBatch}, capabilities.max_batch ${a?.maxBatch}`);
      return `max_batch ${a?.maxBatch}`;
    },
  },
  {
    id: 'health.unlisted-unimplemented',
    title: 'every RPC of the proto not in capabilities.rpcs answers UNIMPLEMENTED',
    async run(ctx) {
      const caps = await ctx.capabilities();
      const unlisted = protoRpcNames().filter((r) => !caps.rpcs.includes(r) && r !== 'Health');
      if (unlisted.length === 0) throw new Skip('the engine lists every RPC');
      const def = ctx.client;
      const wrong: string[] = [];
      for (const r of unlisted) {
        const o =
          r === 'LoadVersionChunks'
            ? await def.clientStream(r, [])
            : r === 'ExportVersionChunks' || r === 'UpdateStream'
              ? await def.serverStream(r, {})
              : await def.unary(r, {});
        if (o.ok || o.error.codeName !== 'UNIMPLEMENTED') wrong.push(`${r}: ${o.ok ? 'answered' : describeError(o.error)}`);
      }
      expect(wrong.length === 0, `unlisted RPCs not UNIMPLEMENTED: ${wrong.join('; ')}`);
      return `unlisted: ${unlisted.join(', ')}`;
    },
  },
  {
    id: 'health.stats',
    title: 'Stats answers and lists the test model with its version 0',
    async run(ctx) {
      await ctx.requireRpcs('Stats');
      const base = await ctx.base();
      const s = ok(await ctx.client.unary('Stats', {}), 'Stats');
      const m = s.models.find((x) => x.modelKey === base.key);
      expect(m, `Stats.models has no entry for ${base.key} (${s.models.length} models)`);
      expect(m.versions.map(String).includes('0'), `Stats.models[${base.key}].versions [${m.versions}], expected to include 0`);
      return `${s.models.length} models; device ${s.device}`;
    },
  },

  {
    id: 'health.progress',
    title: "Health.device_runs grows across a Generate (the supervisor's hang detection reads it)",
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const before = ok(await ctx.client.unary('Health', {}), 'Health');
      await generateOk(ctx, { modelKey: base.key, version: '0', sampling: { temperature: 1, maxTokens: 3 }, sequences: [{ context: [1], seed: '9' }] });
      const after = ok(await ctx.client.unary('Health', {}), 'Health');
      expect(BigInt(after.deviceRuns) > BigInt(before.deviceRuns), `device_runs ${before.deviceRuns} → ${after.deviceRuns} across a Generate`);
      return `device_runs ${before.deviceRuns} → ${after.deviceRuns}`;
    },
  },

  // ---- InitModel ----
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
  // ---- Export / Load ----
  {
    id: 'export.unary',
    title: 'ExportVersion: sha256(weights) == weights_sha256, 4 bytes per parameter, sha256(optimizer_state) == optimizer_sha256',
    async run(ctx) {
      const { info, weights, optimizerState } = await ctx.base();
      const problems: string[] = [];
      if (sha256Hex(weights) !== info.weightsSha256)
        problems.push(`sha256(weights) ${sha256Hex(weights).slice(0, 12)}… != weights_sha256 ${info.weightsSha256.slice(0, 12)}…`);
      if (weights.length !== 4 * info.paramCount) problems.push(`${weights.length} weight bytes, expected 4 × ${info.paramCount}`);
      if (sha256Hex(optimizerState) !== info.optimizerSha256) problems.push(`sha256(optimizer_state) != optimizer_sha256`);
      expect(problems.length === 0, problems.join('; '));
      return `${weights.length} + ${optimizerState.length} bytes`;
    },
  },
  {
    id: 'export.load',
    title: 'LoadVersion of exported bytes under a new key gives the same shas',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const info = ok(
        await ctx.client.unary(
          'LoadVersion',
          loadRequest(ctx.key('loaded'), '0', await ctx.spec(), {
            weights: base.weights,
            optimizerState: base.optimizerState,
            weightsSha256: base.info.weightsSha256,
          }),
        ),
        'LoadVersion',
      );
      expect(
        sameInfo(info, base.info),
        `loaded v${info.version} sha ${info.weightsSha256.slice(0, 12)}… opt ${info.optimizerSha256.slice(0, 12)}…, exported v0 ${base.info.weightsSha256.slice(0, 12)}… opt ${base.info.optimizerSha256.slice(0, 12)}…`,
      );
      const again = ok(
        await ctx.client.unary(
          'LoadVersion',
          loadRequest(ctx.key('loaded'), '0', await ctx.spec(), { weights: base.weights, optimizerState: base.optimizerState }),
        ),
        'LoadVersion repeated (idempotent for identical bytes)',
      );
      expect(sameInfo(again, base.info), 'repeated LoadVersion gave other version info');
    },
  },
  {
    id: 'export.chunks',
    title: "ExportVersionChunks: info first, the joined bytes equal ExportVersion's",
    async run(ctx) {
      await ctx.requireRpcs('ExportVersionChunks');
      const base = await ctx.base();
      const o = await ctx.client.serverStream('ExportVersionChunks', { modelKey: base.key, version: '0' });
      const msgs = ok(o, 'ExportVersionChunks');
      expect(msgs.length > 0 && msgs[0]!.info, `first chunk has no info (${msgs.length} messages)`);
      expect(sameInfo(msgs[0]!.info, base.info), "chunk info differs from ExportVersion's");
      const w = Buffer.concat(msgs.map((m) => Buffer.from(m.weights)));
      const s = Buffer.concat(msgs.map((m) => Buffer.from(m.optimizerState)));
      expect(w.equals(base.weights), `joined weights ${w.length} bytes sha ${sha256Hex(w).slice(0, 12)}… != unary ${base.weights.length} bytes`);
      expect(s.equals(base.optimizerState), `joined optimizer_state ${s.length} bytes != unary ${base.optimizerState.length} bytes`);
      return `${msgs.length} messages`;
    },
  },
  {
    id: 'load.chunks',
    title: 'LoadVersionChunks with the bytes split into several small chunks (bytes in the header message, one message with both kinds) gives the same shas',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersionChunks');
      const base = await ctx.base();
      const header = loadRequest(ctx.key('chunk-loaded'), '0', await ctx.spec(), { weightsSha256: base.info.weightsSha256 });
      const size = Math.max(1, Math.ceil(base.weights.length / 5));
      // bytes in the header's message too, odd offsets, and one message carrying both weights and optimizer bytes
      const msgs: Req<'LoadVersionChunks'>[] = [{ header, weights: base.weights.subarray(0, 3), optimizerState: Buffer.alloc(0) }];
      for (let o = 3; o < base.weights.length; o += size)
        msgs.push({ header: undefined, weights: base.weights.subarray(o, o + size), optimizerState: Buffer.alloc(0) });
      msgs[msgs.length - 1]!.optimizerState = base.optimizerState.subarray(0, 5);
      for (let o = 5; o < base.optimizerState.length; o += size * 2)
        msgs.push({ header: undefined, weights: Buffer.alloc(0), optimizerState: base.optimizerState.subarray(o, o + size * 2) });
      const info = ok(await ctx.client.clientStream('LoadVersionChunks', msgs), 'LoadVersionChunks');
      expect(
        sameInfo(info, base.info),
        `loaded sha ${info.weightsSha256.slice(0, 12)}… opt ${info.optimizerSha256.slice(0, 12)}…, expected ${base.info.weightsSha256.slice(0, 12)}… opt ${base.info.optimizerSha256.slice(0, 12)}…`,
      );
      return `${msgs.length} chunks`;
    },
  },
  {
    id: 'export.reference',
    title:
      'ExportVersion to a destination_uri (created if missing) writes files matching the refs; LoadVersion by weights_ref/optimizer_state_ref gives the same shas',
    async run(ctx) {
      await ctx.requireReferences();
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      // a directory that does not exist yet: the proto says the engine creates it
      const dir = path.join(ctx.tmpDir(), 'export', 'new');
      const res = ok(
        await ctx.client.unary('ExportVersion', { modelKey: base.key, version: '0', destinationUri: pathToFileURL(dir).href }),
        'ExportVersion by reference',
      );
      const problems: string[] = [];
      if (res.weights.length || res.optimizerState.length) problems.push(`response also carries ${res.weights.length} + ${res.optimizerState.length} bytes`);
      if (!sameInfo(res.info, base.info)) problems.push("info differs from ExportVersion's");
      const refs = { weightsRef: res.weightsRef, optimizerStateRef: res.optimizerStateRef };
      const expected = { weightsRef: base.weights, optimizerStateRef: base.optimizerState };
      for (const [name, ref] of Object.entries(refs)) {
        if (!ref) {
          problems.push(`${name} missing`);
          continue;
        }
        let file: string;
        try {
          file = new URL(ref.uri).pathname;
          if (!ref.uri.startsWith('file:///')) throw new Error('not file:///');
        } catch {
          problems.push(`${name}.uri ${JSON.stringify(ref.uri)} is not file:///…`);
          continue;
        }
        if (!path.resolve(decodeURIComponent(file)).startsWith(dir)) problems.push(`${name} ${ref.uri} is not under the destination ${dir}`);
        if (!fs.existsSync(decodeURIComponent(file))) {
          problems.push(`${name}: no file at ${decodeURIComponent(file)}`);
          continue;
        }
        const bytes = fs.readFileSync(decodeURIComponent(file));
        const want = expected[name as keyof typeof expected];
        if (String(ref.size) !== String(bytes.length)) problems.push(`${name}.size ${ref.size}, the file has ${bytes.length} bytes`);
        if (ref.sha256 !== sha256Hex(bytes)) problems.push(`${name}.sha256 ${ref.sha256.slice(0, 12)}… != the file's ${sha256Hex(bytes).slice(0, 12)}…`);
        if (!bytes.equals(want)) problems.push(`${name}: the file's bytes differ from ExportVersion's`);
      }
      expect(problems.length === 0, problems.join('; '));
      const info = ok(
        await ctx.client.unary(
          'LoadVersion',
          loadRequest(ctx.key('ref-loaded'), '0', await ctx.spec(), { weightsRef: res.weightsRef!, optimizerStateRef: res.optimizerStateRef! }),
        ),
        'LoadVersion by reference',
      );
      expect(sameInfo(info, base.info), `loaded by reference: sha ${info.weightsSha256.slice(0, 12)}…, expected ${base.info.weightsSha256.slice(0, 12)}…`);
      await ctx.expectError(
        'ExportVersion to an http:// destination',
        () => ctx.client.unary('ExportVersion', { modelKey: base.key, version: '0', destinationUri: 'http://127.0.0.1:1/troupe' }),
        'FAILED_PRECONDITION',
        'REFERENCE_UNREADABLE',
      );
      await ctx.expectError(
        'ExportVersion to a destination under a regular file',
        () => ctx.client.unary('ExportVersion', { modelKey: base.key, version: '0', destinationUri: pathToFileURL(path.join(writeFileRef(ctx), 'sub')).href }),
        'FAILED_PRECONDITION',
        'REFERENCE_UNREADABLE',
      );
    },
  },
  {
    id: 'load.reference-errors',
    title: 'LoadVersion by a weights_ref with a wrong sha256, a wrong size or a missing file → REFERENCE_UNREADABLE',
    async run(ctx) {
      await ctx.requireReferences();
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const spec = await ctx.spec();
      const ref = writeFile(ctx, 'weights.bin', base.weights);
      const cases: [string, P.BlobReference][] = [
        ['wrong sha256', { ...ref, sha256: sha256Hex(Buffer.from('not these weights')) }],
        ['wrong size', { ...ref, size: String(base.weights.length + 4) }],
        ['missing file', { ...ref, uri: pathToFileURL(path.join(ctx.tmpDir(), 'no-such-file.bin')).href }],
      ];
      for (const [what, r] of cases) {
        await ctx.expectError(
          `LoadVersion by a weights_ref with a ${what}`,
          () => ctx.client.unary('LoadVersion', loadRequest(ctx.key('bad-ref'), '0', spec, { weightsRef: r })),
          'FAILED_PRECONDITION',
          'REFERENCE_UNREADABLE',
        );
      }
    },
  },
  {
    id: 'load.sha-mismatch',
    title: 'LoadVersion whose weights_sha256 does not match the bytes → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const spec = await ctx.spec();
      await ctx.expectError(
        'LoadVersion with a wrong weights_sha256',
        () =>
          ctx.client.unary(
            'LoadVersion',
            loadRequest(ctx.key('bad-sha'), '0', spec, { weights: base.weights, weightsSha256: sha256Hex(Buffer.from('other')) }),
          ),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
    },
  },
  {
    id: 'load.wrong-length',
    title: 'LoadVersion with weights one parameter short, or an optimizer_state without the "TRAD" header → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const spec = await ctx.spec();
      await ctx.expectError(
        'LoadVersion with 4 weight bytes too few',
        () => ctx.client.unary('LoadVersion', loadRequest(ctx.key('short'), '0', spec, { weights: base.weights.subarray(0, base.weights.length - 4) })),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      await ctx.expectError(
        'LoadVersion with an optimizer_state that is not "TRAD"',
        () =>
          ctx.client.unary(
            'LoadVersion',
            loadRequest(ctx.key('bad-optimizer'), '0', spec, { weights: base.weights, optimizerState: Buffer.from('not an optimizer state') }),
          ),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
    },
  },
  {
    id: 'load.version-conflict',
    title: 'LoadVersion of an existing version number with other weights → VERSION_CONFLICT, the version unchanged',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const base = await ctx.base();
      const other = Buffer.from(base.weights);
      other.writeFloatLE(other.readFloatLE(0) + 0.5, 0);
      await ctx.expectError(
        'LoadVersion of the base v0 with other weights',
        () => ctx.client.unary('LoadVersion', loadRequest(base.key, '0', base.info.spec!, { weights: other })),
        'FAILED_PRECONDITION',
        'VERSION_CONFLICT',
      );
    },
  },

  // ---- Generate ----
  {
    id: 'generate.shape',
    title: 'Generate: per sequence ≤ max_tokens tokens < vocab, logprobs/sample_logprobs as many and ≤ 0, version == requested, stop_reason right',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const [c0, c1, c2, c3] = contexts(await ctx.vocab());
      const req: GenReq = {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 8 },
        sequences: [
          { context: c0!, seed: '11' },
          { context: c1!, seed: '12', sampling: { temperature: 0.7, topK: 5, maxTokens: 6, stopTokens: [3, 7] } },
          { context: c2!, seed: MAX_U64, sampling: { temperature: 1.3, topP: 0.9, maxTokens: 10, stopTokens: [0] } },
          { context: c3!, seed: '0', sampling: { temperature: 1, maxTokens: 12, stopTokens: [1, 2, 4, 5, 6, 8] } },
        ],
      };
      const res = await generateOk(ctx, req);
      return res.sequences.map((s) => `${s.tokens.length} ${s.stopReason}`).join(', ');
    },
  },
  {
    id: 'generate.max-tokens',
    title: 'Generate without stop tokens runs to max_tokens: MAX_TOKENS',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const res = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 7 },
        sequences: cs.map((c, i) => ({ context: c, seed: String(20 + i) })),
      });
      const wrong = res.sequences.findIndex((s) => s.tokens.length !== 7 || s.stopReason !== 'MAX_TOKENS');
      expect(wrong < 0, `sequences[${wrong}]: ${res.sequences[wrong]?.tokens.length} tokens ${res.sequences[wrong]?.stopReason}, expected 7 MAX_TOKENS`);
    },
  },
  {
    id: 'generate.stop-token',
    title: 'Generate with every id a stop token stops after one token: STOP_TOKEN',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const V = await ctx.vocab();
      const all = Array.from({ length: V }, (_, i) => i);
      const res = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 5, stopTokens: all },
        sequences: contexts(V).map((c, i) => ({ context: c, seed: String(30 + i) })),
      });
      const wrong = res.sequences.findIndex((s) => s.tokens.length !== 1 || s.stopReason !== 'STOP_TOKEN');
      expect(wrong < 0, `sequences[${wrong}]: ${res.sequences[wrong]?.tokens.length} tokens ${res.sequences[wrong]?.stopReason}, expected 1 STOP_TOKEN`);
    },
  },
  {
    id: 'generate.greedy',
    title: 'Generate at temperature 0: sample_logprobs all 0, and the same tokens for any seed',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const req = (seed: number): GenReq => ({
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 0, maxTokens: 8 },
        sequences: cs.map((c, i) => ({ context: c, seed: String(seed + i) })),
      });
      const a = await generateOk(ctx, req(40));
      const nonzero = a.sequences.findIndex((s) => s.sampleLogprobs.some((x) => x !== 0));
      expect(nonzero < 0, `sequences[${nonzero}].sample_logprobs [${a.sequences[nonzero]?.sampleLogprobs.map(fmt)}], expected all 0`);
      const b = await generateOk(ctx, req(90));
      const i = a.sequences.findIndex((s, k) => s.tokens.join() !== b.sequences[k]!.tokens.join());
      expect(i < 0, `greedy sequences[${i}] differs between seeds: [${a.sequences[i]?.tokens}] vs [${b.sequences[i]?.tokens}]`);
    },
  },
  {
    id: 'generate.deterministic',
    title: 'Generate: the same (context, seed, sampling) gives the same tokens and log-prob bits: twice, inside a mixed batch, and in concurrent calls',
    async run(ctx) {
      await ctx.requireDeterministic();
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const [c0, c1, c2, c3] = contexts(await ctx.vocab());
      const seq: Seq = { context: c0!, seed: '77', sampling: { temperature: 1, maxTokens: 10 } };
      const seq2: Seq = { context: c3!, seed: '78', sampling: { temperature: 0.8, topK: 6, topP: 0.95, maxTokens: 7 } };
      const one = (sequences: Seq[]): GenReq => ({ modelKey: base.key, version: '0', sampling: undefined, sequences });
      const a = await generateOk(ctx, one([seq, seq2]));
      const b = await generateOk(ctx, one([seq, seq2]));
      let d = firstDifference(a.sequences, b.sequences);
      expect(!d, `two identical calls differ: ${d}`);
      const mixed = await generateOk(
        ctx,
        one([
          { context: c1!, seed: '5', sampling: { temperature: 1, maxTokens: 3 } },
          seq,
          { context: c2!, seed: '6', sampling: { temperature: 0, maxTokens: 12 } },
          { context: c0!, seed: '78', sampling: { temperature: 1, maxTokens: 10 } },
          seq2,
        ]),
      );
      d = firstDifference(a.sequences, [mixed.sequences[1]!, mixed.sequences[4]!]);
      expect(!d, `inside a mixed batch: ${d}`);
      const concurrent = await Promise.all([
        generateOk(ctx, one([{ context: c2!, seed: '9', sampling: { temperature: 1, maxTokens: 11 } }])),
        generateOk(ctx, one([seq])),
        generateOk(ctx, one([{ context: c1!, seed: '8', sampling: { temperature: 1.5, maxTokens: 2 } }, seq2])),
      ]);
      d = firstDifference(a.sequences, [concurrent[1].sequences[0]!, concurrent[2].sequences[1]!]);
      expect(!d, `in concurrent calls: ${d}`);
    },
  },

  {
    id: 'generate.sampling',
    title:
      'Sampling semantics: top_k 1 and a tiny top_p draw the greedy tokens (sample_logprobs 0); at temperature 1 without top-k/top-p sample_logprobs = logprobs; top_k ≥ V = off',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const caps = await ctx.capabilities();
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const run = (sampling: Sampling) =>
        generateOk(
          ctx,
          { modelKey: base.key, version: '0', sampling: { maxTokens: 6, ...sampling }, sequences: cs.map((c, i) => ({ context: c, seed: String(300 + i) })) },
          `Generate ${JSON.stringify(sampling)}`,
        );
      const greedy = await run({ temperature: 0 });
      for (const sampling of [
        { temperature: 1, topK: 1 },
        { temperature: 1, topP: 0.001 },
      ]) {
        const r = await run(sampling);
        const i = r.sequences.findIndex((s, k) => s.tokens.join() !== greedy.sequences[k]!.tokens.join() || s.sampleLogprobs.some((x) => x !== 0));
        expect(
          i < 0,
          `${JSON.stringify(sampling)}: sequences[${i}] tokens [${r.sequences[i]?.tokens}] sample_logprobs [${r.sequences[i]?.sampleLogprobs.map(fmt)}], expected the greedy [${greedy.sequences[i]?.tokens}] with 0s`,
        );
      }
      const plain = await run({ temperature: 1 });
      const tol = caps.scoreMatchesGenerate === 'tolerance' ? caps.scoreTolerance : 0;
      let max = 0;
      for (const s of plain.sequences) s.logprobs.forEach((x, k) => (max = Math.max(max, Math.abs(x - s.sampleLogprobs[k]!))));
      expect(max <= Math.max(tol, 1e-6), `temperature 1, no top-k/top-p: max |sample_logprobs − logprobs| ${fmt(max)}`);
      if (caps.deterministic) {
        const allK = await run({ temperature: 1, topK: V + 5 });
        const d = firstDifference(plain.sequences, allK.sequences);
        expect(!d, `top_k ${V + 5} (≥ V) differs from no top_k: ${d}`);
      }
    },
  },
  {
    id: 'generate.sample-logprobs',
    title:
      'With temperature, top_k and top_p, each drawn token is in the kept set and sample_logprobs is its log-prob renormalized over that set (full distribution from Score)',
    async run(ctx) {
      await ctx.requireRpcs('Generate', 'Score');
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const samplings: Sampling[] = [
        { temperature: 0.7, topK: 5, maxTokens: 4 },
        { temperature: 1.3, topP: 0.7, maxTokens: 4 },
        { temperature: 0.9, topK: 8, topP: 0.9, maxTokens: 4 },
      ];
      const gen = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: undefined,
        sequences: samplings.map((sp, i) => ({ context: cs[i]!, seed: String(340 + i), sampling: sp })),
      });
      // every candidate token at every position: log p(v | prefix)
      const rows: { seq: number; t: number }[] = [];
      const scoreSeqs: { context: number[]; tokens: number[] }[] = [];
      gen.sequences.forEach((g, i) =>
        g.tokens.forEach((_, t) => {
          rows.push({ seq: i, t });
          for (let v = 0; v < V; v++) scoreSeqs.push({ context: [...cs[i]!, ...g.tokens.slice(0, t)], tokens: [v] });
        }),
      );
      const sc = ok(await ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences: scoreSeqs }), `Score of ${scoreSeqs.length} candidates`);
      const problems: string[] = [];
      let maxErr = 0;
      rows.forEach(({ seq, t }, r) => {
        const sp = samplings[seq]!;
        const T = sp.temperature!;
        const logp = Array.from({ length: V }, (_, v) => sc.sequences[r * V + v]!.logprobs[0]!);
        const scaled = logp.map((x) => x / T);
        const m = Math.max(...scaled);
        const q = scaled.map((x) => Math.exp(x - m));
        const order = Array.from({ length: V }, (_, v) => v).sort((a, b) => q[b]! - q[a]! || a - b);
        const k = sp.topK && sp.topK < V ? sp.topK : V;
        const kept = order.slice(0, k);
        const massK = kept.reduce((a, v) => a + q[v]!, 0);
        const p = sp.topP && sp.topP < 1 ? sp.topP : 2;
        let cum = 0;
        const nucleus: number[] = [];
        const boundary = new Set<number>(); // ranks within float noise of the top-p cut
        for (const v of kept) {
          if (cum < p * massK) nucleus.push(v);
          if (Math.abs(cum - p * massK) < 1e-5 * massK) boundary.add(v);
          cum += q[v]!;
        }
        const tok = gen.sequences[seq]!.tokens[t]!;
        const at = `sequences[${seq}] token ${t}`;
        if (!nucleus.includes(tok) && !boundary.has(tok)) {
          problems.push(`${at}: ${tok} (rank ${order.indexOf(tok)}) outside the kept set [${nucleus}] of ${JSON.stringify(sp)}`);
          return;
        }
        const set = nucleus.includes(tok) ? nucleus : [...nucleus, tok];
        const expected = Math.log(q[tok]! / set.reduce((a, v) => a + q[v]!, 0));
        const err = Math.abs(expected - gen.sequences[seq]!.sampleLogprobs[t]!);
        maxErr = Math.max(maxErr, err);
        if (!(err <= 1e-4))
          problems.push(
            `${at}: sample_logprob ${fmt(gen.sequences[seq]!.sampleLogprobs[t]!)}, expected ${fmt(expected)} (renormalized over ${set.length} kept tokens)`,
          );
      });
      expect(problems.length === 0, problems.slice(0, 3).join('; '));
      return `${rows.length} tokens, max |Δ| ${fmt(maxErr)}`;
    },
  },
  {
    id: 'generate.top-p-range',
    title: 'top_p 0 and 1 are off (same bits as without top_p); outside [0, 1] (1.5, −0.1) → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const req = (sampling: Sampling): GenReq => ({
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 6, ...sampling },
        sequences: cs.map((c, i) => ({ context: c, seed: String(320 + i) })),
      });
      const plain = await generateOk(ctx, req({}));
      for (const topP of [1, 0]) {
        const off = await generateOk(ctx, req({ topP }), `Generate with top_p ${topP}`);
        if ((await ctx.capabilities()).deterministic) {
          const d = firstDifference(plain.sequences, off.sequences);
          expect(!d, `top_p ${topP} differs from no top_p: ${d}`);
        }
      }
      for (const topP of [1.5, -0.1]) {
        const e = await ctx.expectError(
          `Generate with top_p ${topP}`,
          () => ctx.client.unary('Generate', req({ topP })),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
        expect(/top_p/.test(e.message), `message ${JSON.stringify(e.message)} does not name top_p`);
      }
    },
  },
  {
    id: 'generate.over-max-batch',
    title: 'A Generate of max_batch + 1 sequences is served whole (split into device runs), the last one as when sent alone (deterministic engines)',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const caps = await ctx.capabilities();
      if (!(caps.maxBatch >= 1)) throw new Skip('capabilities.max_batch is 0 (no fixed limit)');
      if (caps.maxBatch > 2048) throw new Skip(`max_batch ${caps.maxBatch}: too many sequences for a quick check`);
      const base = await ctx.base();
      const V = await ctx.vocab();
      const n = caps.maxBatch + 1;
      const seqs: Seq[] = Array.from({ length: n }, (_, i) => ({ context: [1 + (i % (V - 1))], seed: String(5000 + i) }));
      const res = await generateOk(
        ctx,
        { modelKey: base.key, version: '0', sampling: { temperature: 1, maxTokens: 2 }, sequences: seqs },
        `Generate of ${n} sequences`,
      );
      if (caps.deterministic) {
        const alone = await generateOk(ctx, { modelKey: base.key, version: '0', sampling: { temperature: 1, maxTokens: 2 }, sequences: [seqs[n - 1]!] });
        const d = firstDifference([res.sequences[n - 1]!], alone.sequences);
        expect(!d, `sequence ${n - 1} of ${n} vs alone: ${d}`);
      }
      return `${n} sequences`;
    },
  },

  // ---- Score ----
  {
    id: 'score.shape',
    title: 'Score: one log-prob (finite, ≤ 0) and one entropy (finite, ≥ 0, ≤ ln V) per token, version == requested',
    async run(ctx) {
      await ctx.requireRpcs('Score');
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const seqs = cs.map((c, i) => ({ context: c, tokens: Array.from({ length: 3 + i }, (_, k) => (k * 5 + i) % V) }));
      const res = ok(await ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences: seqs }), 'Score');
      const problems: string[] = [];
      if (String(res.version) !== '0') problems.push(`version ${res.version}, expected 0`);
      if (res.sequences.length !== seqs.length) problems.push(`${res.sequences.length} sequences for ${seqs.length}`);
      res.sequences.forEach((s, i) => {
        const n = seqs[i]!.tokens.length;
        if (s.logprobs.length !== n) problems.push(`sequences[${i}]: ${s.logprobs.length} logprobs for ${n} tokens`);
        if (s.entropy.length !== n) problems.push(`sequences[${i}]: ${s.entropy.length} entropies for ${n} tokens`);
        const lp = s.logprobs.findIndex((x) => !(Number.isFinite(x) && x <= 0));
        if (lp >= 0) problems.push(`sequences[${i}].logprobs[${lp}] = ${s.logprobs[lp]}`);
        const h = s.entropy.findIndex((x) => !(Number.isFinite(x) && x >= 0 && x <= Math.log(V) + 1e-4));
        if (h >= 0) problems.push(`sequences[${i}].entropy[${h}] = ${s.entropy[h]}, expected in [0, ln ${V}]`);
      });
      expect(problems.length === 0, problems.slice(0, 4).join('; '));
    },
  },
  {
    id: 'score.matches-generate',
    title: 'Score of generated tokens equals Generate\'s logprobs: bit for bit when "bit-identical", else within score_tolerance',
    async run(ctx) {
      await ctx.requireRpcs('Score', 'Generate');
      const caps = await ctx.capabilities();
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const samplings: Sampling[] = [
        { temperature: 1, maxTokens: 12 },
        { temperature: 0.7, topK: 4, maxTokens: 10 },
        { temperature: 1.2, topP: 0.8, maxTokens: 9 },
        { temperature: 0, maxTokens: 8 },
      ];
      const gen = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: undefined,
        sequences: cs.map((c, i) => ({ context: c, seed: String(60 + i), sampling: samplings[i] })),
      });
      const sc = ok(
        await ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences: cs.map((c, i) => ({ context: c, tokens: gen.sequences[i]!.tokens })) }),
        'Score',
      );
      let max = 0;
      let differ = 0;
      let n = 0;
      gen.sequences.forEach((g, i) => {
        const s = sc.sequences[i]!;
        if (s.logprobs.length !== g.logprobs.length)
          throw new Fail(`sequences[${i}]: Score gave ${s.logprobs.length} logprobs for ${g.logprobs.length} tokens`);
        g.logprobs.forEach((x, k) => {
          n++;
          const d = Math.abs(x - s.logprobs[k]!);
          if (!Object.is(x, s.logprobs[k])) differ++;
          if (!(d <= max)) max = Number.isNaN(d) ? NaN : d;
        });
      });
      if (caps.scoreMatchesGenerate === 'bit-identical') {
        expect(differ === 0, `${differ} of ${n} log-probs differ (max |Δ| ${fmt(max)}), capabilities say bit-identical`);
        return `bit-identical over ${n} tokens`;
      }
      expect(max <= caps.scoreTolerance, `max |Δ| ${fmt(max)} > score_tolerance ${fmt(caps.scoreTolerance)} over ${n} tokens`);
      return `max |Δ| ${fmt(max)} (tolerance ${fmt(caps.scoreTolerance)}; ${differ}/${n} not bit-equal)`;
    },
  },

  {
    id: 'batch.alone',
    title:
      'a batch equals the same sequences alone: Score, and greedy Generate (tokens and log-probs); bit for bit when deterministic, else within score_tolerance',
    async run(ctx) {
      await ctx.requireRpcs('Score', 'Generate');
      const caps = await ctx.capabilities();
      const tol = caps.deterministic ? 0 : caps.scoreMatchesGenerate === 'tolerance' ? caps.scoreTolerance : 0;
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const seqs = cs.map((c, i) => ({ context: c, tokens: contexts(V)[(i + 1) % cs.length]!.concat([i % V]) }));
      const score = (sequences: typeof seqs) => ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences });
      const batch = ok(await score(seqs), 'Score (batch)');
      let max = 0;
      for (const [i, s] of seqs.entries()) {
        const alone = ok(await score([s]), `Score (sequence ${i} alone)`).sequences[0]!;
        alone.logprobs.forEach((x, k) => {
          const d = Math.abs(x - batch.sequences[i]!.logprobs[k]!);
          if (!(d <= max)) max = Number.isNaN(d) ? NaN : d;
        });
      }
      expect(max <= tol, `Score: max |Δ| ${fmt(max)} between a batch and its sequences alone, tolerance ${fmt(tol)}`);
      const greedy = (sequences: Seq[]): GenReq => ({ modelKey: base.key, version: '0', sampling: { temperature: 0, maxTokens: 8 }, sequences });
      const gb = await generateOk(ctx, greedy(cs.map((c, i) => ({ context: c, seed: String(i) }))));
      let gmax = 0;
      for (const [i, c] of cs.entries()) {
        const alone = (await generateOk(ctx, greedy([{ context: c, seed: String(i) }]))).sequences[0]!;
        const inBatch = gb.sequences[i]!;
        if (caps.deterministic)
          expect(alone.tokens.join() === inBatch.tokens.join(), `Generate sequence ${i}: tokens [${inBatch.tokens}] in the batch, [${alone.tokens}] alone`);
        if (alone.tokens.join() !== inBatch.tokens.join()) continue;
        alone.logprobs.forEach((x, k) => {
          const d = Math.abs(x - inBatch.logprobs[k]!);
          if (!(d <= gmax)) gmax = Number.isNaN(d) ? NaN : d;
        });
      }
      expect(gmax <= tol, `Generate: max |Δ log-prob| ${fmt(gmax)} between a batch and its sequences alone, tolerance ${fmt(tol)}`);
      return `Score max |Δ| ${fmt(max)}, greedy Generate max |Δ| ${fmt(gmax)} (tolerance ${fmt(tol)}) over ${cs.length} sequences`;
    },
  },

  // ---- Update ----
  {
    id: 'update.basic',
    title:
      'Update from version 0: version 1, base_version 0, tokens (loss_mask 1 only) and samples counted, metrics finite, optimizer_step + 1, new sha ≠ base sha, exportable, Generate on it says version 1',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const r = u.response;
      const trained = u.request.samples.reduce((n, s) => n + s.lossMask.filter((m) => m === 1).length, 0);
      const problems: string[] = [];
      if (!r.info) problems.push('info missing');
      else {
        if (String(r.info.version) !== '1') problems.push(`info.version ${r.info.version}, expected 1`);
        if (r.info.weightsSha256 === u.base.info.weightsSha256) problems.push("new weights_sha256 equals the base's");
        if (!HEX64.test(r.info.weightsSha256)) problems.push(`weights_sha256 ${JSON.stringify(r.info.weightsSha256)}`);
        if (r.info.optimizerStep !== u.base.info.optimizerStep + 1)
          problems.push(`optimizer_step ${r.info.optimizerStep}, expected ${u.base.info.optimizerStep + 1}`);
        if (r.info.modelKey !== u.key) problems.push(`model_key ${r.info.modelKey}`);
      }
      if (String(r.baseVersion) !== '0') problems.push(`base_version ${r.baseVersion}, expected 0`);
      if (r.tokens !== trained) problems.push(`tokens ${r.tokens}, expected ${trained} (loss_mask 1 only)`);
      if (r.samples !== u.request.samples.length) problems.push(`samples ${r.samples}, expected ${u.request.samples.length}`);
      if (r.replayed) problems.push('replayed true on the first run');
      problems.push(...metricProblems(r.metrics, 'metrics'));
      if (r.stepMetrics.length !== 1) problems.push(`${r.stepMetrics.length} step_metrics, expected 1 (inner_steps 1)`);
      r.stepMetrics.forEach((m, i) => problems.push(...metricProblems(m, `step_metrics[${i}]`)));
      if (!(r.logprobGapMax >= 0 && Number.isFinite(r.logprobGapMax))) problems.push(`logprob_gap_max ${r.logprobGapMax}`);
      expect(problems.length === 0, problems.slice(0, 5).join('; '));
      const sha = await ctx.exportedSha(u.key, '1');
      expect(sha === r.info!.weightsSha256, `ExportVersion v1: sha ${sha.slice(0, 12)}…, Update said ${r.info!.weightsSha256.slice(0, 12)}…`);
      // the new version serves, and says so per sequence
      await generateOk(
        ctx,
        {
          modelKey: u.key,
          version: '1',
          sampling: { temperature: 1, maxTokens: 4 },
          sequences: [
            { context: [1], seed: '1' },
            { context: [2, 3], seed: '2' },
          ],
        },
        'Generate on version 1',
      );
      return `loss ${fmt(r.metrics!.loss)}, grad_norm ${fmt(r.metrics!.gradNorm)}, ${r.tokens} tokens, logprob gap max ${fmt(r.logprobGapMax)}`;
    },
  },
  {
    id: 'update.metrics',
    title:
      "Update metrics at the base weights (old_logprobs = the policy's, K = 1): ratio 1 so pg_loss = loss = −Σ w·A, clip fractions 0, approx_kl ≈ 0, kl_loss 0 without ref_logprobs; entropy / entropy_sum match Score's entropies",
    async run(ctx) {
      await ctx.requireRpcs('Score');
      const u = await firstUpdate(ctx);
      const m = u.response.metrics;
      expect(m, 'metrics missing');
      const sc = ok(
        await ctx.client.unary('Score', { modelKey: u.key, version: '0', sequences: u.request.samples.map((x) => ({ context: x.context, tokens: x.tokens })) }),
        'Score of the samples on the base version',
      );
      let pg = 0;
      let hSum = 0;
      let hMean = 0;
      let n = 0;
      u.request.samples.forEach((x, i) =>
        x.tokens.forEach((_, t) => {
          if (x.lossMask[t] !== 1) return;
          const w = x.lossWeights[t]!;
          const h = sc.sequences[i]!.entropy[t]!;
          pg -= w * x.advantages[t]!;
          hSum += w * h;
          if (w !== 0) {
            hMean += h;
            n++;
          }
        }),
      );
      hMean /= n;
      const problems: string[] = [];
      const near = (name: string, got: number, want: number, tol = 1e-4) => {
        if (!(Math.abs(got - want) <= tol)) problems.push(`${name} ${fmt(got)}, expected ${fmt(want)}`);
      };
      near('pg_loss', m.pgLoss, pg);
      near('loss', m.loss, pg);
      near('kl_loss', m.klLoss, 0, 0);
      near('clip_fraction', m.clipFraction, 0, 0);
      near('dual_clip_fraction', m.dualClipFraction, 0, 0);
      near('approx_kl', m.approxKl, 0, 1e-5);
      near('entropy', m.entropy, hMean);
      near('entropy_sum', m.entropySum, hSum);
      if (!(m.gradNorm > 0)) problems.push(`grad_norm ${m.gradNorm}, expected > 0`);
      expect(problems.length === 0, problems.join('; '));
      return `pg_loss ${fmt(m.pgLoss)}, entropy ${fmt(m.entropy)}`;
    },
  },
  {
    id: 'update.replay',
    title: 'Update repeated with the same request_id: replayed true, the same version info',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const r = ok(await ctx.client.unary('Update', u.request), 'repeated Update');
      expect(r.replayed === true, 'replayed false on a repeat');
      expect(
        sameInfo(r.info, u.response.info) && String(r.baseVersion) === String(u.response.baseVersion),
        `replay gave v${r.info?.version} sha ${r.info?.weightsSha256.slice(0, 12)}…, first v${u.response.info?.version} sha ${u.response.info?.weightsSha256.slice(0, 12)}…`,
      );
    },
  },
  {
    id: 'update.request-id-reused',
    title: 'Update with a used request_id and a different request → REQUEST_ID_REUSED (FAILED_PRECONDITION)',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const other = { ...u.request, samples: u.request.samples.map((s) => ({ ...s, advantages: s.advantages.map((a) => -a) })) };
      await ctx.expectError('Update reusing a request_id', () => ctx.client.unary('Update', other), 'FAILED_PRECONDITION', 'REQUEST_ID_REUSED');
      const sha = await ctx.exportedSha(u.key, '1');
      expect(sha === u.response.info!.weightsSha256, 'version 1 changed after REQUEST_ID_REUSED');
    },
  },
  {
    id: 'update.stale-base',
    title: 'Update from a base that is not the latest (allow_stale_base false) → STALE_BASE, nothing committed',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      await ctx.expectError(
        'Update from a stale base',
        () => ctx.client.unary('Update', { ...u.request, requestId: ctx.key('update-stale') }),
        'FAILED_PRECONDITION',
        'STALE_BASE',
      );
      const v2 = await ctx.client.unary('ExportVersion', { modelKey: u.key, version: '2' });
      expect(!v2.ok, 'version 2 exists after a STALE_BASE');
    },
  },
  {
    id: 'update.allow-stale',
    title: 'Update from a stale base with allow_stale_base true → a new latest version (2), base_version 0',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const r = ok(
        await ctx.client.unary('Update', { ...u.request, requestId: ctx.key('update-allow-stale'), allowStaleBase: true }),
        'Update with allow_stale_base',
      );
      expect(String(r.info?.version) === '2' && String(r.baseVersion) === '0', `version ${r.info?.version} base_version ${r.baseVersion}, expected 2 from 0`);
    },
  },
  {
    id: 'update.deterministic',
    title: 'The same Update (new request_id) on another key loaded with the same base bytes gives the same new weights sha',
    async run(ctx) {
      await ctx.requireDeterministic();
      await ctx.requireRpcs('LoadVersion');
      const u = await firstUpdate(ctx);
      const key = ctx.key('train-twin');
      ok(
        await ctx.client.unary('LoadVersion', loadRequest(key, '0', u.base.info.spec!, { weights: u.base.weights, optimizerState: u.base.optimizerState })),
        'LoadVersion of the base bytes',
      );
      const r = ok(await ctx.client.unary('Update', { ...u.request, modelKey: key, requestId: ctx.key('update-twin') }), 'Update on the twin');
      expect(
        r.info?.weightsSha256 === u.response.info?.weightsSha256,
        `twin's new sha ${r.info?.weightsSha256.slice(0, 12)}…, first ${u.response.info?.weightsSha256.slice(0, 12)}…`,
      );
      expect(r.info?.optimizerSha256 === u.response.info?.optimizerSha256, 'same weights but another optimizer_sha256');
    },
  },
  {
    id: 'update.resume',
    title:
      'A trained version (weights + optimizer state) exported and loaded under a new key keeps its info (optimizer_step 1); an Update from it makes version 2 with optimizer_step 2',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const u = await firstUpdate(ctx);
      const v1 = ok(await ctx.client.unary('ExportVersion', { modelKey: u.key, version: '1' }), 'ExportVersion v1');
      const key = ctx.key('resume');
      const info = ok(
        await ctx.client.unary('LoadVersion', loadRequest(key, '1', u.base.info.spec!, { weights: v1.weights, optimizerState: v1.optimizerState })),
        'LoadVersion of v1 as version 1 under a new key',
      );
      expect(
        sameInfo(info, u.response.info) && info.optimizerStep === u.response.info!.optimizerStep,
        `loaded v${info.version} step ${info.optimizerStep} sha ${info.weightsSha256.slice(0, 12)}…, trained v${u.response.info?.version} step ${u.response.info?.optimizerStep} sha ${u.response.info?.weightsSha256.slice(0, 12)}…`,
      );
      const r = ok(
        await ctx.client.unary('Update', { ...u.request, modelKey: key, baseVersion: '1', requestId: ctx.key('resume-1') }),
        'Update from the loaded version 1',
      );
      expect(String(r.info?.version) === '2' && String(r.baseVersion) === '1', `version ${r.info?.version} from ${r.baseVersion}, expected 2 from 1`);
      expect(
        r.info?.optimizerStep === u.response.info!.optimizerStep + 1,
        `optimizer_step ${r.info?.optimizerStep}, expected ${u.response.info!.optimizerStep + 1}`,
      );
    },
  },
  {
    id: 'update.stream',
    title: 'UpdateStream: ≥ 1 progress then exactly one result; replays by request_id across Update and UpdateStream; errors as the stream status',
    async run(ctx) {
      await ctx.requireRpcs('UpdateStream', 'Update', 'Generate');
      const base = await ctx.initModel('stream');
      const request: Req<'Update'> = {
        modelKey: base.key,
        baseVersion: '0',
        requestId: ctx.key('stream-1'),
        allowStaleBase: false,
        samples: await updateSamples(ctx, base.key, '0'),
        settings: { lr: 0.01, innerSteps: 2 },
      };
      const stream = async (req: Req<'Update'>, what: string) => {
        const o = await ctx.client.serverStream('UpdateStream', req);
        const events = ok(o, what);
        const kinds = events.map((e) => (e.result ? 'result' : e.progress ? 'progress' : 'empty'));
        const results = kinds.filter((k) => k === 'result').length;
        expect(results === 1 && kinds[kinds.length - 1] === 'result', `${what}: events [${kinds.join(', ')}], expected progress… then exactly one result`);
        expect(!kinds.includes('empty'), `${what}: an event with neither progress nor result`);
        return { progress: events.filter((e) => e.progress).map((e) => e.progress!), result: events[events.length - 1]!.result! };
      };
      const first = await stream(request, 'UpdateStream');
      expect(first.progress.length >= 1, `UpdateStream: no progress event before the result`);
      const badPhase = first.progress.find((p) => !p.phase || !(p.elapsedMs >= 0));
      expect(!badPhase, `a progress event with phase ${JSON.stringify(badPhase?.phase)} elapsed_ms ${badPhase?.elapsedMs}`);
      const r = first.result;
      expect(
        String(r.info?.version) === '1' && String(r.baseVersion) === '0' && !r.replayed,
        `result v${r.info?.version} from ${r.baseVersion} replayed ${r.replayed}, expected v1 from 0, not replayed`,
      );
      expect(r.stepMetrics.length === 2, `${r.stepMetrics.length} step_metrics, expected 2 (inner_steps 2)`);
      const replay = ok(await ctx.client.unary('Update', request), 'Update repeating the UpdateStream request');
      expect(
        replay.replayed && sameInfo(replay.info, r.info),
        `Update after UpdateStream: replayed ${replay.replayed}, v${replay.info?.version}; expected the stream's v1 replayed`,
      );
      const second: Req<'Update'> = { ...request, baseVersion: '1', requestId: ctx.key('stream-2') };
      const u2 = ok(await ctx.client.unary('Update', second), 'Update from version 1');
      const replay2 = await stream(second, 'UpdateStream repeating an Update');
      expect(
        replay2.result.replayed && sameInfo(replay2.result.info, u2.info),
        `UpdateStream after Update: replayed ${replay2.result.replayed}, v${replay2.result.info?.version}; expected the Update's v2 replayed`,
      );
      const stale = await ctx.client.serverStream('UpdateStream', { ...request, requestId: ctx.key('stream-stale') });
      expect(!stale.ok, 'UpdateStream from a stale base succeeded');
      expect(
        stale.error.reason === 'STALE_BASE' && stale.error.codeName === 'FAILED_PRECONDITION',
        `UpdateStream from a stale base: ${describeError(stale.error)}, expected FAILED_PRECONDITION/STALE_BASE`,
      );
      expect(!stale.messages.some((e) => e.result), 'UpdateStream from a stale base sent a result before its error');
      return `${first.progress.length} progress events (${[...new Set(first.progress.map((p) => p.phase))].join(', ')})`;
    },
  },

  // ---- Errors ----
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
  {
    id: 'errors.model-not-loaded',
    title: 'Generate/Score/ExportVersion/Update of an unknown model_key → MODEL_NOT_LOADED (NOT_FOUND)',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const caps = await ctx.capabilities();
      const key = ctx.key('never-loaded');
      const V = await ctx.vocab();
      const calls: [P.RpcName, string, Req<P.RpcName>][] = [
        ['Generate', 'Generate', { modelKey: key, version: '0', sequences: [{ context: [1], seed: '1' }], sampling: { maxTokens: 2 } }],
        ['Score', 'Score', { modelKey: key, version: '0', sequences: [{ context: [1], tokens: [2 % V] }] }],
        ['ExportVersion', 'ExportVersion', { modelKey: key, version: '0' }],
        [
          'Update',
          'Update',
          {
            modelKey: key,
            baseVersion: '0',
            requestId: ctx.key('nl'),
            samples: [{ context: [1], tokens: [2], lossMask: [1], advantages: [1], oldLogprobs: [-1], lossWeights: [1] }],
          },
        ],
      ];
      for (const [rpc, what, req] of calls) {
        if (!caps.rpcs.includes(rpc)) continue;
        await ctx.expectError(`${what} of an unknown model`, () => ctx.client.unary(rpc, req), 'NOT_FOUND', 'MODEL_NOT_LOADED');
      }
    },
  },
  {
    id: 'errors.version-not-loaded',
    title: 'Generate/Score/ExportVersion/Update of a version never made → VERSION_NOT_LOADED (NOT_FOUND)',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const caps = await ctx.capabilities();
      const base = await ctx.base();
      const calls: [P.RpcName, Req<P.RpcName>][] = [
        ['Generate', { modelKey: base.key, version: '999', sequences: [{ context: [1], seed: '1' }], sampling: { maxTokens: 2 } }],
        ['Score', { modelKey: base.key, version: '999', sequences: [{ context: [1], tokens: [2] }] }],
        ['ExportVersion', { modelKey: base.key, version: '999' }],
        [
          'Update',
          {
            modelKey: base.key,
            baseVersion: '999',
            requestId: ctx.key('vnl'),
            samples: [{ context: [1], tokens: [2], lossMask: [1], advantages: [1], oldLogprobs: [-1], lossWeights: [1] }],
          },
        ],
      ];
      for (const [rpc, req] of calls) {
        if (!caps.rpcs.includes(rpc)) continue;
        await ctx.expectError(`${rpc} of version 999`, () => ctx.client.unary(rpc, req), 'NOT_FOUND', 'VERSION_NOT_LOADED');
      }
    },
  },
  {
    id: 'errors.token-out-of-vocab',
    title: 'A token id ≥ vocab_size in a Generate context (or Score tokens) → INVALID_REQUEST naming the field path',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const V = await ctx.vocab();
      const e = await ctx.expectError(
        'Generate with sequences[1].context[1] = vocab_size',
        () =>
          ctx.client.unary('Generate', {
            modelKey: base.key,
            version: '0',
            sampling: { maxTokens: 2 },
            sequences: [
              { context: [1], seed: '1' },
              { context: [1, V], seed: '2' },
            ],
          }),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      expect(/sequences\[1\]/.test(e.message) && /context/.test(e.message), `message ${JSON.stringify(e.message)} does not name sequences[1]…context`);
      if ((await ctx.capabilities()).rpcs.includes('Score')) {
        const s = await ctx.expectError(
          'Score with sequences[0].tokens[1] = vocab_size',
          () => ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences: [{ context: [1], tokens: [2, V + 3] }] }),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
        expect(/sequences\[0\]/.test(s.message) && /tokens/.test(s.message), `Score message ${JSON.stringify(s.message)} does not name sequences[0]…tokens`);
      }
      return e.message;
    },
  },
  {
    id: 'errors.max-tokens-zero',
    title: 'Generate with max_tokens 0 → INVALID_REQUEST naming max_tokens',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const e = await ctx.expectError(
        'Generate with max_tokens 0',
        () =>
          ctx.client.unary('Generate', {
            modelKey: base.key,
            version: '0',
            sampling: { temperature: 1, maxTokens: 0 },
            sequences: [{ context: [1], seed: '1' }],
          }),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      expect(/max_tokens/.test(e.message), `message ${JSON.stringify(e.message)} does not name max_tokens`);
      return e.message;
    },
  },
  {
    id: 'errors.empty-sequences',
    title: 'Generate/Score with no sequences, Update with no samples → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const caps = await ctx.capabilities();
      const base = await ctx.base();
      const calls: [P.RpcName, Req<P.RpcName>][] = [
        ['Generate', { modelKey: base.key, version: '0', sampling: { maxTokens: 2 }, sequences: [] }],
        ['Score', { modelKey: base.key, version: '0', sequences: [] }],
        ['Update', { modelKey: base.key, baseVersion: '0', requestId: ctx.key('empty'), samples: [] }],
      ];
      for (const [rpc, req] of calls) {
        if (!caps.rpcs.includes(rpc)) continue;
        await ctx.expectError(`${rpc} with an empty batch`, () => ctx.client.unary(rpc, req), 'INVALID_ARGUMENT', 'INVALID_REQUEST');
      }
      if (caps.rpcs.includes('Update')) {
        const v1 = await ctx.client.unary('ExportVersion', { modelKey: base.key, version: '1' });
        expect(!v1.ok, 'the base model has a version 1 after a failed Update');
      }
    },
  },
  {
    id: 'errors.update-invalid',
    title: 'Update with a NaN advantage, or a loss_mask of the wrong length → INVALID_REQUEST naming the field, nothing committed',
    async run(ctx) {
      await ctx.requireRpcs('Update');
      const base = await ctx.base();
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
        modelKey: base.key,
        baseVersion: '0',
        requestId: ctx.key(id),
        allowStaleBase: false,
        samples: [sample, { ...sample, ...s }],
        settings: undefined,
      });
      const nan = await ctx.expectError(
        'Update with advantages[1] NaN',
        () => ctx.client.unary('Update', req({ advantages: [1, NaN, 1] }, 'nan')),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      const mask = await ctx.expectError(
        'Update with a loss_mask of 2 for 3 tokens',
        () => ctx.client.unary('Update', req({ lossMask: [1, 1] }, 'mask')),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      expect(/samples\[1\]/.test(nan.message) && /advantages/.test(nan.message), `message ${JSON.stringify(nan.message)} does not name samples[1]…advantages`);
      expect(/samples\[1\]/.test(mask.message) && /loss_mask/.test(mask.message), `message ${JSON.stringify(mask.message)} does not name samples[1]…loss_mask`);
      const v1 = await ctx.client.unary('ExportVersion', { modelKey: base.key, version: '1' });
      expect(!v1.ok, 'the base model has a version 1 after failed Updates');
      return `${nan.message} | ${mask.message}`;
    },
  },
  {
    id: 'errors.bad-spec',
    title: 'InitModel with vocab_size 1, or an unknown family → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('InitModel');
      const spec = await ctx.spec();
      await ctx.expectError(
        'InitModel with vocab_size 1',
        () => ctx.client.unary('InitModel', { modelKey: ctx.key('bad-spec'), spec: { ...spec, vocabSize: 1 }, seed: '1' }),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      await ctx.expectError(
        'InitModel of family "no-such-family"',
        () => ctx.client.unary('InitModel', { modelKey: ctx.key('bad-family'), spec: { ...spec, family: 'no-such-family' }, seed: '1' }),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
    },
  },

  {
    id: 'errors.sampling-invalid',
    title: 'Generate with a negative or NaN temperature, or a stop token ≥ vocab → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const V = await ctx.vocab();
      for (const sampling of [
        { temperature: -1, maxTokens: 2 },
        { temperature: NaN, maxTokens: 2 },
        { temperature: 1, maxTokens: 2, stopTokens: [V] },
      ]) {
        await ctx.expectError(
          `Generate with ${JSON.stringify(sampling)}`,
          () => ctx.client.unary('Generate', { modelKey: base.key, version: '0', sampling, sequences: [{ context: [1], seed: '1' }] }),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
      }
    },
  },
  {
    id: 'errors.context-length',
    title: 'transformer: an empty context, or context + max_tokens > maxSeq → INVALID_REQUEST; exactly maxSeq is served',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const maxSeq = JSON.parse(base.info.spec?.configJson || '{}').maxSeq as number | undefined;
      if (base.info.spec?.family !== 'transformer' || !maxSeq) throw new Skip('the test model is not a transformer with maxSeq');
      const req = (context: number[], maxTokens: number) => ({
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens },
        sequences: [
          { context: [1], seed: '1' },
          { context, seed: '2' },
        ],
      });
      await ctx.expectError('Generate with an empty context', () => ctx.client.unary('Generate', req([], 2)), 'INVALID_ARGUMENT', 'INVALID_REQUEST');
      const ctxLen = maxSeq - 4;
      await ctx.expectError(
        `Generate with context ${ctxLen} + max_tokens 5 > maxSeq ${maxSeq}`,
        () => ctx.client.unary('Generate', req(Array(ctxLen).fill(1), 5)),
        'INVALID_ARGUMENT',
        'INVALID_REQUEST',
      );
      const full = req(Array(ctxLen).fill(1), 4);
      await generateOk(ctx, full as GenReq, `Generate with context ${ctxLen} + max_tokens 4 = maxSeq`);
    },
  },
  {
    id: 'errors.update-settings',
    title: 'Update with dual_clip 0.5 (must be > 1 or 0), a negative loss weight, a loss_mask value 2, or ref_logprobs of the wrong length → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('Update');
      const base = await ctx.base();
      const sample: P.UpdateSample = {
        context: [1, 2],
        tokens: [3, 4, 5],
        lossMask: [1, 1, 1],
        advantages: [1, -1, 1],
        oldLogprobs: [-2, -2, -2],
        lossWeights: [0.25, 0.25, 0.25],
        refLogprobs: [],
      };
      const cases: [string, Partial<P.UpdateSample>, DeepPartial<P.UpdateSettings> | undefined][] = [
        ['settings.dual_clip 0.5', {}, { dualClip: 0.5 }],
        ['loss_weights[1] −0.25', { lossWeights: [0.25, -0.25, 0.25] }, undefined],
        ['loss_mask[1] 2', { lossMask: [1, 2, 1] }, undefined],
        ['1 ref_logprob for 3 tokens', { refLogprobs: [-1] }, undefined],
      ];
      for (const [what, s, settings] of cases) {
        await ctx.expectError(
          `Update with ${what}`,
          () =>
            ctx.client.unary('Update', {
              modelKey: base.key,
              baseVersion: '0',
              requestId: ctx.key(`bad-${what}`),
              allowStaleBase: false,
              samples: [{ ...sample, ...s }],
              settings,
            }),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
      }
      const v1 = await ctx.client.unary('ExportVersion', { modelKey: base.key, version: '1' });
      expect(!v1.ok, 'the base model has a version 1 after failed Updates');
    },
  },
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
  {
    id: 'errors.streams',
    title:
      'Streaming RPCs fail with the same reasons: LoadVersionChunks without a header → INVALID_REQUEST; ExportVersionChunks / UpdateStream of an unknown model → MODEL_NOT_LOADED; ExportVersionChunks with a destination_uri → INVALID_REQUEST',
    async run(ctx) {
      const caps = await ctx.capabilities();
      const key = ctx.key('never-loaded');
      let n = 0;
      if (caps.rpcs.includes('LoadVersionChunks')) {
        n++;
        await ctx.expectError(
          'LoadVersionChunks without a header',
          () => ctx.client.clientStream('LoadVersionChunks', [{ header: undefined, weights: Buffer.alloc(8), optimizerState: Buffer.alloc(0) }]),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
      }
      if (caps.rpcs.includes('ExportVersionChunks')) {
        n++;
        await ctx.expectError(
          'ExportVersionChunks of an unknown model',
          () => ctx.client.serverStream('ExportVersionChunks', { modelKey: key, version: '0' }),
          'NOT_FOUND',
          'MODEL_NOT_LOADED',
        );
        const base = await ctx.base();
        const dest = pathToFileURL(path.join(ctx.tmpDir(), 'chunks-dest')).href;
        await ctx.expectError(
          'ExportVersionChunks with a destination_uri',
          () => ctx.client.serverStream('ExportVersionChunks', { modelKey: base.key, version: '0', destinationUri: dest }),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
      }
      if (caps.rpcs.includes('UpdateStream')) {
        n++;
        const samples = [{ context: [1], tokens: [2], lossMask: [1], advantages: [1], oldLogprobs: [-1], lossWeights: [1], refLogprobs: [] }];
        await ctx.expectError(
          'UpdateStream of an unknown model',
          () => ctx.client.serverStream('UpdateStream', { modelKey: key, baseVersion: '0', requestId: ctx.key('us-nl'), samples }),
          'NOT_FOUND',
          'MODEL_NOT_LOADED',
        );
      }
      if (n === 0) throw new Skip('the engine lists no streaming RPC');
    },
  },
  // ---- Abort ----
  {
    id: 'abort.unknown',
    title: 'Abort of an unknown request id, and of every Generate of a model with none in flight: 0 aborted, no error',
    async run(ctx) {
      await ctx.requireRpcs('Abort');
      const base = await ctx.base();
      const r = ok(await ctx.client.unary('Abort', { modelKey: base.key, requestIds: [ctx.key('no-such-request')] }), 'Abort');
      expect(r.abortedRequests === 0, `aborted_requests ${r.abortedRequests}, expected 0`);
      // every Generate of the suite's own model (never Abort {}: the engine may be serving others)
      const all = ok(await ctx.client.unary('Abort', { modelKey: base.key, requestIds: [] }), 'Abort of every Generate of the base model');
      expect(all.abortedRequests === 0, `Abort of every Generate of the base model with none in flight: aborted_requests ${all.abortedRequests}, expected 0`);
    },
  },
  {
    id: 'abort.generate',
    title:
      'Abort of a running and of a queued Generate: each returns successfully, each sequence finished or ABORTED (logprobs as many as tokens); aborted_requests 0 or 1; an Abort answered while the first runs, sent well after the queued one (another model), finds it; later Generates unaffected',
    async run(ctx) {
      await ctx.requireRpcs('Abort', 'Generate');
      const base = await ctx.base();
      const caps = await ctx.capabilities();
      const V = await ctx.vocab();
      const reference: GenReq = {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 9 },
        sequences: contexts(V).map((c, i) => ({ context: c, seed: String(700 + i) })),
      };
      const before = await generateOk(ctx, reference, 'reference Generate');
      // B is on another model: no engine can have put it into A's device run, so while A still runs, B waits and must be aborted
      const other = await ctx.initModel('abort-other');
      const big = (id: string, seed: number, key = base.key): GenReq => ({
        modelKey: key,
        version: '0',
        requestId: id,
        sampling: { temperature: 1, maxTokens: 30 },
        sequences: Array.from({ length: ABORT_BATCH }, (_, i) => ({ context: [1 + (i % (V - 1))], seed: String(seed + i) })),
      });
      // A starts on the device; B, sent 3 ms later, waits behind it; then both are aborted
      const a = big(ctx.key('abort-running'), 1000);
      const b = big(ctx.key('abort-queued'), 2000, other.key);
      let aDone = false;
      const pa = generate(ctx, a).finally(() => (aDone = true));
      await sleep(3);
      let bDone = false;
      const bSent = Date.now();
      const pb = generate(ctx, b).finally(() => (bDone = true));
      await sleep(2);
      const abort = async (r: GenReq) => ok(await ctx.client.unary('Abort', { modelKey: r.modelKey, requestIds: [r.requestId!] }), `Abort ${r.requestId}`);
      // B's Abort is repeated (every 2 ms) until it lands or B returns: an Abort may reach the engine before the Generate it names.
      // One that was sent well after B and answered while A still ran proves the engine had B waiting (it was reading its
      // messages, and B came first): from then on B had to be found. "A still ran" is judged after one more round trip
      // (Health): A's reply may reach this client together with the Abort's, the engine having finished A and started B
      // (on the device: not abortable) just before it read the Abort, which is no fault.
      let mustHaveFound = false;
      const abortB = async () => {
        let total = 0;
        for (let i = 0; i < 2000 && !bDone && total === 0; i++) {
          const sentLate = Date.now() - bSent >= QUEUED_ABORT_AFTER_MS;
          total += (await abort(b)).abortedRequests;
          if (total === 0 && sentLate && !aDone && !bDone) {
            ok(await ctx.client.unary('Health', {}), 'Health');
            if (!aDone && !bDone) mustHaveFound = true;
          }
          if (total === 0) await sleep(2);
        }
        return { abortedRequests: total };
      };
      const [abA, abB] = await Promise.all([abort(a), abortB()]);
      const [ra, rb] = await Promise.all([pa, pb]);
      expect(
        !mustHaveFound,
        `an Abort of the queued Generate (another model) sent ${QUEUED_ABORT_AFTER_MS}+ ms after it and answered while the first Generate still ran did not find it (aborted_requests 0)`,
      );
      const outcome: string[] = [];
      for (const [name, req, ab, res] of [
        ['running', a, abA!, ra],
        ['queued', b, abB!, rb],
      ] as const) {
        expect(ab.abortedRequests === 0 || ab.abortedRequests === 1, `Abort of the ${name} Generate: aborted_requests ${ab.abortedRequests}, expected 0 or 1`);
        const out = ok(res, `the ${name} Generate after its Abort`);
        const problems = sequenceProblems(req, out, V, true);
        expect(problems.length === 0, `the ${name} Generate after its Abort: ${problems.slice(0, 2).join('; ')}`);
        const aborted = out.sequences.filter((s) => s.stopReason === 'ABORTED');
        if (ab.abortedRequests === 0)
          expect(aborted.length === 0, `Abort of the ${name} Generate said 0 aborted, yet ${aborted.length} sequences came back ABORTED`);
        outcome.push(
          `${name}: aborted_requests ${ab.abortedRequests}, ${aborted.length}/${ABORT_BATCH} ABORTED (${aborted.reduce((n, s) => n + s.tokens.length, 0)} tokens kept)`,
        );
      }
      const again = await generateOk(ctx, { ...b, sequences: b.sequences.slice(0, 8) }, 'Generate with the aborted request_id again');
      expect(!again.sequences.some((s) => s.stopReason === 'ABORTED'), 'a later Generate with the same request_id came back ABORTED');
      if (caps.deterministic) {
        // what an aborted sequence kept is a prefix of the same sequence run to the end (only those are run again)
        for (const [name, req, res] of [
          ['running', a, ra],
          ['queued', b, rb],
        ] as const) {
          if (!res.ok) continue;
          const partial = res.value.sequences.flatMap((s, i) => (s.stopReason === 'ABORTED' && s.tokens.length > 0 ? [i] : []));
          if (partial.length === 0) continue;
          const full = await generateOk(
            ctx,
            { ...req, requestId: '', sequences: partial.map((i) => req.sequences[i]!) },
            `the ${name} Generate's partial sequences again`,
          );
          partial.forEach((i, k) => {
            const s = res.value.sequences[i]!;
            const f = full.sequences[k]!;
            const n = s.tokens.length;
            const d = firstDifference(
              [s],
              [
                {
                  ...f,
                  tokens: f.tokens.slice(0, n),
                  logprobs: f.logprobs.slice(0, n),
                  sampleLogprobs: f.sampleLogprobs.slice(0, n),
                  stopReason: P.StopReason.ABORTED,
                },
              ],
            );
            expect(!d, `the ${name} Generate's sequences[${i}] (ABORTED after ${n} tokens) is not a prefix of the same sequence run to the end: ${d}`);
          });
        }
      }
      const after = await generateOk(ctx, reference, 'the reference Generate after the Abort');
      if (caps.deterministic) {
        const d = firstDifference(before.sequences, after.sequences);
        expect(!d, `the reference Generate differs after the Abort: ${d}`);
      }
      return outcome.join('; ');
    },
  },

  // ---- gRPC limit ----
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

/** A regular file in the run's temp dir (a path under it is not a directory anyone can write). */
function writeFileRef(ctx: Context): string {
  const f = path.join(ctx.tmpDir(), 'a-regular-file');
  fs.writeFileSync(f, 'x');
  return f;
}
