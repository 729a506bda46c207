/**
 * Runs the transformer graphs for one spec with the same interface as
 * tiny-lm/runtime.ts (what the engine's model-family seam calls): owns the
 * generate, score and update sessions (weights are inputs, so every model with
 * this spec shares them), assembles padded batches on the host and decodes
 * outputs. No batching policy lives here beyond row padding.
 *
 * Sequences: a context of ≥ 1 token (position 0 has no predecessor, so the
 * first scored or generated token needs one) plus tokens, at most maxSeq in
 * all. Generate left-pads contexts (generate-graph.ts); Score and Update
 * right-pad whole sequences, and row (b, p) predicts token p + 1.
 */
import * as ort from 'onnxruntime-node';
import { ModelRequestError } from '../../families/model-family';
import type {
  GenerateRow,
  GenerateRowResult,
  ModelRuntime,
  OptimState,
  RowPolicy,
  ScoreSequence,
  SessionFactory,
  UpdateOutput,
  UpdateSample,
  UpdateSettings,
} from '../model-runtime';
import { f32, generatedRows, i64, optimizerFeeds, PolicySessions, samplingFeeds, updateOutput } from '../graph/runtime-io';
import { transformerSequenceIssue } from '../../families/transformer/family';
import { buildTransformerGenerateGraph } from './generate-graph';
import { generateBytesPerRow, generateContextWidth, rowsThatFit, scoreBytesPerSequence, updateMicroBatchRows } from '../../families/transformer/memory';
import { buildTransformerScoreGraph } from './score-graph';
import { paramLayout, type TransformerSpec } from '../../families/transformer/spec';
import { buildTransformerUpdateGraph } from './update-graph';

/** A request the spec cannot run; the message names the field (`sequences[2].context`). */
export class TransformerRequestError extends ModelRequestError {
  constructor(field: string, message: string) {
    super(field, message);
    this.name = 'TransformerRequestError';
  }
}

type Sequence = { context: ArrayLike<number>; tokens: ArrayLike<number> };

/** A LoRA spec's Generate rows (lora-graph.ts): one φ per adapter in the call, and each row's index into them. */
export interface RowAdapters {
  phis: Float32Array[];
  ofRow: number[];
}

const alignedContext = (rows: GenerateRow[]) => generateContextWidth(Math.max(0, ...rows.map((r) => r.context.length)));

/** S of the grid: the longest sequence minus its last token (nothing predicts past it). */
const gridLength = (seqs: Sequence[]) => Math.max(1, ...seqs.map((s) => s.context.length + s.tokens.length - 1));

/** Right-padded [B, S] token grid of whole sequences minus their last token, and targets = next tokens. */
interface SequenceGrid {
  B: number;
  S: number;
  tokens: BigInt64Array;
  targets: BigInt64Array;
}

export class TransformerRuntime implements ModelRuntime {
  private readonly sessions: PolicySessions;
  readonly paramCount: number;

  constructor(
    readonly spec: TransformerSpec,
    private readonly factory: SessionFactory,
    readonly rows: RowPolicy = { minRows: 2 },
  ) {
    this.paramCount = paramLayout(spec).total;
    this.sessions = new PolicySessions(factory, {
      generate: () => buildTransformerGenerateGraph(spec),
      score: () => buildTransformerScoreGraph(spec),
      update: () => buildTransformerUpdateGraph(spec),
    });
  }

  /** Builds the sessions now (a LoRA spec's sampler: Generate and Score only; its update is lora-update-graph.ts). */
  warm(): Promise<void> {
    return this.spec.lora ? Promise.all([this.sessions.get('generate'), this.sessions.get('score')]).then(() => undefined) : this.sessions.warm();
  }

  private checkLength(field: string, contextLength: number, total: number): void {
    const issue = transformerSequenceIssue(this.spec, contextLength, total);
    if (issue) throw new TransformerRequestError(issue.field ? `${field}.${issue.field}` : field, issue.message);
  }

  /**
   * One fused run over all rows (callers split batches larger than they want), or several when
   * the rows' KV caches, prefill and vocabulary-sized sampling values would not fit in the memory
   * budget or in one run's `microBatchBytes` together (memory.ts); rows are independent, so the
   * results are those of one run.
   */
  async generate(theta: Float32Array, rows: GenerateRow[], adapters?: RowAdapters): Promise<GenerateRowResult[]> {
    rows.forEach((r, b) => this.checkLength(`sequences[${b}]`, r.context.length, r.context.length + r.maxTokens));
    // a run's caches span the (aligned) longest context plus the most tokens (C + T), whichever rows they come from
    const span = alignedContext(rows) + Math.max(0, ...rows.map((r) => r.maxTokens));
    const { budgetBytes, microBatchBytes } = this.factory.memory;
    const perRun = rowsThatFit(this.spec, budgetBytes, generateBytesPerRow(this.spec, span), microBatchBytes);
    const out: GenerateRowResult[] = [];
    for (let at = 0; at < rows.length; at += perRun) {
      const run = adapters && { phis: adapters.phis, ofRow: adapters.ofRow.slice(at, at + perRun) };
      out.push(...(await this.generateRun(theta, rows.slice(at, at + perRun), run)));
    }
    return out;
  }

