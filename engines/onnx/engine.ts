/**
 * The engine, in-process: model/version cache, request validation, dynamic
 * batching of Generate, one device queue for Generate runs, and one train queue
 * of Score and Update calls, run on the engine's trainer thread on CPU
 * (trainer-thread.ts) so that they overlap Generate. The gRPC server (server.ts)
 * is a thin wrapper; tests and benchmarks can use this directly.
 */
import { createHash } from 'node:crypto';
import { ErrorReason, EngineFault, invalid } from '../protocol/errors';
import { describeSpec, FAMILY_NAMES, familyOf, specKey } from '../families';
import type { ModelSpec } from '../families/model-family';
import type { GenerateRowResult, MemoryPolicy, ModelRuntime, OptimState, ScoreSequence, StepMetrics, UpdateSample, UpdateSettings } from './model-runtime';
import type {
  AbortRequest,
  AbortResponse,
  Capabilities,
  ExportedVersion,
  ExportVersionRequest,
  GenerateRequest,
  GenerateResponse,
  HealthResponse,
  InitModelRequest,
  LoadVersionRequest,
  ScoreRequest,
  ScoreResponse,
  StatsResponse,
  UpdateMetrics,
  UpdateProgress,
  UpdateRequest,
  UpdateResponse,
  VersionInfo,
} from '../protocol/types';
import { GenerateBatcher, type GenerateJob } from './batcher';
import {
  CheckpointError,
  decodeOptimizerState,
  decodeWeights,
  encodeOptimizerState,
  encodeWeights,
  readReference,
  sha256Hex,
  writeReference,
} from '../protocol/version-bytes';
import { DeviceQueue } from './device-queue';
import { runUpdateStep, type UpdateStepResult } from './update-step';
import { type SpecRows, TrainerThread } from './trainer-thread';
import { parseEngineFaults, withNanAdvantage, type EngineFaults } from './faults';
import { defaultMemoryPolicy, type ResolvedDevice, sessionFactory } from './device';
import { type InvarianceResult, probeInvariance } from './invariance';
import * as validate from './validate';
import { type CachedVersion, type ModelEntry, VersionCache } from './version-cache';
import { checkpointKey, seededKey, SharedWeights } from './shared-weights';
import { createLoraRuntime } from './transformer/lora-runtime';
import { baseSpecOf, initAdapter, loraSpecOf } from '../families/transformer/lora';
import type { LoraSpec, TransformerSpec } from '../families/transformer/spec';

export interface EngineOptions {
  device: ResolvedDevice;
  /** intra-op threads of generate/score sessions (default 1; update sessions always use 1) */
  intraOpThreads?: number;
  /** how long the first Generate call of a group waits for company (default 2 ms) */
  batchWindowMs?: number;
  /** max sequences per fused generate run (default 1024) */
  maxBatch?: number;
  /** cached versions per model before LRU eviction (default 64; the latest is never evicted) */
  maxVersionsPerModel?: number;
  /** models held before those unused for modelIdleMs are dropped (default 32; version-cache.ts) */
  maxModels?: number;
  /** how long a model goes unused before it may be dropped (default 10 min) */
  modelIdleMs?: number;
  /** memory one spec's runs may use (default defaultMemoryPolicy(): 80% of RAM, 256 MiB update micro-batches) */
  memory?: MemoryPolicy;
  /** "auto" probes each spec (default); "free"/"fixed" force a mode (tests, benchmarks) */
  batchShape?: 'auto' | 'free' | 'fixed';
  log?: (event: Record<string, unknown>) => void;
  /** Test-only fault injection (faults.ts); default env TROUPE_ENGINE_FAULTS, unset = off. */
  faults?: string;
  /**
   * Score and Update on a second thread (trainer-thread.ts), beside Generate: "auto" (the default on CPU) from the first
   * call that would overlap Generate, "on" from the first call, "off" (the default on CUDA) never. LoRA specs (their
   * frozen base would be copied to the thread) always run on the engine's thread.
   */
  trainerThread?: 'auto' | 'on' | 'off';
}

