/**
 * LoRA over a transformer (`spec.lora`): the base's θ (paramLayout) stays frozen, and each targeted
 * linear map W of every layer gains a low-rank update. With W stored [in, out] (y = x·W):
 *
 *   y = x·W + (α/r)·(x·Aᵀ)·Bᵀ,   A [r, in], B [out, r]   (PEFT's shapes: lora_A.weight, lora_B.weight)
 *
 * so the merged matrix is W + (α/r)·Aᵀ·Bᵀ. A LoRA version's bytes are the adapter only: per layer, per target
 * in LORA_TARGETS order, A then B, row-major float32. The PyTorch engine mirrors this (engines/pytorch/lora.py).
 */
import { fillUniforms, seedKey, STREAM_INIT } from '../philox';
import type { ModelSpec } from '../model-family';
import { paramLayout, type LoraSpec, type ParamSlot, type TransformerSpec } from './spec';

export interface AdapterSlot {
  /** `l0.q.A`, `l0.q.B` */
  name: string;
  layer: number;
  target: LoraSpec['targets'][number];
  matrix: 'A' | 'B';
  offset: number;
  /** [r, in] for A, [out, r] for B */
  shape: [number, number];
  size: number;
}

/** The adapter's flat layout, and the base slot each target updates. */
export function adapterLayout(s: TransformerSpec): { slots: AdapterSlot[]; total: number; base: Map<string, ParamSlot> } {
  const lora = s.lora;
  if (!lora) throw new Error('adapterLayout: the spec has no lora');
  const base = new Map(paramLayout(s).slots.map((x) => [x.name, x]));
  const slots: AdapterSlot[] = [];
  let offset = 0;
  for (let layer = 0; layer < s.layers; layer++) {
    for (const target of lora.targets) {
      const w = base.get(`l${layer}.w${target}`)!;
      const [fanIn, fanOut] = w.shape as [number, number];
      for (const [matrix, shape] of [
        ['A', [lora.rank, fanIn]],
        ['B', [fanOut, lora.rank]],
      ] as const) {
        const size = shape[0] * shape[1];
        slots.push({ name: `l${layer}.${target}.${matrix}`, layer, target, matrix, offset, shape: [shape[0], shape[1]], size });
        offset += size;
      }
    }
  }
  return { slots, total: offset, base };
}

/**
 * Version 0's adapter, as engines/pytorch/lora.py's init_adapter draws it (PEFT's init): A ~ U(±1/√in) from the
 * Philox uniforms (STREAM_INIT) at the slot's own offsets, computed in float64 and rounded once; B = 0, so
 * version 0 scores as the base.
 */
export function initAdapter(s: TransformerSpec, seed: bigint | number | string): Float32Array {
  const { slots, total } = adapterLayout(s);
  const u = new Float64Array(total);
  fillUniforms(seedKey(seed), STREAM_INIT, total, u);
  const phi = new Float32Array(total);
  for (const slot of slots) {
    if (slot.matrix !== 'A') continue;
    const bound = 1 / Math.sqrt(slot.shape[1]);
    for (let i = slot.offset; i < slot.offset + slot.size; i++) phi[i] = (2 * u[i]! - 1) * bound;
  }
  return phi;
}

/** α / r, in float32 as the engines use it. */
export const loraScale = (lora: LoraSpec): number => Math.fround(lora.alpha / lora.rank);

/** The base θ with every target's W + (α/r)·Aᵀ·Bᵀ: a plain transformer's θ (float64 sums, one float32 rounding). */
export function mergeLora(s: TransformerSpec, base: Float32Array, adapter: Float32Array): Float32Array {
  const { slots, total, base: baseSlots } = adapterLayout(s);
  if (adapter.length !== total) throw new Error(`mergeLora: the adapter has ${adapter.length} values, the spec needs ${total}`);
  const scale = loraScale(s.lora!);
  const out = Float32Array.from(base);
  for (let i = 0; i < slots.length; i += 2) {
    const a = slots[i]!;
    const b = slots[i + 1]!;
    const w = baseSlots.get(`l${a.layer}.w${a.target}`)!;
    const [r, fanIn] = a.shape;
    const fanOut = b.shape[0];
    for (let x = 0; x < fanIn; x++) {
      for (let y = 0; y < fanOut; y++) {
        let d = 0;
        for (let k = 0; k < r; k++) d += adapter[a.offset + k * fanIn + x]! * adapter[b.offset + y * r + k]!;
        out[w.offset + x * fanOut + y] = base[w.offset + x * fanOut + y]! + scale * d;
      }
    }
  }
  return out;
}

/** The spec without its lora: the base's. */
export function baseSpecOf(s: TransformerSpec): TransformerSpec {
  const { lora: _lora, ...base } = s;
  return base;
}

/** The spec as a LoRA transformer's, or undefined for any other model. */
export function loraSpecOf(s: ModelSpec): (TransformerSpec & { lora: LoraSpec }) | undefined {
  return s.family === 'transformer' && (s as TransformerSpec).lora ? (s as TransformerSpec & { lora: LoraSpec }) : undefined;
}