  largestRun(span: number): number {
    const { budgetBytes, microBatchBytes } = this.factory.memory;
    return Math.min(
      rowsThatFit(this.spec, budgetBytes, generateBytesPerRow(this.spec, span), microBatchBytes),
      rowsThatFit(this.spec, budgetBytes, scoreBytesPerSequence(this.spec, span), microBatchBytes),
    );
  }

  private async generateRun(theta: Float32Array, rows: GenerateRow[], adapters?: RowAdapters): Promise<GenerateRowResult[]> {
    const n = rows.length;
    if (n === 0) return [];
    const B = Math.max(n, this.rows.minRows);
    const V = this.spec.vocabSize;
    const C = alignedContext(rows);
    const context = new BigInt64Array(B * C); // left padding: token 0, masked in the graph
    const contextLen = new BigInt64Array(B).fill(1n);
    rows.forEach((r, b) => {
      for (let i = 0; i < r.context.length; i++) context[b * C + C - r.context.length + i] = BigInt(r.context[i]!);
      contextLen[b] = BigInt(r.context.length);
    });
    const sampling = samplingFeeds(rows, B, V);
    const out = await (
      await this.sessions.get('generate')
    ).run({
      theta: f32(theta, [theta.length]),
      context: i64(context, [B, C]),
      context_len: i64(contextLen, [B]),
      ...sampling.feeds,
      ...this.adapterFeeds(B, adapters),
    });
    return generatedRows(out, rows, B, V, sampling.stopMask);
  }

  /** A LoRA spec's adapter inputs of a Generate run of B rows (padding rows: adapter 0). */
  private adapterFeeds(B: number, adapters: RowAdapters | undefined): Record<string, ort.Tensor> {
    if (!this.spec.lora) return {};
    if (!adapters || adapters.phis.length === 0) throw new Error("transformer runtime: a LoRA spec generates with its rows' adapters");
    const Pa = adapters.phis[0]!.length;
    const stacked = new Float32Array(adapters.phis.length * Pa);
    adapters.phis.forEach((phi, k) => stacked.set(phi, k * Pa));
    const ofRow = new BigInt64Array(B);
    adapters.ofRow.forEach((k, b) => (ofRow[b] = BigInt(k)));
    return { adapters: f32(stacked, [adapters.phis.length, Pa]), adapter_of_row: i64(ofRow, [B]) };
  }

  /** `rows`: at least this many sequences (the rest are zero padding); `S`: the grid's length (default: what `seqs` need). */
  private grid(seqs: Sequence[], field: string, rows = this.rows.minRows, S = gridLength(seqs)): SequenceGrid {
    seqs.forEach((s, b) => this.checkLength(`${field}[${b}]`, s.context.length, s.context.length + s.tokens.length));
    const B = Math.max(seqs.length, rows);
    const tokens = new BigInt64Array(B * S);
    const targets = new BigInt64Array(B * S);
    seqs.forEach((s, b) => {
      const full = [...Array.from(s.context), ...Array.from(s.tokens)];
      for (let p = 0; p + 1 < full.length; p++) {
        tokens[b * S + p] = BigInt(full[p]!);
        targets[b * S + p] = BigInt(full[p + 1]!);
      }
    });
    return { B, S, tokens, targets };
  }

  /**
   * Log-prob and entropy of every given token; one array per sequence. Runs of as many sequences as
   * fit in the budget and one run's `microBatchBytes` (memory.ts): at 2,048 positions attention
   * scores are [H, S, S] per sequence, so 8 sequences at once would hold 1.5 GB. Rows are
   * independent, so the results are those of one run.
   */
  async score(theta: Float32Array, seqs: ScoreSequence[], adapter?: Float32Array): Promise<{ logprobs: Float32Array[]; entropy: Float32Array[] }> {
    // checked before any run, so an error names the sequence's index in the whole request
    seqs.forEach((s, b) => this.checkLength(`sequences[${b}]`, s.context.length, s.context.length + s.tokens.length));
    const { budgetBytes, microBatchBytes } = this.factory.memory;
    const S = gridLength(seqs); // every run has the whole batch's length: the same shapes as one run
    const perRun = rowsThatFit(this.spec, budgetBytes, scoreBytesPerSequence(this.spec, S), microBatchBytes);
    const out: { logprobs: Float32Array[]; entropy: Float32Array[] } = { logprobs: [], entropy: [] };
    for (let at = 0; at < seqs.length; at += perRun) {
      const run = await this.scoreRun(theta, seqs.slice(at, at + perRun), S, adapter);
      out.logprobs.push(...run.logprobs);
      out.entropy.push(...run.entropy);
    }
    return out;
  }