/** Lets a transport tell the engine that the caller went away. */
export interface CancelSignal {
  onCancel(fn: () => void): void;
}

interface SpecRuntime {
  spec: ModelSpec;
  runtime: ModelRuntime;
  invariance: InvarianceResult;
}

/** A batch group's runtime; each job brings its own θ (one per group, but for LoRA models of one spec). */
interface GenerateGroupCtx {
  runtime: ModelRuntime;
}

/** A Generate call not yet answered, for Abort. */
interface InflightGenerate {
  modelKey: string;
  requestId?: string;
  job: GenerateJob;
}

/** The RPCs of protocol v2 this engine serves (all of them). */
export const ENGINE_RPCS = [
  'InitModel',
  'LoadVersion',
  'ExportVersion',
  'LoadVersionChunks',
  'ExportVersionChunks',
  'Generate',
  'Score',
  'Update',
  'UpdateStream',
  'Abort',
  'Health',
  'Stats',
];

/** |Score − Generate| log-prob bound this engine promises (transformer KV-cache decode vs full-sequence scoring; measured ≤ 1.6e-6). */
const SCORE_TOLERANCE = 1e-5;

interface UpdateRecord {
  fingerprint: string;
  promise: Promise<UpdateResponse>;
}

const MAX_REMEMBERED_UPDATES = 4096;

function meanMetrics(steps: StepMetrics[]): UpdateMetrics {
  const mean = (k: keyof StepMetrics) => steps.reduce((a, s) => a + s[k], 0) / steps.length;
  return {
    loss: mean('loss'),
    pgLoss: mean('pg_loss'),
    klLoss: mean('kl_loss'),
    entropySum: mean('entropy_sum'),
    gradNorm: mean('grad_norm'),
    clipFraction: mean('clip_fraction'),
    dualClipFraction: mean('dual_clip_fraction'),
    approxKl: mean('approx_kl'),
    entropy: mean('entropy'),
  };
}

function stepToMetrics(s: StepMetrics): UpdateMetrics {
  return meanMetrics([s]);
}

/** The last Score of a model: an asynchronous step scores its batch under the base (its proximal policy) just before the Update. */
interface LastScore {
  version: number;
  seqs: readonly ScoreSequence[];
  logprobs: Float32Array[];
}

const sameList = (a: ArrayLike<number>, b: ArrayLike<number>) => a.length === b.length && Array.prototype.every.call(a, (x: number, i: number) => x === b[i]);

/** Whether two batches hold the same tokens in the same order (compared only when an Update follows a Score). */
function sameTokens(a: readonly ScoreSequence[], b: readonly ScoreSequence[]): boolean {
  if (a.length !== b.length) return false;
  return a.every((s, i) => {
    const o = b[i];
    return o !== undefined && sameList(s.context, o.context) && sameList(s.tokens, o.tokens);
  });
}

export class Engine {
  readonly device: ResolvedDevice;
  readonly intraOpThreads: number;
  readonly batchWindowMs: number;
  readonly maxBatch: number;
  readonly memory: MemoryPolicy;
  private readonly cache: VersionCache;
  private readonly queue = new DeviceQueue();
  /** Score and Update calls in order: their own queue beside the device queue with a trainer thread, else the device queue. */
  private readonly trainQueue: DeviceQueue;
  private readonly thread?: TrainerThread;
  /** whether Score and Update go to the thread: "on", or from the first one that would overlap Generate (onThread) */
  private threadInUse: boolean;
  private readonly batcher: GenerateBatcher<GenerateGroupCtx>;
  private readonly runtimes = new Map<string, Promise<SpecRuntime>>();
  /** seeded version-0 θ and LoRA bases, one array per content */
  private readonly weights = new SharedWeights();
  private readonly updates = new Map<string, UpdateRecord>();
  /** by model key; an Update of the same version and tokens reuses it for its log-prob gap instead of scoring again */
  private readonly lastScores = new Map<string, LastScore>();
  private readonly inflight = new Set<InflightGenerate>();
  private readonly started = Date.now();
  private readonly log: (event: Record<string, unknown>) => void;
  private readonly batchShape: 'auto' | 'free' | 'fixed';
  private readonly faults: EngineFaults;
  private readonly counters = {
    tokensGenerated: 0,
    generateMs: 0,
    generateBatches: 0,
    generateRows: 0,
    generateRequests: 0,
    scoreRuns: 0,
    updateRuns: 0,
    mixedAdapterRuns: 0,
    /** trainable tokens of committed updates (not in Stats; served at /metrics) */
    tokensTrained: 0,
  };

