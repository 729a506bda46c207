/**
 * Runs the tiny-lm graphs for one spec: owns the three ONNX sessions (generate,
 * score, update — weights are inputs, so every model with this spec shares them),
 * builds input tensors and decodes outputs. No batching policy lives here
 * beyond row padding; see engine/ for queuing and coalescing.
 */
import * as ort from 'onnxruntime-node';
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
import { scoreRows, updateRows } from './batch';
import { buildGenerateGraph } from './generate-graph';
import { buildScoreGraph } from './score-graph';
import { paramLayout, type TinyLmSpec, writeWindow } from '../../families/tiny-lm/spec';
import { buildUpdateGraph } from './update-graph';

export class TinyLmRuntime implements ModelRuntime {
  private readonly sessions: PolicySessions;
  readonly paramCount: number;

  constructor(
    readonly spec: TinyLmSpec,
    factory: SessionFactory,
    readonly rows: RowPolicy = { minRows: 2 },
  ) {
    this.paramCount = paramLayout(spec).total;
    this.sessions = new PolicySessions(factory, {
      generate: () => buildGenerateGraph(spec),
      score: () => buildScoreGraph(spec),
      update: () => buildUpdateGraph(spec),
    });
  }

  /** Build all sessions now (so the first request does not pay graph compilation). */
  warm(): Promise<void> {
    return this.sessions.warm();
  }

  /** One fused run over all rows (callers split batches larger than they want). */
  async generate(theta: Float32Array, rows: GenerateRow[]): Promise<GenerateRowResult[]> {
    const n = rows.length;
    if (n === 0) return [];
    const B = Math.max(n, this.rows.minRows);
    const { vocabSize: V, contextWindow: W } = this.spec;
    const context = new BigInt64Array(B * W).fill(BigInt(V));
    rows.forEach((r, b) => writeWindow(this.spec, r.context, r.context.length, context, b * W));
    const sampling = samplingFeeds(rows, B, V);
    const out = await (await this.sessions.get('generate')).run({ theta: f32(theta, [theta.length]), context: i64(context, [B, W]), ...sampling.feeds });
    return generatedRows(out, rows, B, V, sampling.stopMask);
  }

  /** Log-prob and entropy of every given token; returns one array per sequence. */
  async score(theta: Float32Array, seqs: ScoreSequence[]): Promise<{ logprobs: Float32Array[]; entropy: Float32Array[] }> {
    const all = scoreRows(this.spec, seqs, 0);
    const lp = new Float32Array(all.n);
    const ent = new Float32Array(all.n);
    const W = this.spec.contextWindow;
    const chunk = this.rows.maxRows ?? Infinity;
    for (let start = 0; start < all.n; start += chunk) {
      const n = Math.min(chunk, all.n - start);
      const N = Math.max(n, this.rows.minRows);
      const windows = new BigInt64Array(N * W).fill(BigInt(this.spec.vocabSize));
      windows.set(all.windows.subarray(start * W, (start + n) * W));
      const targets = new BigInt64Array(N);
      targets.set(all.targets.subarray(start, start + n));
      const session = await this.sessions.get('score');
      const out = await session.run({
        theta: f32(theta, [theta.length]),
        windows: i64(windows, [N, W]),
        targets: i64(targets, [N]),
      });
      lp.set((out.logprobs!.data as Float32Array).subarray(0, n), start);
      ent.set((out.entropy!.data as Float32Array).subarray(0, n), start);
    }
    const logprobs: Float32Array[] = [];
    const entropy: Float32Array[] = [];
    let r = 0;
    for (const s of seqs) {
      logprobs.push(lp.slice(r, r + s.tokens.length));
      entropy.push(ent.slice(r, r + s.tokens.length));
      r += s.tokens.length;
    }
    return { logprobs, entropy };
  }

  /** K = settings.innerSteps fused AdamW steps on the whole batch, in one run. */
  async update(state: OptimState, samples: UpdateSample[], s: UpdateSettings): Promise<UpdateOutput> {
    // Updates need no batch invariance (the batch is the input); 2 rows keep GEMMs on the M ≥ 2 kernel like Score.
    const rows = updateRows(this.spec, samples, 2);
    const N = rows.rows;
    const out = await (
      await this.sessions.get('update')
    ).run({
      ...optimizerFeeds(state, s),
      windows: i64(rows.windows, [N, this.spec.contextWindow]),
      targets: i64(rows.targets, [N]),
      advantages: f32(rows.advantages, [N]),
      old_logprobs: f32(rows.oldLogprobs, [N]),
      weights: f32(rows.weights, [N]),
      row_mask: f32(rows.rowMask, [N]),
      ref_logprobs: f32(rows.refLogprobs, [N]),
      has_ref: new ort.Tensor('bool', rows.hasRef, [N]),
    });
    return updateOutput(out, state, s.innerSteps, rows.n);
  }
}

export const createRuntime = (spec: TinyLmSpec, factory: SessionFactory, rows: RowPolicy): ModelRuntime => new TinyLmRuntime(spec, factory, rows);
