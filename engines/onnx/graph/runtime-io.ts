/**
 * The host side every family's runtime shares around its ONNX sessions: the
 * generate / score / update sessions built once per spec, the sampling inputs
 * of a fused rollout and the decoding of its outputs (tiny-lm/sampling.ts's
 * graph contract), and the optimizer inputs and outputs of a fused K-step
 * update (tiny-lm/adamw.ts's contract). Families build their own token inputs.
 */
import * as ort from 'onnxruntime-node';
import { fillUniforms, STREAM_SAMPLING } from '../../families/philox';
import { biasCorrections } from '../ops/adamw';
import type { GenerateRow, GenerateRowResult, OptimState, SessionFactory, UpdateOutput, UpdateSettings } from '../model-runtime';
import { stepMetrics } from '../model-runtime';

export const f32 = (a: Float32Array, dims: number[]) => new ort.Tensor('float32', a, dims);
export const i64 = (a: BigInt64Array, dims: number[]) => new ort.Tensor('int64', a, dims);
export const scalar = (x: number) => new ort.Tensor('float32', Float32Array.of(x), []);

type Graphs = Record<'generate' | 'score' | 'update', () => Uint8Array>;

/** A spec's three sessions, each built on first use (weights are inputs, so models with the spec share them). */
export class PolicySessions {
  private readonly sessions = new Map<keyof Graphs, Promise<ort.InferenceSession>>();

  constructor(
    private readonly factory: SessionFactory,
    private readonly graphs: Graphs,
  ) {}

  get(label: keyof Graphs): Promise<ort.InferenceSession> {
    let s = this.sessions.get(label);
    if (!s) this.sessions.set(label, (s = this.factory.create(this.graphs[label](), label)));
    return s;
  }

  async warm(): Promise<void> {
    await Promise.all((['generate', 'score', 'update'] as const).map((l) => this.get(l)));
  }
}

/** Per-row sampling inputs of B ≥ rows.length rows and T token steps (padding rows: 1 token, greedy). */
export function samplingFeeds(rows: GenerateRow[], B: number, V: number): { feeds: Record<string, ort.Tensor>; stopMask: Uint8Array } {
  const T = Math.max(1, ...rows.map((r) => r.maxTokens));
  const uniforms = new Float32Array(B * T);
  const temperature = new Float32Array(B);
  const topK = new BigInt64Array(B);
  const topP = new Float32Array(B);
  const stopMask = new Uint8Array(B * V);
  const maxTokens = new BigInt64Array(B).fill(1n);
  rows.forEach((r, b) => {
    fillUniforms(r.seedKey, STREAM_SAMPLING, r.maxTokens, uniforms, b * T);
    temperature[b] = r.temperature;
    topK[b] = BigInt(r.topK);
    topP[b] = r.topP;
    for (const s of r.stopTokens) stopMask[b * V + s] = 1;
    maxTokens[b] = BigInt(r.maxTokens);
  });
  return {
    stopMask,
    feeds: {
      uniforms: f32(uniforms, [B, T]),
      temperature: f32(temperature, [B]),
      top_k: i64(topK, [B]),
      top_p: f32(topP, [B]),
      stop_mask: new ort.Tensor('bool', stopMask, [B, V]),
      max_tokens: i64(maxTokens, [B]),
      steps: i64(BigInt64Array.of(BigInt(T)), []),
    },
  };
}

/** Each row's tokens and log-probs from a rollout's [S, B] outputs, up to its stop token or maxTokens. */
export function generatedRows(
  out: ort.InferenceSession.OnnxValueMapType,
  rows: GenerateRow[],
  B: number,
  V: number,
  stopMask: Uint8Array,
): GenerateRowResult[] {
  const toks = out.tokens!.data as BigInt64Array;
  const lps = out.logprobs!.data as Float32Array;
  const slps = out.sample_logprobs!.data as Float32Array;
  const S = out.tokens!.dims[0]!;
  return rows.map((r, b) => {
    const res: GenerateRowResult = { tokens: [], logprobs: [], sampleLogprobs: [], stopReason: 'max_tokens' };
    for (let t = 0; t < S && t < r.maxTokens; t++) {
      const tok = Number(toks[t * B + b]);
      res.tokens.push(tok);
      res.logprobs.push(lps[t * B + b]!);
      res.sampleLogprobs.push(slps[t * B + b]!);
      if (stopMask[b * V + tok]) {
        res.stopReason = 'stop_token';
        break;
      }
    }
    return res;
  });
}

/** θ, AdamW state, loss and optimizer settings, and per-step bias corrections for K = innerSteps fused steps. */
export function optimizerFeeds(state: OptimState, s: UpdateSettings): Record<string, ort.Tensor> {
  const P = state.theta.length;
  const K = s.innerSteps;
  const beta1 = Math.fround(s.beta1);
  const beta2 = Math.fround(s.beta2);
  const bc = biasCorrections(Math.fround(s.lr), beta1, beta2, state.step + 1, K);
  return {
    theta: f32(state.theta, [P]),
    adam_m: f32(state.m, [P]),
    adam_v: f32(state.v, [P]),
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
  };
}

/** The new state, per-step metrics and trained-token count from an update session's outputs. */
export function updateOutput(out: ort.InferenceSession.OnnxValueMapType, state: OptimState, K: number, tokens: number): UpdateOutput {
  return {
    state: {
      theta: out.new_theta!.data as Float32Array,
      m: out.new_adam_m!.data as Float32Array,
      v: out.new_adam_v!.data as Float32Array,
      step: state.step + K,
    },
    steps: stepMetrics(out.metrics!.data as Float32Array, K),
    tokens,
  };
}