  constructor(opts: EngineOptions) {
    this.device = opts.device;
    this.intraOpThreads = opts.intraOpThreads ?? 1;
    this.batchWindowMs = opts.batchWindowMs ?? 2;
    this.maxBatch = opts.maxBatch ?? 1024;
    this.memory = opts.memory ?? defaultMemoryPolicy();
    this.batchShape = opts.batchShape ?? 'auto';
    this.log = opts.log ?? (() => undefined);
    this.cache = new VersionCache({
      maxVersionsPerModel: opts.maxVersionsPerModel ?? 64,
      maxModels: opts.maxModels,
      idleMs: opts.modelIdleMs,
      onDrop: (key) => {
        this.lastScores.delete(key);
        this.log({ event: 'model_dropped', modelKey: key });
      },
    });
    this.faults = parseEngineFaults(opts.faults ?? process.env.TROUPE_ENGINE_FAULTS);
    if (this.faults.armed.length > 0) this.log({ event: 'warning', message: `test fault injection armed: ${this.faults.armed.join(', ')}` });
    const mode = opts.trainerThread ?? (this.device.device === 'cpu' ? 'auto' : 'off');
    const threaded = mode !== 'off';
    this.threadInUse = mode === 'on';
    this.trainQueue = threaded ? new DeviceQueue() : this.queue;
    if (threaded) {
      const settings = { device: this.device.device, intraOpThreads: this.intraOpThreads, memory: this.memory };
      this.thread = new TrainerThread(settings, () => this.trainQueue.worked());
    }
    this.batcher = new GenerateBatcher(this.queue, { windowMs: this.batchWindowMs, maxBatch: this.maxBatch }, (ctx, jobs) => this.runGenerateGroup(ctx, jobs));
  }

  /** Sessions and invariance mode for a spec, created once and shared by every model with it. */
  private runtimeFor(spec: ModelSpec): Promise<SpecRuntime> {
    const key = specKey(spec);
    let rt = this.runtimes.get(key);
    if (!rt) {
      const factory = sessionFactory(this.device.device, { intraOpThreads: this.intraOpThreads, memory: this.memory, onDeviceWork: () => this.queue.worked() });
      const lora = loraSpecOf(spec);
      rt = lora
        ? this.loraRuntime(lora, factory)
        : this.queue.run(async () => {
            const force = this.batchShape === 'auto' ? undefined : this.batchShape;
            const invariance = await probeInvariance(spec, factory, this.maxBatch, force);
            const runtime = invariance.runtime;
            await runtime.warm();
            this.log({ event: 'spec_ready', spec, batch_invariance: invariance.description });
            if (invariance.mode === 'none') this.log({ event: 'warning', message: `batch invariance not guaranteed: ${invariance.description}` });
            return { spec, runtime, invariance };
          });
      rt.catch(() => this.runtimes.delete(key));
      this.runtimes.set(key, rt);
    }
    return rt;
  }

  /** A LoRA spec's runtime: its base spec's (probed once, shared with plain models of it) over the frozen base θ. */
  private async loraRuntime(spec: TransformerSpec & { lora: LoraSpec }, factory: ReturnType<typeof sessionFactory>): Promise<SpecRuntime> {
    const baseSpec = baseSpecOf(spec);
    const base = await this.runtimeFor(baseSpec);
    const dir = spec.lora.baseCheckpoint;
    const theta =
      dir === undefined
        ? this.seeded(baseSpec, spec.lora.baseSeed!)
        : this.weights.get(checkpointKey(dir, specKey(baseSpec)), () => validate.checkpointBase(dir, baseSpec));
    const runtime = createLoraRuntime(spec, base.runtime, theta, factory);
    await this.queue.run(() => runtime.warm());
    this.log({ event: 'spec_ready', spec, batch_invariance: `${base.invariance.description} (the base's)` });
    return { spec, runtime, invariance: base.invariance };
  }

