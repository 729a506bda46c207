/**
 * A LoRA model's runtime (engines/families/transformer/lora.ts): its versions' weights are the adapter φ; the
 * frozen base θ and the base spec's runtime (sessions, row policy, memory sizing) are shared with every model
 * over that base.
 *
 *  - Generate / Score: φ is merged into θ on the host (mergeLora: W + (α/r)·Aᵀ·Bᵀ, float64 sums) and the base's
 *    graphs run on the merged θ, so Score = Generate and batch invariance are the base's. Merged θ of the last
 *    MERGED_KEPT adapters are kept (by the version's array), so sampling a version merges it once.
 *  - Update: lora-update-graph.ts, the merge and the chain rule to A and B inside the graph; AdamW state is φ-sized.
 */
import type * as ort from 'onnxruntime-node';
import type {
  GenerateRow,
  GenerateRowResult,
  ModelRuntime,
  OptimState,
  ScoreSequence,
  SessionFactory,
  UpdateOutput,
  UpdateSample,
  UpdateSettings,
} from '../model-runtime';
import { f32, optimizerFeeds, updateOutput } from '../graph/runtime-io';
import { adapterLayout, mergeLora } from '../../families/transformer/lora';
import type { TransformerSpec } from '../../families/transformer/spec';
import { buildLoraUpdateGraph } from './lora-update-graph';
import { TransformerRuntime } from './runtime';

/** Merged θ kept per LoRA spec: the versions being sampled (a model's latest, a few models over one base). */
const MERGED_KEPT = 4;

export class LoraRuntime implements ModelRuntime {
  readonly paramCount: number;
  private update_?: Promise<ort.InferenceSession>;
  /** φ → merged θ, oldest first */
  private readonly merged = new Map<Float32Array, Float32Array>();

  constructor(
    readonly spec: TransformerSpec,
    private readonly base: TransformerRuntime,
    /** the frozen base θ (shared: SharedWeights) */
    readonly baseTheta: Float32Array,
    private readonly factory: SessionFactory,
  ) {
    this.paramCount = adapterLayout(spec).total;
  }

  private session(): Promise<ort.InferenceSession> {
    // labelled 'update': one intra-op thread, as every update session (device.ts: bitwise-reproducible updates)
    return (this.update_ ??= this.factory.create(buildLoraUpdateGraph(this.spec), 'update'));
  }

  async warm(): Promise<void> {
    await Promise.all([this.base.warm(), this.session()]);
  }

  /** θ with φ merged, from the kept ones when φ is one of them (a version's array never changes). */
  mergedTheta(phi: Float32Array): Float32Array {
    let theta = this.merged.get(phi);
    if (theta) this.merged.delete(phi);
    else theta = mergeLora(this.spec, this.baseTheta, phi);
    this.merged.set(phi, theta);
    while (this.merged.size > MERGED_KEPT) this.merged.delete(this.merged.keys().next().value!);
    return theta;
  }

  generate(phi: Float32Array, rows: GenerateRow[]): Promise<GenerateRowResult[]> {
    return this.base.generate(this.mergedTheta(phi), rows);
  }

  score(phi: Float32Array, seqs: ScoreSequence[]): Promise<{ logprobs: Float32Array[]; entropy: Float32Array[] }> {
    return this.base.score(this.mergedTheta(phi), seqs);
  }

  largestRun(span: number): number {
    return this.base.largestRun(span);
  }

  async update(state: OptimState, samples: UpdateSample[], s: UpdateSettings): Promise<UpdateOutput> {
    const batch = this.base.updateBatch(samples);
    const out = await (await this.session()).run({ ...optimizerFeeds(state, s), ...batch.feeds, base_theta: f32(this.baseTheta, [this.baseTheta.length]) });
    return updateOutput(out, state, s.innerSteps, batch.trained);
  }
}

/** The LoRA runtime of `spec` over its base's runtime (the engine creates and probes that one for the base spec). */
export function createLoraRuntime(spec: TransformerSpec, base: ModelRuntime, baseTheta: Float32Array, factory: SessionFactory): LoraRuntime {
  if (!(base instanceof TransformerRuntime)) throw new Error('a LoRA spec adapts a transformer: its base runtime is not one');
  if (baseTheta.length !== base.paramCount) throw new Error(`LoRA base θ has ${baseTheta.length} values, the base spec ${base.paramCount}`);
  return new LoraRuntime(spec, base, baseTheta, factory);
}
