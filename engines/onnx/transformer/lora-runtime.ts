/**
 * A LoRA model's runtime (engines/families/transformer/lora.ts): its versions' weights are the adapter φ; the
 * frozen base θ is shared with every model over that base (SharedWeights), and no merged copy of it is made.
 *
 *  - Generate / Score: the LoRA spec's own graphs (lora-graph.ts) run the adapter unmerged over the base θ, so
 *    one Generate run holds rows of any adapters of this spec (generateMixed: the engine batches LoRA models of
 *    one spec together), each row as when it runs alone. Rows are padded as the base's runtime pads them (its
 *    probed row policy).
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
import { adapterLayout } from '../../families/transformer/lora';
import type { TransformerSpec } from '../../families/transformer/spec';
import { buildLoraUpdateGraph } from './lora-update-graph';
import { TransformerRuntime } from './runtime';

export class LoraRuntime implements ModelRuntime {
  readonly paramCount: number;
  private update_?: Promise<ort.InferenceSession>;
  /** Generate and Score of this spec: the base's graphs plus the adapter's terms */
  private readonly sampler: TransformerRuntime;

  constructor(
    readonly spec: TransformerSpec,
    private readonly base: TransformerRuntime,
    /** the frozen base θ (shared: SharedWeights) */
    readonly baseTheta: Float32Array,
    private readonly factory: SessionFactory,
  ) {
    this.paramCount = adapterLayout(spec).total;
    this.sampler = new TransformerRuntime(spec, factory, base.rows);
  }

  private session(): Promise<ort.InferenceSession> {
    // labelled 'update': one intra-op thread, as every update session (device.ts: bitwise-reproducible updates)
    return (this.update_ ??= this.factory.create(buildLoraUpdateGraph(this.spec), 'update'));
  }

  async warm(): Promise<void> {
    await Promise.all([this.sampler.warm(), this.session()]);
  }

  generate(phi: Float32Array, rows: GenerateRow[]): Promise<GenerateRowResult[]> {
    return this.generateMixed(
      [phi],
      rows,
      rows.map(() => 0),
    );
  }

  generateMixed(phis: Float32Array[], rows: GenerateRow[], ofRow: number[]): Promise<GenerateRowResult[]> {
    return this.sampler.generate(this.baseTheta, rows, { phis, ofRow });
  }

  score(phi: Float32Array, seqs: ScoreSequence[]): Promise<{ logprobs: Float32Array[]; entropy: Float32Array[] }> {
    return this.sampler.score(this.baseTheta, seqs, phi);
  }

  largestRun(span: number): number {
    return this.sampler.largestRun(span);
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