  /** θ₀ of a plain spec from its seed: a model's version 0 and the LoRA bases over it share one array. */
  private seeded(spec: ModelSpec, seed: bigint | number | string): Float32Array {
    return this.weights.get(seededKey(specKey(spec), validate.seed(seed, 'seed')), () => familyOf(spec.family).init(spec, seed));
  }

  private async modelFor(key: string, spec: ModelSpec): Promise<ModelEntry> {
    const existing = this.cache.find(key);
    if (existing) return this.cache.ensureModel(key, spec, () => existing.runtime); // checks the spec
    const { runtime } = await this.runtimeFor(spec);
    return this.cache.ensureModel(key, spec, () => runtime);
  }

  async initModel(req: InitModelRequest): Promise<VersionInfo> {
    const key = validate.modelKey(req.modelKey);
    // a checkpoint's θ (with `lora`: the adapter's base), read before the model exists here
    const pretrained = validate.checkpoint(req.spec);
    const spec = validate.spec(pretrained?.spec ?? req.spec, this.memory.budgetBytes);
    validate.seed(req.seed, 'seed');
    const lora = loraSpecOf(spec);
    // an adapter over the checkpoint just read: its runtime finds the base here instead of reading it again
    if (lora && pretrained) this.weights.get(checkpointKey(lora.lora.baseCheckpoint!, specKey(baseSpecOf(lora))), () => pretrained.theta);
    const model = await this.modelFor(key, spec);
    // LoRA: the adapter drawn from the seed (B = 0: it scores as its base); a checkpoint's θ as version 0 (the seed
    // is not used); else the family's seeded init
    const theta = lora ? initAdapter(lora, req.seed) : (pretrained?.theta ?? this.seeded(spec, req.seed));
    const zeros = () => new Float32Array(theta.length);
    const v = this.cache.put(model, 0, { theta, m: zeros(), v: zeros(), step: 0 });
    return this.cache.info(model, v);
  }

  async loadVersion(req: LoadVersionRequest): Promise<VersionInfo> {
    const key = validate.modelKey(req.modelKey);
    const version = validate.versionNumber(req.version);
    const spec = validate.spec(req.spec, this.memory.budgetBytes);
    const weights = req.weightsRef ? await readReference(req.weightsRef, 'weights_ref') : req.weights;
    const optimizerState = req.optimizerStateRef ? await readReference(req.optimizerStateRef, 'optimizer_state_ref') : req.optimizerState;
    if (!(weights instanceof Uint8Array)) throw invalid('weights: required (bytes, or weights_ref)');
    if (req.weightsSha256 && sha256Hex(weights) !== req.weightsSha256.toLowerCase()) {
      throw invalid(`weights_sha256: the weights bytes hash to ${sha256Hex(weights)}, not ${req.weightsSha256}`);
    }
    const { runtime } = await this.runtimeFor(spec);
    let state;
    try {
      const theta = decodeWeights(weights, runtime.paramCount);
      state = { theta, ...decodeOptimizerState(optimizerState ?? new Uint8Array(0), runtime.paramCount) };
    } catch (e) {
      if (e instanceof CheckpointError) throw invalid(e.message);
      throw e;
    }
    const model = await this.modelFor(key, spec);
    return this.cache.info(model, this.cache.put(model, version, state));
  }

  async exportVersion(req: ExportVersionRequest): Promise<ExportedVersion> {
    const { model, v } = this.cache.version(validate.modelKey(req.modelKey), validate.versionNumber(req.version));
    return this.cache.using(model, () => this.exported(req, model, v));
  }

