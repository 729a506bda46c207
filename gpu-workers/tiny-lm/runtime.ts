/**
 * Runs the tiny-lm graphs for one spec: owns the three ONNX sessions (generate,
 * score, update — weights are inputs, so every model with this spec shares them),
 * builds input tensors and decodes outputs. No batching policy lives here
 * beyond row padding; see engine/ for queuing and coalescing.
 */
import * as ort from 'onnxruntime-node';
import { fillUniforms, STREAM_SAMPLING } from '../philox';
import { biasCorrections } from './adamw';
import type { GenerateRow, GenerateRowResult, ModelRuntime, OptimState, RowPolicy, ScoreSequence, SessionFactory, UpdateOutput, UpdateSample, UpdateSettings } from '../model-runtime';
import { stepMetrics } from '../model-runtime';
import { scoreRows, updateRows } from './batch';
import { buildGenerateGraph } from './generate-graph';
import { buildScoreGraph } from './score-graph';
import { paramLayout, TinyLmSpec, writeWindow } from './spec';
import { buildUpdateGraph } from './update-graph';

const f32 = (a: Float32Array, dims: number[]) => new ort.Tensor('float32', a, dims);
const i64 = (a: BigInt64Array, dims: number[]) => new ort.Tensor('int64', a, dims);
const scalar = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);

export class TinyLmRuntime implements ModelRuntime {
  private generateSession?: Promise<ort.InferenceSession>;
  private scoreSession?: Promise<ort.InferenceSession>;
  private updateSession?: Promise<ort.InferenceSession>;
  readonly paramCount: number;

  constructor(
    readonly spec: TinyLmSpec,
    private readonly factory: SessionFactory,
    readonly rows: RowPolicy = { minRows: 2 },
  ) {
    this.paramCount = paramLayout(spec).total;
  }

  private gen() {
    return (this.generateSession ??= this.factory.create(buildGenerateGraph(this.spec), 'generate'));
  }
  private sc() {
    return (this.scoreSession ??= this.factory.create(buildScoreGraph(this.spec), 'score'));
  }
  private upd() {
    return (this.updateSession ??= this.factory.create(buildUpdateGraph(this.spec), 'update'));
  }

  /** Build all sessions now (so the first request does not pay graph compilation). */
  async warm(): Promise<void> {
    await Promise.all([this.gen(), this.sc(), this.upd()]);
  }

  /** One fused run over all rows (callers split batches larger than they want). */
  async generate(theta: Float32Array, rows: GenerateRow[]): Promise<GenerateRowResult[]> {
    const n = rows.length;
    if (n === 0) return [];
    const B = Math.max(n, this.rows.minRows);
    const { vocabSize: V, contextWindow: W } = this.spec;
    let T = 1;
    for (const r of rows) T = Math.max(T, r.maxTokens);
    const context = new BigInt64Array(B * W).fill(BigInt(V));
    const uniforms = new Float32Array(B * T);
    const temperature = new Float32Array(B);
    const topK = new BigInt64Array(B);
    const topP = new Float32Array(B);
    const stopMask = new Uint8Array(B * V);
    const maxTokens = new BigInt64Array(B).fill(1n);
    rows.forEach((r, b) => {
      writeWindow(this.spec, r.context, r.context.length, context, b * W);
      fillUniforms(r.seedKey, STREAM_SAMPLING, r.maxTokens, uniforms, b * T);
      temperature[b] = r.temperature;
      topK[b] = BigInt(r.topK);
      topP[b] = r.topP;
      for (const s of r.stopTokens) stopMask[b * V + s] = 1;
      maxTokens[b] = BigInt(r.maxTokens);
    });
    const session = await this.gen();
    const out = await session.run({
      theta: f32(theta, [theta.length]),
      context: i64(context, [B, W]),
      uniforms: f32(uniforms, [B, T]),
      temperature: f32(temperature, [B]),
      top_k: i64(topK, [B]),
      top_p: f32(topP, [B]),
      stop_mask: new ort.Tensor('bool', stopMask, [B, V]),
      max_tokens: i64(maxTokens, [B]),
      steps: i64(BigInt64Array.of(BigInt(T)), []),
    });
    const toks = out.tokens.data as BigInt64Array;
    const lps = out.logprobs.data as Float32Array;
    const slps = out.sample_logprobs.data as Float32Array;
    const S = out.tokens.dims[0];
    return rows.map((r, b) => {
      const res: GenerateRowResult = { tokens: [], logprobs: [], sampleLogprobs: [], stopReason: 'max_tokens' };
      for (let t = 0; t < S && t < r.maxTokens; t++) {
        const tok = Number(toks[t * B + b]);
        res.tokens.push(tok);
        res.logprobs.push(lps[t * B + b]);
        res.sampleLogprobs.push(slps[t * B + b]);
        if (stopMask[b * V + tok]) {
          res.stopReason = 'stop_token';
          break;
        }
      }
      return res;
    });
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
      const session = await this.sc();
      const out = await session.run({
        theta: f32(theta, [theta.length]),
        windows: i64(windows, [N, W]),
        targets: i64(targets, [N]),
      });
      lp.set((out.logprobs.data as Float32Array).subarray(0, n), start);
      ent.set((out.entropy.data as Float32Array).subarray(0, n), start);
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
    const K = s.innerSteps;
    const beta1 = Math.fround(s.beta1);
    const beta2 = Math.fround(s.beta2);
    const bc = biasCorrections(Math.fround(s.lr), beta1, beta2, state.step + 1, K);
    const N = rows.rows;
    const session = await this.upd();
    const out = await session.run({
      theta: f32(state.theta, [this.paramCount]),
      adam_m: f32(state.m, [this.paramCount]),
      adam_v: f32(state.v, [this.paramCount]),
      windows: i64(rows.windows, [N, this.spec.contextWindow]),
      targets: i64(rows.targets, [N]),
      advantages: f32(rows.advantages, [N]),
      old_logprobs: f32(rows.oldLogprobs, [N]),
      weights: f32(rows.weights, [N]),
      row_mask: f32(rows.rowMask, [N]),
      ref_logprobs: f32(rows.refLogprobs, [N]),
      has_ref: new ort.Tensor('bool', rows.hasRef, [N]),
      clip_low: scalar(s.clipLow),
      clip_high: scalar(s.clipHigh),
      dual_clip: scalar(s.dualClip),
      kl_coef: scalar(s.klCoef),
      kl_is_k3: new ort.Tensor('bool', Uint8Array.of(s.klType === 'low_var_kl' ? 1 : 0), []),
      entropy_coef: scalar(s.entropyCoef),
      lr: scalar(s.lr),
      beta1: scalar(beta1),
      beta2: scalar(beta2),
      eps: scalar(s.eps),
      weight_decay: scalar(s.weightDecay),
      max_grad_norm: scalar(s.maxGradNorm),
      step_size: f32(bc.stepSize, [K]),
      bc2_sqrt: f32(bc.bc2Sqrt, [K]),
      steps: i64(BigInt64Array.of(BigInt(K)), []),
    });
    const steps = stepMetrics(out.metrics.data as Float32Array, K);
    return {
      state: {
        theta: out.new_theta.data as Float32Array,
        m: out.new_adam_m.data as Float32Array,
        v: out.new_adam_v.data as Float32Array,
        step: state.step + K,
      },
      steps,
      tokens: rows.n,
    };
  }
}

export const createRuntime = (spec: TinyLmSpec, factory: SessionFactory, rows: RowPolicy): ModelRuntime => new TinyLmRuntime(spec, factory, rows);
