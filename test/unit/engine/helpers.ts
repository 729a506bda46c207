/** Shared fixtures for the engine unit tests. */
import * as ort from 'onnxruntime-node';
import { Engine, type EngineOptions } from '../../../engines/onnx/engine';
import type { ResolvedDevice } from '../../../engines/onnx/device';
import { paramLayout, type TinyLmSpec } from '../../../engines/families/tiny-lm/spec';
import { normalizeTransformerSpec, type TransformerSpec } from '../../../engines/families/transformer/spec';

export const CPU: ResolvedDevice = { device: 'cpu', requested: 'cpu', fellBack: false, fallbackReason: '' };

export function cpuEngine(opts: Partial<EngineOptions> = {}): Engine {
  return new Engine({ device: CPU, ...opts });
}

export function session(model: Uint8Array): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 3 });
}

/** Deterministic pseudo-random numbers for test data (not for the engine). */
export function rng(seed: number) {
  let s = seed >>> 0;
  const next = () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0;
    s ^= s >>> 12;
    return (s >>> 0) / 4294967296;
  };
  return {
    uniform: next,
    int: (n: number) => Math.floor(next() * n),
    range: (a: number, b: number) => a + (b - a) * next(),
  };
}

export function sameBits(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

/** Plain float64 TypeScript forward of tiny-lm: log-softmax over the vocabulary for one window. */
export function referenceLogp(spec: TinyLmSpec, theta: ArrayLike<number>, window: number[]): number[] {
  const slots = new Map(paramLayout(spec).slots.map((s) => [s.name, s]));
  const at = (name: string, i: number) => theta[slots.get(name)!.offset + i]!;
  const { embedDim: E, hiddenDim: H, vocabSize: V } = spec;
  const x: number[] = [];
  for (const tok of window) for (let e = 0; e < E; e++) x.push(at('emb', tok * E + e));
  const act = (z: number) => (spec.activation === 'tanh' ? Math.tanh(z) : Math.max(0, z));
  let h: number[] = [];
  for (let l = 0; l < spec.layers; l++) {
    const input = l === 0 ? x : h;
    const out: number[] = [];
    for (let j = 0; j < H; j++) {
      let z = at(`b${l}`, j);
      for (let i = 0; i < input.length; i++) z! += input[i]! * at(`w${l}`, i * H + j)!;
      out.push(l === 0 ? act(z!) : h[j]! + act(z!));
    }
    h = out;
  }
  const logits: number[] = [];
  for (let v = 0; v < V; v++) {
    let z = at('bo', v);
    for (let j = 0; j < H; j++) z! += h[j]! * at('wo', j * V + v)!;
    logits.push(z!);
  }
  const m = Math.max(...logits);
  const lse = m + Math.log(logits.reduce((a, z) => a + Math.exp(z - m), 0));
  return logits.map((z) => z - lse);
}

/** The transformer layouts the graph tests run: GPT-2, Llama and Qwen3 (free headDim, q/k norms), tiny. */
export const TINY_LAYOUTS: [string, TransformerSpec][] = [
  ['GPT-2 layout', normalizeTransformerSpec({ vocabSize: 13, width: 16, layers: 2, heads: 4, maxSeq: 16 })],
  [
    'Llama layout',
    normalizeTransformerSpec({
      vocabSize: 13,
      width: 16,
      layers: 2,
      heads: 4,
      kvHeads: 2,
      positions: 'rope',
      norm: 'rmsnorm',
      mlp: 'swiglu',
      bias: false,
      tiedHead: false,
      maxSeq: 16,
    }),
  ],
  [
    'Qwen3 layout (headDim 6, q/k norms)',
    normalizeTransformerSpec({
      vocabSize: 13,
      width: 16,
      layers: 2,
      heads: 4,
      kvHeads: 2,
      headDim: 6,
      qkNorm: true,
      positions: 'rope',
      norm: 'rmsnorm',
      mlp: 'swiglu',
      bias: false,
      maxSeq: 16,
    }),
  ],
];