  private async exported(req: ExportVersionRequest, model: ModelEntry, v: CachedVersion): Promise<ExportedVersion> {
    const info = this.cache.info(model, v);
    const weights = encodeWeights(v.state.theta);
    const optimizerState = encodeOptimizerState(v.state);
    if (!req.destinationUri) return { info, weights, optimizerState };
    const name = `${encodeURIComponent(model.key)}-v${info.version}`;
    const empty = new Uint8Array(0);
    return {
      info,
      weights: empty,
      optimizerState: empty,
      weightsRef: await writeReference(req.destinationUri, `${name}.weights`, weights, 'destination_uri'),
      optimizerStateRef: await writeReference(req.destinationUri, `${name}.optimizer`, optimizerState, 'destination_uri'),
    };
  }

  async generate(req: GenerateRequest, cancel?: CancelSignal): Promise<GenerateResponse> {
    const key = validate.modelKey(req.modelKey);
    const version = validate.versionNumber(req.version);
    if (!Array.isArray(req.sequences) || req.sequences.length === 0) throw invalid('sequences: empty batch (send at least one sequence)');
    const { model, v } = this.cache.version(key, version);
    const rows = validate.generateRows(req, model.spec);
    const requestId = req.requestId === undefined || req.requestId === '' ? undefined : validate.requestId(req.requestId);
    let entry: InflightGenerate | undefined;
    const waiting = () =>
      new Promise<Array<GenerateRowResult | null>>((resolve, reject) => {
        let settled = false;
        const job: GenerateJob = {
          rows,
          theta: v.state.theta,
          resolve: (r) => ((settled = true), resolve(r)),
          reject: (e: unknown) => ((settled = true), reject(e)),
        };
        cancel?.onCancel(() => {
          if (settled) return; // grpc-js may report 'cancelled' after the call completed
          this.batcher.withdraw(job); // not started: skipped; started: its result is dropped
          job.reject(new EngineFault(ErrorReason.CANCELLED, 'generate cancelled by the caller'));
        });
        entry = { modelKey: key, requestId, job };
        this.inflight.add(entry);
        // a runtime that mixes weights by row (LoRA adapters of one spec) batches every model of its spec together
        const group = model.runtime.generateMixed ? `spec\u0000${specKey(model.spec)}` : `${key}\u0000${version}`;
        this.batcher.submit(group, { runtime: model.runtime }, job);
      }).finally(() => this.inflight.delete(entry!));
    const results = await this.cache.using(model, waiting);
    return {
      version,
      sequences: results.map((r) =>
        r
          ? { tokens: r.tokens, logprobs: r.logprobs, sampleLogprobs: r.sampleLogprobs, stopReason: r.stopReason, version }
          : { tokens: [], logprobs: [], sampleLogprobs: [], stopReason: 'aborted' as const, version },
      ),
    };
  }

  /**
   * Abort: Generate calls still waiting for the device come back at once with every
   * sequence ABORTED and no tokens; a batch already on the device is one fused run and
   * finishes (its callers get their tokens).
   */
  abort(req: AbortRequest): AbortResponse {
    const key = req.modelKey ? validate.modelKey(req.modelKey) : undefined;
    const ids = new Set(req.requestIds ?? []);
    let aborted = 0;
    for (const e of this.inflight) {
      if ((key !== undefined && e.modelKey !== key) || (ids.size > 0 && (e.requestId === undefined || !ids.has(e.requestId)))) continue;
      if (!this.batcher.withdraw(e.job)) continue; // on the device already: it finishes
      e.job.resolve(e.job.rows.map(() => null));
      this.inflight.delete(e);
      aborted++;
    }
    if (aborted > 0) this.log({ event: 'generate_aborted', modelKey: key ?? '*', requests: aborted });
    return { abortedRequests: aborted };
  }