  private async scoreRun(
    theta: Float32Array,
    seqs: ScoreSequence[],
    S: number,
    adapter?: Float32Array,
  ): Promise<{ logprobs: Float32Array[]; entropy: Float32Array[] }> {
    const grid = this.grid(seqs, 'sequences', this.rows.minRows, S);
    const out = await (
      await this.sessions.get('score')
    ).run({
      theta: f32(theta, [theta.length]),
      tokens: i64(grid.tokens, [grid.B, grid.S]),
      targets: i64(grid.targets, [grid.B, grid.S]),
      ...(adapter ? { adapter: f32(adapter, [adapter.length]) } : {}),
    });
    const lp = out.logprobs!.data as Float32Array;
    const ent = out.entropy!.data as Float32Array;
    const at = (b: number, s: ScoreSequence) => b * grid.S + s.context.length - 1; // predicts tokens[0]
    return {
      logprobs: seqs.map((s, b) => lp.slice(at(b, s), at(b, s) + s.tokens.length)),
      entropy: seqs.map((s, b) => ent.slice(at(b, s), at(b, s) + s.tokens.length)),
    };
  }

  /**
   * K = settings.innerSteps fused AdamW steps on the whole batch, in one run; each step sums the
   * gradient over micro-batches of as many sequences as `memory.microBatchBytes` holds
   * (memory.ts; padding sequences have weight 0). The split depends only on the batch, the spec
   * and that setting, so the result is bitwise reproducible.
   */
  async update(state: OptimState, samples: UpdateSample[], s: UpdateSettings): Promise<UpdateOutput> {
    const batch = this.updateBatch(samples);
    const out = await (await this.sessions.get('update')).run({ ...optimizerFeeds(state, s), ...batch.feeds });
    return updateOutput(out, state, s.innerSteps, batch.trained);
  }

  /** An update's row inputs ([M, B, S]: M micro-batches, update-graph.ts) and its trained-token count; lora-runtime.ts feeds them too. */
  updateBatch(samples: UpdateSample[]): { feeds: Record<string, ort.Tensor>; trained: number } {
    // One sequence a micro-batch when fewer than minRows fit (2,048 positions at a large vocabulary): the split only
    // sets the summation order, fixed by batch, spec and setting, and an update's rows are not compared across runs.
    const perMicro = updateMicroBatchRows(this.spec, samples.length, gridLength(samples), this.factory.memory.microBatchBytes, this.rows.minRows);
    const micro = Math.max(1, Math.ceil(samples.length / perMicro));
    const grid = this.grid(samples, 'samples', micro * perMicro);
    const N = grid.B * grid.S;
    const advantages = new Float32Array(N);
    const oldLogprobs = new Float32Array(N);
    const weights = new Float32Array(N);
    const rowMask = new Float32Array(N);
    const refLogprobs = new Float32Array(N);
    const hasRef = new Uint8Array(N);
    let trained = 0;
    samples.forEach((x, b) => {
      for (let t = 0; t < x.tokens.length; t++) {
        if (x.lossMask[t] !== 1) continue;
        const r = b * grid.S + x.context.length - 1 + t;
        trained++;
        advantages[r] = x.advantages[t]!;
        oldLogprobs[r] = x.oldLogprobs[t]!;
        weights[r] = x.lossWeights[t]!;
        rowMask[r] = x.lossWeights[t] !== 0 ? 1 : 0;
        if (x.refLogprobs.length > 0) {
          refLogprobs[r] = x.refLogprobs[t]!;
          hasRef[r] = 1;
        }
      }
    });
    const dims = [micro, grid.B / micro, grid.S];
    return {
      trained,
      feeds: {
        tokens: i64(grid.tokens, dims),
        targets: i64(grid.targets, dims),
        advantages: f32(advantages, dims),
        old_logprobs: f32(oldLogprobs, dims),
        weights: f32(weights, dims),
        row_mask: f32(rowMask, dims),
        ref_logprobs: f32(refLogprobs, dims),
        has_ref: new ort.Tensor('bool', hasRef, dims),
      },
    };
  }
}

export const createRuntime = (spec: TransformerSpec, factory: SessionFactory, rows: RowPolicy): ModelRuntime => new TransformerRuntime(spec, factory, rows);