  private async runGenerateGroup(ctx: GenerateGroupCtx, jobs: GenerateJob[]): Promise<void> {
    const rows = jobs.flatMap((j) => j.rows);
    const thetaOf = jobs.flatMap((j) => j.rows.map(() => j.theta));
    const results: GenerateRowResult[] = [];
    for (let start = 0; start < rows.length; start += this.maxBatch) {
      const chunk = rows.slice(start, start + this.maxBatch);
      const chunkThetas = thetaOf.slice(start, start + this.maxBatch);
      const thetas = [...new Set(chunkThetas)];
      const t0 = performance.now();
      let out: GenerateRowResult[];
      if (thetas.length === 1) out = await ctx.runtime.generate(thetas[0]!, chunk);
      else {
        out = await ctx.runtime.generateMixed!(
          thetas,
          chunk,
          chunkThetas.map((t) => thetas.indexOf(t)),
        );
        this.counters.mixedAdapterRuns++;
      }
      this.counters.generateMs += performance.now() - t0;
      this.counters.generateBatches++;
      this.counters.generateRows += chunk.length;
      for (const r of out) this.counters.tokensGenerated += r.tokens.length;
      results.push(...out);
    }
    this.counters.generateRequests += jobs.length;
    let at = 0;
    for (const j of jobs) {
      j.resolve(results.slice(at, at + j.rows.length));
      at += j.rows.length;
    }
  }

  async score(req: ScoreRequest): Promise<ScoreResponse> {
    const key = validate.modelKey(req.modelKey);
    const version = validate.versionNumber(req.version);
    if (!Array.isArray(req.sequences) || req.sequences.length === 0) throw invalid('sequences: empty batch (send at least one sequence)');
    const { model, v } = this.cache.version(key, version);
    const seqs = validate.scoreSequences(req, model.spec);
    const theta = v.state.theta;
    const out = await this.cache.using(model, () =>
      this.trainQueue.run(async () => {
        const on = await this.onThread(model);
        return on ? on.thread.score({ ...on.model, theta, seqs }) : model.runtime.score(theta, seqs);
      }),
    );
    this.counters.scoreRuns++;
    this.lastScores.set(key, { version, seqs, logprobs: out.logprobs });
    return {
      version,
      sequences: out.logprobs.map((lp, i) => ({ logprobs: Array.from(lp), entropy: Array.from(out.entropy[i]!) })),
    };
  }

  /** `progress` hears the update's phases (UpdateStream); a replayed request has none. */
  async update(req: UpdateRequest, progress: (p: Partial<UpdateProgress>) => void = () => undefined): Promise<UpdateResponse> {
    const key = validate.modelKey(req.modelKey);
    const base = validate.versionNumber(req.baseVersion, 'base_version');
    const requestId = validate.requestId(req.requestId);
    const fingerprint = createHash('sha256')
      .update(JSON.stringify([key, base, !!req.allowStaleBase, req.samples, req.settings ?? null]))
      .digest('hex');
    const prev = this.updates.get(requestId);
    if (prev) {
      if (prev.fingerprint !== fingerprint) {
        throw new EngineFault(ErrorReason.REQUEST_ID_REUSED, `request_id "${requestId}" was already used for a different update request`, { requestId });
      }
      return { ...(await prev.promise), replayed: true };
    }
    const { model } = this.cache.version(key, base);
    let samples = validate.updateSamples(req, model.spec);
    if (this.faults.nanUpdate(requestId)) {
      samples = withNanAdvantage(samples);
      this.log({ event: 'fault_injected', fault: 'nan-update', requestId });
    }
    const settings = validate.updateSettings(req.settings);
    this.checkBase(model, base, !!req.allowStaleBase);

    const stall = this.faults.stallUpdate(requestId);
    const innerSteps = settings.innerSteps;
    progress({ phase: 'queued', queuePosition: this.trainQueue.depth, innerSteps });
    const promise = this.cache.using(model, () =>
      this.trainQueue.run(async (): Promise<UpdateResponse> => {
        if (stall) {
          this.log({ event: 'fault_injected', fault: 'stall-update', requestId });
          await new Promise<never>(() => undefined); // holds the train queue; the event loop stays free
        }
        const t0 = performance.now();
        const { v } = this.cache.version(key, base);
        this.checkBase(model, base, !!req.allowStaleBase); // another update may have committed meanwhile
        progress({ phase: 'scoring', innerSteps });
        const training = () => progress({ phase: 'training', innerSteps });
        const { out, logprobGap } = await this.updateStep(model, v.state, samples, settings, training, this.scoredBefore(key, base, samples));
        this.counters.updateRuns++;
        const bad = out.steps.findIndex((s) => !Number.isFinite(s.loss) || !Number.isFinite(s.grad_norm));
        if (bad >= 0 || out.state.theta.some((x) => !Number.isFinite(x))) {
          const s = out.steps[bad >= 0 ? bad : out.steps.length - 1]!;
          throw new EngineFault(
            ErrorReason.NON_FINITE_UPDATE,
            `update of "${key}" from version ${base} produced non-finite values at inner step ${bad >= 0 ? bad : 'final weights'} (loss=${s.loss}, grad_norm=${s.grad_norm}); nothing was committed`,
            { modelKey: key, baseVersion: base, step: bad, loss: s.loss, gradNorm: s.grad_norm },
          );
        }
        const cv = this.cache.put(model, model.latest + 1, out.state);
        this.counters.tokensTrained += out.tokens;
        return {
          info: this.cache.info(model, cv),
          baseVersion: base,
          metrics: meanMetrics(out.steps),
          stepMetrics: out.steps.map(stepToMetrics),
          tokens: out.tokens,
          samples: samples.length,
          replayed: false,
          durationMs: performance.now() - t0,
          logprobGap,
        };
      }),
    );
    this.remember(requestId, { fingerprint, promise });
    promise.catch(() => {
      if (this.updates.get(requestId)?.promise === promise) this.updates.delete(requestId); // failures are not replayed
    });
    return promise;
  }

  /** The update's device work: on the trainer thread where there is one (LoRA specs: on this thread), else here. */
  private async updateStep(
    model: ModelEntry,
    state: OptimState,
    samples: UpdateSample[],
    settings: UpdateSettings,
    training: () => void,
    baseLogprobs?: Float32Array[],
  ): Promise<UpdateStepResult> {
    const on = await this.onThread(model);
    return on
      ? on.thread.update({ ...on.model, state, samples, settings, baseLogprobs }, training)
      : runUpdateStep(model.runtime, state, samples, settings, training, baseLogprobs);
  }

  /** The base version's log-probs of exactly these samples' tokens, where the model's last Score computed them (then forgotten). */
  private scoredBefore(key: string, base: number, samples: UpdateSample[]): Float32Array[] | undefined {
    const last = this.lastScores.get(key);
    if (!last || last.version !== base || !sameTokens(last.seqs, samples)) return undefined;
    this.lastScores.delete(key);
    return last.logprobs;
  }

  /**
   * What the trainer thread builds the model's runtime from (its spec, the probed row policy), or undefined: it runs
   * here. The thread starts with the first Score or Update that finds Generate work queued or running (an asynchronous
   * run): a synchronous run, whose calls take turns, never pays for it (an isolate, its own sessions, copies of θ).
   */
  private async onThread(model: ModelEntry): Promise<{ thread: TrainerThread; model: SpecRows } | undefined> {
    if (!this.thread || loraSpecOf(model.spec)) return undefined;
    if (!this.threadInUse) {
      if (this.queue.depth + this.batcher.waiting === 0) return undefined;
      this.threadInUse = true;
      this.log({ event: 'trainer_thread', message: 'Score and Update run on the trainer thread from now on: one overlapped Generate' });
    }
    const { invariance } = await this.runtimeFor(model.spec);
    return { thread: this.thread, model: { spec: model.spec, rows: { minRows: invariance.minRows, maxRows: invariance.maxRows } } };
  }

  /** Ends the trainer thread (in-process users; the engine process ends with it anyway). */
  close(): Promise<void> {
    return this.thread?.close() ?? Promise.resolve();
  }

  private checkBase(model: ModelEntry, base: number, allowStale: boolean): void {
    if (base < model.latest && !allowStale) {
      throw new EngineFault(
        ErrorReason.STALE_BASE,
        `base_version ${base} of "${model.key}" is not the latest version (${model.latest}); set allow_stale_base to train from it anyway`,
        { modelKey: model.key, baseVersion: base, latestVersion: model.latest },
      );
    }
  }

  private remember(requestId: string, rec: UpdateRecord): void {
    this.updates.set(requestId, rec);
    while (this.updates.size > MAX_REMEMBERED_UPDATES) {
      const oldest = this.updates.keys().next().value as string;
      this.updates.delete(oldest);
    }
  }

  health(): HealthResponse {
    return {
      status: 'SERVING',
      device: this.device.device,
      requestedDevice: this.device.requested,
      fellBack: this.device.fellBack,
      fallbackReason: this.device.fallbackReason,
      uptimeS: (Date.now() - this.started) / 1000,
      deviceRuns: this.deviceRuns(),
      queueDepth: this.queueDepth(),
      capabilities: this.capabilities(),
    };
  }

  /** The device queue, and the train queue where it is another (with a trainer thread). */
  private queues(): DeviceQueue[] {
    return this.trainQueue === this.queue ? [this.queue] : [this.queue, this.trainQueue];
  }

  /** Device runs and session builds so far, on both threads: the progress the pool worker's hang watchdog reads. */
  private deviceRuns(): number {
    return this.queues().reduce((n, q) => n + q.completed, 0);
  }

  private queueDepth(): number {
    return this.queues().reduce((n, q) => n + q.depth, this.batcher.waiting);
  }

  capabilities(): Capabilities {
    return {
      protocolVersion: 2,
      engine: 'troupe-onnx 2 (onnxruntime-node)',
      rpcs: ENGINE_RPCS,
      families: FAMILY_NAMES,
      // Philox noise per (seed, token), row-independent graphs, fixed update threads (engines/onnx/README.md, "Determinism")
      deterministic: true,
      scoreMatchesGenerate: 'tolerance',
      scoreTolerance: SCORE_TOLERANCE,
      maxBatch: this.maxBatch,
      weightsByReference: true,
      // LoRA specs: merged on the host for Generate / Score, adapter gradient in the update graph (transformer/lora-runtime.ts)
      lora: true,
    };
  }

  /** Invariance modes of the specs probed so far. */
  private async invarianceSummary(): Promise<string> {
    const parts: string[] = [];
    for (const rt of this.runtimes.values()) {
      const r = await rt.catch(() => undefined);
      if (r) parts.push(`${describeSpec(r.spec)} V${r.spec.vocabSize}: ${r.invariance.description}`);
    }
    return parts.length ? parts.join('; ') : 'probed per model spec on first use';
  }

  /** The counters behind Stats, and trained tokens (engines/onnx/metrics.ts serves them). */
  counts(): Readonly<typeof this.counters> {
    return { ...this.counters };
  }

  async stats(): Promise<StatsResponse> {
    const c = this.counters;
    return {
      device: this.device.device,
      requestedDevice: this.device.requested,
      fellBack: this.device.fellBack,
      fallbackReason: this.device.fallbackReason,
      models: this.cache
        .list()
        .filter((m) => m.versions.size > 0 || m.latest >= 0)
        .map((m) => ({
          modelKey: m.key,
          spec: m.spec,
          versions: [...m.versions.keys()].sort((a, b) => a - b),
          latestVersion: m.latest,
        })),
      queueDepth: this.queueDepth(),
      tokensPerSecond: c.generateMs > 0 ? (c.tokensGenerated / c.generateMs) * 1000 : 0,
      tokensGenerated: c.tokensGenerated,
      generateBatches: c.generateBatches,
      meanBatchSize: c.generateBatches ? c.generateRows / c.generateBatches : 0,
      meanRequestsPerBatch: c.generateBatches ? c.generateRequests / c.generateBatches : 0,
      scoreRuns: c.scoreRuns,
      updateRuns: c.updateRuns,
      intraOpThreads: this.intraOpThreads,
      batchWindowMs: this.batchWindowMs,
      maxBatch: this.maxBatch,
      batchInvariance: await this.invarianceSummary(),
      uptimeS: (Date.now() - this.started) / 1000,
      mixedAdapterRuns: c.mixedAdapterRuns,
      prefillRowsShared: 0, // each sequence runs its own context rows here
      prefixRowsReused: 0, // and keeps no prefix cache
      prefixCacheBytes: 0,
    };
  }
}
